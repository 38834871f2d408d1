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

from .. import methods
from ..hardware import hardware_label
from . import comm
from .arguments import add_arguments
from .baselines import run_pipelined_backprop
from .config import DTYPES, MULTI_STAGE, PipelineConfig
from .ddp import run_ddp
from .inputs import build_learner, data_spec, label_info, micro_batches, prefetched
from .local import keep_only, run_local
from .options import configs_from_args
from .replicas import Placement, place
from ..report_table import format_table
from .split import (balanced_split, boundary_info, boundary_records, plan_stages, stage_blocks,
                    stage_boundaries, stage_indices)
from .timing import block_split, chunk_split, flops_chunk_split, predicted_comm, time_split


# ------------------------------------------------------------------------------ one run
def _measured(ctx: comm.Context | None, key: str, measure) -> list[int]:
    """``measure()`` here (one process), or on rank 0 shared through the store under ``key``,
    so that every process uses the same measured cut."""
    if ctx is None or ctx.rank == 0:
        value = measure()
        if ctx is not None:
            ctx.store.set(key, json.dumps(value))
        return value
    return json.loads(ctx.store.get(key))


def timed_update_every(cfg: PipelineConfig) -> int:
    """The optimizer steps per micro-batch a measured cut assumes: the local schedule's own;
    every other schedule steps once per step, so it is cut like ``local/M``."""
    return cfg.update_every if cfg.schedule == "local" else cfg.micro_batches


def prepare(cfg: PipelineConfig, ctx: comm.Context | None = None, key: str = "split"):
    """(data set, spec, learner, block infos, plan) for ``cfg``: the same in every process.

    With ``balance="flops"`` and no method, the local method is ``chunked@...`` cut by forward
    FLOPs (:func:`.timing.flops_chunk_split`); with ``balance="blocks"`` it is ``chunked-S``
    and the two-stages-per-process cut is ``chunked-2S``'s blocks.
    With ``balance="time"`` and no explicit split, the cut comes from timing: without a
    ``method``, the local method becomes ``chunked@...``, one chunk per stage cut by measured
    time (:func:`.timing.chunk_split`, stored into ``cfg.method``); a method with more modules
    than stages is cut by timing its modules (:func:`.timing.time_split`). The pipelined-backprop
    schedules get the cut of ``local/M`` (one optimizer step per step, as they take). A
    two-stages-per-process schedule without ``block_split``
    also times the blocks (:func:`.timing.block_split`, stored into ``cfg.block_split``). In a
    pipeline (``ctx`` given) rank 0 measures and shares the result through the store under
    ``key``, so every process plans the same cut."""
    ds, spec = data_spec(cfg)
    timed = dataclasses.replace(cfg, update_every=timed_update_every(cfg))
    if cfg.method is None and cfg.split is None and cfg.balance == "time" and cfg.stages > 1:
        starts = _measured(ctx, key + "/chunks", lambda: chunk_split(timed, spec))
        cfg.method = "chunked@" + ",".join(str(b) for b in starts)
    elif cfg.method is None and cfg.split is None and cfg.balance == "flops" and cfg.stages > 1:
        cfg.method = "chunked@" + ",".join(str(b) for b in flops_chunk_split(cfg, spec))
    learner = build_learner(cfg, spec)
    infos = boundary_info(learner, spec, DTYPES[cfg.dtype])
    split = cfg.split
    if split is None and cfg.balance == "time" and cfg.stages < learner.num_modules:
        split = _measured(ctx, key, lambda: time_split(learner, spec, timed))
    if cfg.schedule in MULTI_STAGE and cfg.block_split is None:
        if cfg.balance == "time":
            cfg.block_split = _measured(ctx, key + "/blocks", lambda: block_split(learner, spec, cfg, 2 * cfg.stages))
        elif cfg.balance == "blocks":
            cfg.block_split = [b[0] for b in methods.module_blocks(f"chunked-{2 * cfg.stages}", len(infos))[1:]]
        else:
            flops = [info.flops for info in infos]
            flops[-1] += infos[-1].head_flops  # the net's own head
            cfg.block_split = balanced_split(flops, 2 * cfg.stages)
    plan = plan_stages(learner, cfg.stages, split, None if cfg.balance == "blocks" else infos)
    return ds, spec, learner, infos, plan


def input_stream(cfg: PipelineConfig, ds, spec, seed: int):
    """The micro-batches this process reads, drawn ahead in a thread where ``cfg.prefetches``."""
    batches = micro_batches(cfg, ds, spec, seed)
    return prefetched(batches) if cfg.prefetches else batches


def run_one(ctx: comm.Context, cfg: PipelineConfig, where: Placement, index: int = 0) -> dict | None:
    """Run ``cfg`` in this process; rank 0 returns the gathered record, the others None."""
    if cfg.processes != ctx.world:
        raise ValueError(f"stages={cfg.stages} x dp={cfg.dp} = {cfg.processes} processes, but {ctx.world} "
                         "were started")
    ds, spec, learner, infos, plan = prepare(cfg, ctx, key=f"split/{index}")
    grad_bytes = sum(p.numel() * p.element_size() for p in learner.net.parameters())
    s = where.stage
    if ctx.device.type == "cuda":     # the peak from here; what an earlier run left in cycles is freed first
        gc.collect()
        torch.cuda.reset_peak_memory_stats(ctx.device)
    if cfg.schedule == "ddp":
        batches = input_stream(cfg, ds, spec, cfg.seed + 1000 * s)
        stats = run_ddp(ctx, cfg, learner, plan, infos, spec, batches)
    else:
        # stage 0 of replica d reads its own stream: replica 0 reads what a dp=1 run reads
        batches = input_stream(cfg, ds, spec, cfg.seed + 1000 * where.replica) if s == 0 else None
        if cfg.schedule == "local":
            keep_only(learner, plan.blocks[s], plan.modules[s])
            learner.to(ctx.device)
            stats = run_local(ctx, cfg, learner, plan, infos, spec, batches, where)
        else:
            blocks = stage_blocks(cfg, plan, len(learner.net.blocks))
            mine = stage_indices(cfg.schedule, s, plan.stages)
            keep_only(learner, sorted(b for v in mine for b in blocks[v]),
                      [learner.num_modules - 1] if len(blocks) - 1 in mine else [])
            stats = run_pipelined_backprop(ctx, cfg, learner, plan, infos, spec, batches, where)
    stats.update({"stage": s, "replica": where.replica})
    if cfg.save_params:
        out = Path(cfg.save_params)
        out.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu() for k, v in learner.state_dict().items()}
        name = f"stage{s}.pt" if where.replica == 0 else f"stage{s}_replica{where.replica}.pt"
        torch.save({"plan": plan.to_dict(), "block_split": cfg.block_split, "state": state}, out / name)
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
        "split": plan.to_dict(), "balance": cfg.balance, "input_prefetch": cfg.prefetches,
        "block_split": cfg.block_split,
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
           partial_path: str | None = None) -> int:
    """Run ``configs`` in this process (one stage); returns the exit status. ``partial_path``:
    rank 0 rewrites the finished records there after each run (what an interrupted launch keeps)."""
    ctx = None
    try:
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
            record = run_one(ctx, cfg, where, index)
            if record is not None:
                records.append(record)
                if partial_path:
                    write_json(records, partial_path)
        comm.finish(ctx)
        if ctx.rank == 0:
            if json_path:
                write_json(records, json_path)
            if not quiet:
                print(format_table(records))
        comm.shutdown(ctx)
        return 0
    except BaseException as err:  # noqa: BLE001 - every failure must end the process with a message
        code = comm.handle_exception(ctx, err)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def write_json(records: list[dict], path: str) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(records, indent=1, default=str))
    tmp.replace(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper_repro.distributed.run", description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--configs", default=None, help="a JSON list of PipelineConfig dicts (the launcher's way)")
    parser.add_argument("--quiet", action="store_true", help="rank 0 does not print the table")
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
    return worker(configs, args.json, args.quiet, args.partial)


if __name__ == "__main__":
    sys.exit(main())
