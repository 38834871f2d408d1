"""Probes for where a real pipeline stage's extra compute time comes from.

Real pipeline stages of the 8x1024 MLP compute up to 1.7x longer per micro-batch than the same
stages replayed in their schedule's order without communication (docs/simulate.md). Three
suspects, each measured in isolation (medians of ``--rounds`` rounds):

1. ``torch.distributed.pipelining``'s runtime: the whole MLP as one stage, 16 micro-batches per
   step, under torch's 1F1B and GPipe against a plain forward/loss/backward loop, per micro-batch.
2. A gloo operation pending during compute: a fixed piece of work (40 products with a
   1024x1024 weight, 30 products of 256x256 matrices) with nothing pending, with a receive posted
   and not yet satisfied, and with a 16 MB send not yet received.
3. Waking from a blocking receive: the same work right after computing, after a blocking receive
   of 5 and 20 ms, and after sleeping 5 ms; the peer either idle or computing.

    .venv/bin/python -m research.simulator_validation.probe_stage_overheads --out results/simulate/stage_overhead_probes

writes ``OUT.md``. Run it on an idle machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from paper_repro.build import make_optimizer
from paper_repro.distributed.config import PipelineConfig
from paper_repro.distributed.inputs import build_learner, data_spec, synthetic_batches
from paper_repro.distributed.baselines import StageModule
from .linkcal import _free_port
from .validate import machine_note

MLP = dict(model="mlp", model_kwargs={"depth": 8, "width": 1024}, image_size=32, optimizer="adam")


def _init(rank: int, world: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)


def _work():
    a, w, x = torch.randn(256, 256), torch.randn(1024, 1024), torch.randn(16, 1024)

    def run() -> float:
        t0 = time.perf_counter()
        for _ in range(40):
            x @ w
        for _ in range(30):
            a @ a
        return time.perf_counter() - t0

    def busy(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            a @ a
    return run, busy


def _runtime(rank: int, port: int, rounds: int, out: str) -> None:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    _init(rank, 1, port)
    B, M = 16, 16
    cfg = PipelineConfig(**MLP, stages=1, micro_batch=B, micro_batches=M, method="backprop").validate()
    _, spec = data_spec(cfg)
    net = build_learner(cfg, spec).net
    module = StageModule(list(net.blocks), net.head)
    opt = make_optimizer(cfg, list(module.parameters()))
    x, y = next(synthetic_batches(cfg, spec, torch.Generator().manual_seed(0)))
    stage = PipelineStage(module, 0, 1, torch.device("cpu"))
    schedules = {"torch 1F1B": Schedule1F1B(stage, M, loss_fn=net.loss),
                 "torch GPipe": ScheduleGPipe(stage, M, loss_fn=net.loss)}
    times = {"plain loop": [], **{k: [] for k in schedules}}
    for r in range(rounds + 1):
        for name in times:
            t0 = time.perf_counter()
            if name in schedules:
                schedules[name].step(torch.cat([x] * M), target=torch.cat([y] * M))
            else:
                for _ in range(M):
                    net.loss(module(x), y).backward()
            t1 = time.perf_counter()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if r:
                times[name].append((t1 - t0) / M)
    Path(out).write_text(json.dumps(times))
    dist.destroy_process_group()


def _pending(rank: int, port: int, rounds: int, out: str) -> None:
    _init(rank, 2, port)
    run, _ = _work()
    small, big = torch.zeros(16384), torch.zeros(4 << 20)
    times = {"nothing pending": [], "receive pending": [], "16 MB send pending": []}
    for _ in range(rounds):
        for mode in times:
            dist.barrier()
            if rank == 0:
                op = (dist.irecv(small, 1) if mode == "receive pending" else
                      dist.isend(big, 1) if mode.startswith("16 MB") else None)
                times[mode].append(run())
                if op is not None:
                    op.wait()
            else:
                time.sleep(0.08)        # the peer stays idle while rank 0 computes
                if mode == "receive pending":
                    dist.send(small, 0)
                elif mode.startswith("16 MB"):
                    dist.recv(torch.empty_like(big), 0)
    if rank == 0:
        Path(out).write_text(json.dumps(times))
    dist.destroy_process_group()


def _wake(rank: int, port: int, rounds: int, out: str, peer_busy: bool) -> None:
    _init(rank, 2, port)
    run, busy = _work()
    buf = torch.zeros(16384)
    times = {"after computing": [], "after a 5 ms blocking receive": [], "after a 20 ms blocking receive": [],
             "after sleeping 5 ms": []}
    for _ in range(rounds):
        for mode in times:
            dist.barrier()
            if rank == 0:
                if mode == "after computing":
                    busy(0.005)
                elif "blocking" in mode:
                    dist.recv(buf, 1)
                else:
                    time.sleep(0.005)
                times[mode].append(run())
            else:
                if "blocking" in mode:
                    (busy if peer_busy else time.sleep)(0.005 if "5 ms" in mode else 0.02)
                    dist.send(buf, 0)
                if peer_busy:
                    busy(0.04)
    if rank == 0:
        Path(out).write_text(json.dumps(times))
    dist.destroy_process_group()


def _probe(fn, nprocs: int, rounds: int, *extra) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "times.json")
        mp.start_processes(fn, args=(_free_port(), rounds, out, *extra), nprocs=nprocs, start_method="spawn")
        times = json.loads(Path(out).read_text())
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20, help="rounds per probe (medians)")
    ap.add_argument("--out", required=True, help="output path without suffix (.md)")
    args = ap.parse_args(argv)
    before, t0 = machine_note(), time.time()
    probes = {
        "1. torch runtime, whole MLP as one stage, ms per micro-batch of 16":
            _probe(_runtime, 1, max(args.rounds // 4, 3)),
        "2. fixed work, ms, peer idle": _probe(_pending, 2, args.rounds),
        "3a. fixed work, ms, peer idle": _probe(_wake, 2, args.rounds, False),
        "3b. fixed work, ms, peer computing": _probe(_wake, 2, args.rounds, True),
    }
    lines = ["# Where a pipeline stage's extra compute time does not come from", "",
             f"Medians; measured on {before} ({time.time() - t0:.0f} s). Made with "
             f"`{' '.join(['.venv/bin/python', '-m', 'research.simulator_validation.probe_stage_overheads', *sys.argv[1:]])}`.", ""]
    for title, values in probes.items():
        lines += [f"## {title}", "", "| condition | median |", "|---|---|"]
        lines += [f"| {k} | {v:.2f} |" for k, v in values.items()] + [""]
    Path(f"{args.out}.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
