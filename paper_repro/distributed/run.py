"""The worker: one process per stage. Launched by ``torchrun`` or by :mod:`.launch`.

    torchrun --nproc-per-node 4 -m paper_repro.distributed.run \\
        --model resnet34 --image-size 224 --stages 4 --micro-batch 8 --micro-batches 16 \\
        --schedule local,1f1b-recompute --device cuda --json results.json

Every process builds the whole learner from the same seed, plans the stages, keeps its own
modules and runs the schedule; rank 0 gathers the per-stage measurements, prints the table
and writes the JSON. Several schedules and micro-batch sizes given as comma lists run one
after the other in the same processes (start-up is paid once).
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from ..hardware import hardware_label
from . import comm
from .arguments import add_arguments
from .baselines import run_pipelined_backprop
from .config import PipelineConfig
from .fields import TrainingFields
from .ddp import run_ddp
from .inputs import label_info, micro_batches, prefetched
from .local import run_local
from .options import configs_from_args
from .planning import keep_only, prepare, write_json
from .replicas import Placement, place
from .report import named
from ..report_table import format_table
from .cut import boundary_records, stage_blocks, stage_boundaries, stage_indices
from .timing import predicted_comm
from .training import STOP_REQUEST, Session, StopSignals, check_training, eval_copy


# ------------------------------------------------------------------------------ one run
def input_stream(cfg: PipelineConfig, ds, spec, seed: int, skip: int = 0, keep=None):
    """The micro-batches this process reads (see :func:`.inputs.micro_batches`), drawn ahead in a
    thread where ``cfg.prefetches``."""
    batches = micro_batches(cfg, ds, spec, seed, skip, keep)
    return prefetched(batches) if cfg.prefetches else batches


def ddp_share(cfg: PipelineConfig, rank: int):
    """Training with DDP: rank ``r`` reads micro-batches ``r * M/S .. (r+1) * M/S - 1`` of each
    step of the one stream single-process training reads."""
    per_rank = cfg.micro_batches // cfg.stages
    return lambda j: (j % cfg.micro_batches) // per_rank == rank


def run_one(ctx: comm.Context, cfg: PipelineConfig, where: Placement, index: int = 0,
            training=None, signals=None) -> dict | None:
    """Run ``cfg`` in this process; rank 0 returns the gathered record (a training run's result
    with ``training``, a :class:`.fields.TrainingFields`), the others None."""
    if cfg.processes != ctx.world:
        raise ValueError(f"stages={cfg.stages} x dp={cfg.dp} = {cfg.processes} processes, but {ctx.world} "
                         "were started")
    planned = prepare(cfg, ctx, key=f"cut/{index}")
    cfg, ds, spec, learner, infos, plan = (planned.config, planned.data, planned.spec, planned.learner,
                                           planned.infos, planned.stages)
    session = None
    if training is not None:
        whole = eval_copy(cfg, learner).to(ctx.device) if ctx.rank == 0 else None
        session = Session(ctx, cfg, training, planned, where, whole, signals, index)
    done = session.micro_batches_done if session is not None else 0
    grad_bytes = sum(p.numel() * p.element_size() for p in learner.net.parameters())
    s = where.stage
    if ctx.device.type == "cuda":     # the peak from here; what an earlier run left in cycles is freed first
        gc.collect()
        torch.cuda.reset_peak_memory_stats(ctx.device)
    if cfg.schedule == "ddp" and session is not None:     # one stream, each rank its share
        batches = input_stream(cfg, ds, spec, cfg.seed, done, ddp_share(cfg, ctx.rank))
        stats = run_ddp(ctx, cfg, learner, plan, infos, spec, batches, session)
    elif cfg.schedule == "ddp":
        batches = input_stream(cfg, ds, spec, cfg.seed + 1000 * s)
        stats = run_ddp(ctx, cfg, learner, plan, infos, spec, batches)
    else:
        # stage 0 of replica d reads its own stream: replica 0 reads what a dp=1 run reads
        batches = input_stream(cfg, ds, spec, cfg.seed + 1000 * where.replica, done) if s == 0 else None
        if cfg.schedule == "local":
            keep_only(learner, plan.blocks[s], plan.modules[s])
            learner.to(ctx.device)
            stats = run_local(ctx, cfg, learner, plan, infos, spec, batches, where, session)
        else:
            blocks = stage_blocks(cfg, plan, len(learner.net.blocks))
            mine = stage_indices(cfg.schedule, s, plan.stages)
            keep_only(learner, sorted(b for v in mine for b in blocks[v]),
                      [learner.num_modules - 1] if len(blocks) - 1 in mine else [])
            stats = run_pipelined_backprop(ctx, cfg, learner, plan, infos, spec, batches, where, session)
    if session is not None:
        result = session.finish(stats["optimizer_impl"])
        dist.barrier()
        return result
    stats.update({"stage": s, "replica": where.replica})
    if cfg.save_params:
        out = Path(cfg.save_params)
        out.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu() for k, v in learner.state_dict().items()}
        name = f"stage{s}.pt" if where.replica == 0 else f"stage{s}_replica{where.replica}.pt"
        torch.save({"plan": plan.to_dict(), "cut_at_blocks": cfg.cut_at_blocks, "state": state}, out / name)
    gathered = [None] * ctx.world if ctx.rank == 0 else None
    dist.gather_object(stats, gathered, dst=0)
    dist.barrier()
    if ctx.rank != 0:
        return None
    return summarize(cfg, plan, infos, spec, gathered, grad_bytes, ctx.device)


def summarize(cfg: PipelineConfig, plan, infos, spec, per_stage: list[dict], grad_bytes: int,
              device: torch.device) -> dict:
    """The run's record: throughput, busy fractions, bytes per sample, memory per stage."""
    B = cfg.micro_batch
    lasts = [st for st in per_stage if st["stage"] == cfg.stages - 1]  # one per replica
    window = max(st["window_s"] for st in lasts)
    samples_per_s = sum(st["samples_timed"] for st in lasts) / window if window else None
    all_samples = cfg.total_micro_batches * B * cfg.dp
    sent: dict[str, float] = {}
    for st in per_stage:
        for k, v in st["sent_bytes"].items():
            sent[k] = sent.get(k, 0) + v
    if cfg.schedule == "ddp":
        measured = {"forward": 0.0, "backward": sent.get("allreduce_ring_estimate", 0) / all_samples,
                    "forward_activations": 0.0, "forward_labels": 0.0}
    else:
        measured = {"forward": (sent.get("activations", 0) + sent.get("labels", 0)) / all_samples,
                    "backward": sent.get("gradients", 0) / all_samples,
                    "forward_activations": sent.get("activations", 0) / all_samples,
                    "forward_labels": sent.get("labels", 0) / all_samples}
    predicted = predicted_comm(cfg, plan, infos, spec, grad_bytes)
    lshape, ldtype = label_info(spec)
    return {
        "schedule": cfg.schedule,
        "method": cfg.local_method if cfg.schedule == "local" else "backprop",
        "model": cfg.model, "model_kwargs": cfg.model_kwargs, "image_size": cfg.image_size,
        "stages": cfg.stages, "dp": cfg.dp, "processes": cfg.processes,
        "micro_batch": B, "micro_batches": cfg.micro_batches,
        "optimizer": cfg.optimizer, "update_every": cfg.update_every if cfg.schedule == "local" else None,
        "optimizer_steps_per_step": (cfg.micro_batches // cfg.update_every) if cfg.schedule == "local" else 1,
        "steps": cfg.steps, "warmup_steps": cfg.warmup_steps,
        "samples_per_s": samples_per_s,
        "busy_fraction_per_stage": [st["busy_fraction"] for st in per_stage],
        "comm_bytes_per_sample": {"forward": measured["forward"], "backward": measured["backward"]},
        "comm_bytes_detail_per_sample": measured,
        "comm_bytes_predicted_per_sample": {k: v for k, v in predicted.items() if k != "per_boundary"},
        "comm_bytes_predicted_per_boundary": predicted["per_boundary"],
        "peak_mem_bytes_per_stage": [st["memory"]["peak_bytes"] for st in per_stage],
        "memory_per_stage": [st["memory"] for st in per_stage],
        "memory_method": per_stage[0]["memory"]["method"],
        "stage_plan": plan.to_dict(), "cut": cfg.cut, "input_prefetch": cfg.prefetches,
        "cut_at_blocks": cfg.cut_at_blocks,
        "optimizer_impl": sorted({st["optimizer_impl"] for st in per_stage}),
        "boundaries": boundary_records(plan, infos, B, stage_boundaries(cfg, plan, len(infos))),
        "labels": {"shape": [B, *lshape], "dtype": str(ldtype).replace("torch.", "")},
        "dtype": cfg.dtype, "device": device.type, "hardware": hardware_label(str(device)),
        "threads_per_process": torch.get_num_threads(),
        "data": "synthetic random tensors" if cfg.dataset == "synthetic" else cfg.dataset,
        "torch": torch.__version__,
        "per_stage": per_stage,
    }


# ------------------------------------------------------------------------------ the worker
def default_threads(device: str) -> int:
    """The cores of this node shared among its stage processes (on a GPU too: its CPU side draws
    the input and launches the kernels, and S processes with every core each would contend)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1"))))


def worker(configs: list[PipelineConfig], json_path: str | None = None, quiet: bool = False,
           partial_path: str | None = None, training=None) -> int:
    """Run ``configs`` in this process (one stage); returns the exit status. ``partial_path``:
    rank 0 rewrites the finished records there after each run (what an interrupted launch keeps).
    With ``training`` (:class:`.fields.TrainingFields`) the one config is trained (see
    :mod:`.training`); Ctrl-C or SIGTERM to this process stops every process after a common step,
    and it then exits with 130 or 143."""
    ctx = None
    signals = StopSignals() if training is not None else None
    try:
        if signals is not None:
            signals.__enter__()
        first = configs[0]
        if any(c.device != first.device or c.stages != first.stages for c in configs):
            raise ValueError("all runs of one launch must share device and stages")
        torch.set_num_threads(first.threads or default_threads(first.device))
        ctx = comm.init(first.device, max(c.timeout for c in configs), first.heartbeat_timeout,
                        max(c.init_timeout for c in configs))
        if any(c.dp != first.dp for c in configs):
            raise ValueError("all runs of one launch must share dp")
        margin = comm.NCCL_MARGIN_S if ctx.backend == "nccl" else 0.0      # as the world group's (comm.init)
        where = place(ctx.rank, ctx.world, first.stages, first.dp, max(c.timeout for c in configs) + margin)
        records = []
        for index, cfg in enumerate(configs):
            record = run_one(ctx, cfg, where, index, training, signals)
            if record is not None:
                records.append(record if training is not None else named([record])[0])
                if partial_path:
                    write_json(records, partial_path)
            if training is not None:                # stopped by Ctrl-C / SIGTERM: no further run
                go = f"launch/{index}/go"           # rank 0 decides, so that every process agrees
                if ctx.rank == 0:
                    ctx.store.set(go, "0" if ctx.store.check([STOP_REQUEST]) else "1")
                if ctx.store.get(go) == b"0":
                    break
        comm.finish(ctx)
        if ctx.rank == 0:
            if json_path:
                write_json(records, json_path)
            if not quiet and training is None:
                print(format_table(records))
        comm.shutdown(ctx)
        return 128 + signals.received if signals is not None and signals.received else 0
    except BaseException as err:  # noqa: BLE001 - every failure must end the process with a message
        code = comm.handle_exception(ctx, err)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper_repro.distributed.run", description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--configs", default=None, help="a JSON list of PipelineConfig dicts (the launcher's way)")
    parser.add_argument("--quiet", action="store_true", help="rank 0 does not print the table")
    parser.add_argument("--training", default=None,
                        help="a JSON dict of TrainingFields: train the one config (the trainer's way)")
    parser.add_argument("--partial", default=None,
                        help="rank 0 writes the finished runs here after each one (the launcher's way)")
    args = parser.parse_args(argv)
    try:
        if args.configs:
            configs = [PipelineConfig(**c).validate() for c in json.loads(Path(args.configs).read_text())]
        else:
            configs = configs_from_args(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    training = TrainingFields(**json.loads(Path(args.training).read_text())) if args.training else None
    if training is not None:                        # every step of a training run trains
        try:
            configs = [dataclasses.replace(c, warmup_steps=0) for c in configs]
            for c in configs:
                check_training(c, training)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    return worker(configs, args.json, args.quiet, args.partial, training)


if __name__ == "__main__":
    sys.exit(main())
