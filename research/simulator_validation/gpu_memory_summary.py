"""The committed GPU memory checks against the current accounting, from the stored tables alone.

Each ``results/simulate/gpu_memory_check_*.md`` holds, per schedule and stage, what the device's
allocator measured (``cuda_measured``) and what the accounting of its day predicted. This
accounts every row again with :func:`paper_repro.simulate.memory.stage_memory` as it is now (the
configuration is read from the table's header) and writes one summary: per table and schedule,
accounted / measured over the stages (min-max) and for the processor that needs the most.

    python -m research.simulator_validation.gpu_memory_summary --out results/simulate/gpu_memory_summary.md
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from paper_repro import methods
from paper_repro.distributed.config import PipelineConfig
from .memcheck import read_table, worst_stage
from paper_repro.simulate.memory import MetaNet, stage_memory

STORE = Path(__file__).resolve().parents[2] / "results/simulate"
HEADER = re.compile(r"^(\w+) (\{.*\}) at (\d+) px, (\d+) stages, micro-batch (\d+), (\d+) micro-batches per step, "
                    r"(\w+)\.$", re.M)


def config(text: str) -> PipelineConfig:
    m = HEADER.search(text)
    if not m:
        raise ValueError("the table's header does not name its configuration")
    model, kwargs, size, stages, B, M, optimizer = m.groups()
    if kwargs != "{}":
        raise ValueError(f"model arguments {kwargs} are not read back; only the default models")
    classes = 1000 if model.startswith("resnet") and int(size) >= 224 else PipelineConfig().num_classes
    return PipelineConfig(model=model, image_size=int(size), num_classes=classes, stages=int(stages),
                          micro_batch=int(B), micro_batches=int(M), optimizer=optimizer).validate()


def reaccount(path: Path) -> tuple[PipelineConfig, list[dict]]:
    """The table's rows with ``peak_predicted`` and ``peak_ratio`` from today's accounting."""
    cfg = config(path.read_text())
    meta = MetaNet(cfg)
    cut = methods.module_blocks(f"chunked-{cfg.stages}", meta.blocks)
    rows = read_table(path)
    predicted = {s: stage_memory(meta, s, cfg.stages, cfg.micro_batch, cfg.micro_batches, cut, cfg.optimizer,
                                 first_step_inference=False) for s in dict.fromkeys(r["schedule"] for r in rows)}
    for r in rows:
        r["peak_predicted"] = predicted[r["schedule"]][r["stage"]]["peak_bytes"]
        r["peak_ratio"] = r["peak_predicted"] / r["cuda_measured"]
    return cfg, rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="markdown summary")
    ap.add_argument("tables", nargs="*", help="default: every gpu_memory_check_*.md in results/simulate")
    args = ap.parse_args(argv)
    paths = [Path(p) for p in args.tables] or sorted(STORE.glob("gpu_memory_check_*.md"))
    if not paths:
        print("error: no gpu_memory_check_*.md tables", file=sys.stderr)
        return 2
    lines = ["# GPU memory checks against today's accounting", "",
             "Accounted / measured peak bytes (`max_memory_allocated` over a step, less what was allocated before "
             "the stage), accounted again from the stored measurements by `research/simulator_validation/gpu_memory_summary.py`. "
             "Per schedule: the range over its stages, and for the processor that needs the most (the memory "
             "figure's number).", "",
             "| table | stages | micro-batch | schedule | stages: min-max | worst processor: measured / accounted MiB | ratio |",
             "|---|---|---|---|---|---|---|"]
    everything = []
    for path in paths:
        cfg, rows = reaccount(path)
        everything += rows
        for w in worst_stage(rows):
            ratios = [r["peak_ratio"] for r in rows if r["schedule"] == w["schedule"]]
            lines.append(f"| {path.name} | {cfg.stages} | {cfg.micro_batch} | {w['schedule']} | "
                         f"{min(ratios):.2f}-{max(ratios):.2f} | {w['measured'] / 2**20:.0f} / "
                         f"{w['predicted'] / 2**20:.0f} | {w['ratio']:.3f} |")
    ratios = [r["peak_ratio"] for r in everything]
    lines += ["", f"All {len(everything)} stage rows: {min(ratios):.2f}-{max(ratios):.2f}; within 10%: "
              f"{sum(abs(x - 1) <= 0.10 for x in ratios)}; within 20%: {sum(abs(x - 1) <= 0.20 for x in ratios)}."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
