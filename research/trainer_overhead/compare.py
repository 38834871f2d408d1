"""Does training on several processes cost more per step than the benchmark of the same pipeline?

``paper-repro train --stages S`` runs the benchmark's stage loops with a training session on top
(loss rows, the stop check once per step, evaluations). This times both on the same configuration,
interleaved, evaluation left out: the benchmark's seconds per step over its timed window, and the
trainer's over its steps after the first (its clock starts when every process has started; the
first step is left out as the benchmark's warm-up is), with no evaluation but the one at the end.

    .venv/bin/python -m research.trainer_overhead.compare --data-dir /path/to/cifar10 --repeats 3 \\
        --out research/trainer_overhead/results_cpu2.md

Prints (and writes) one row per schedule: the median over repeats of each side's seconds per
step, their ratio (trainer / benchmark) and its range over repeats.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

from paper_repro.distributed import PipelineConfig
from paper_repro.distributed.bench import run_pipeline
from paper_repro.distributed.fields import TrainingFields
from paper_repro.distributed.trainer import train_many
from paper_repro.hardware import hardware_label

SCHEDULES = {"local": ("local", 1), "local/M": ("local", None), "1f1b": ("1f1b", 1), "ddp": ("ddp", 1)}


def configs(args) -> dict[str, PipelineConfig]:
    out = {}
    for name, (schedule, every) in SCHEDULES.items():
        out[name] = PipelineConfig(
            model="mlp", model_kwargs={"depth": 10, "width": 256, "layer_norm": True}, dataset="cifar10",
            data_dir=args.data_dir, data_kwargs={"image_size": 8, "max_test": 2000}, stages=2, schedule=schedule,
            method="chunked-2" if schedule == "local" else None, cut="blocks",
            update_every=every or args.micro_batches, micro_batch=args.micro_batch,
            micro_batches=args.micro_batches, steps=args.steps, warmup_steps=1, lr=1e-3, threads=1)
    return out


def bench_seconds(records: list[dict]) -> list[float]:
    return [r["micro_batch"] * r["micro_batches"] / r["samples_per_s"] for r in records]


def trainer_seconds(results) -> list[float]:
    out = []
    for r in results:
        t = r.records["wall_time"].to_numpy()
        per_step = len(r.records) // r.config.steps       # updates per step (local: micro-batches)
        out.append((t[-1] - t[per_step - 1] - r.eval_time) / (r.config.steps - 1))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", required=True, help="CIFAR-10 (pickles or an ImageFolder tree)")
    p.add_argument("--micro-batch", type=int, default=64)
    p.add_argument("--micro-batches", type=int, default=16)
    p.add_argument("--steps", type=int, default=8, help="timed steps of each side")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None, help="write the table here (Markdown)")
    args = p.parse_args(argv)
    cfgs = configs(args)
    seconds = {name: {"bench": [], "trainer": []} for name in cfgs}
    for _ in range(args.repeats):                       # interleaved: a change of load touches both
        for name, cfg in cfgs.items():
            [record] = run_pipeline(cfg, progress=False)
            seconds[name]["bench"] += bench_seconds([record])
            training = TrainingFields(eval_every=0, eval_examples=200)
            [result] = train_many([dataclasses.replace(cfg, warmup_steps=0, steps=args.steps + 1)], training,
                                  progress=False)
            seconds[name]["trainer"] += trainer_seconds([result])
    lines = [f"Trainer vs benchmark, seconds per step: 10x256 MLP + LayerNorm, CIFAR-10 8 px, 2 processes, "
             f"micro-batch {args.micro_batch} x {args.micro_batches}, {args.steps} timed steps, "
             f"{args.repeats} interleaved repeats, {hardware_label('cpu')}", "",
             "| schedule | bench s/step | trainer s/step | trainer / bench | range over repeats |",
             "|---|---:|---:|---:|---:|"]
    for name, s in seconds.items():
        ratios = [t / b for t, b in zip(s["trainer"], s["bench"])]
        lines.append(f"| {name} | {statistics.median(s['bench']):.4f} | {statistics.median(s['trainer']):.4f} | "
                     f"{statistics.median(ratios):.3f} | {min(ratios):.3f}-{max(ratios):.3f} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
