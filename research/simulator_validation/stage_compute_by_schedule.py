"""Does a stage's compute per micro-batch depend on the schedule it runs in?

For each validation table and its re-measurements (``research/simulator_validation/validation_sets.sh``), every stage's
timed forward+backward per micro-batch under each schedule, over 1F1B's in the same measurement
(:func:`research.simulator_validation.remeasure.compute_vs_1f1b`): median and range over the measurements.
The simulator's calibration gives every schedule the same compute per micro-batch (up to the cost
of adding to existing gradients), so ratios far from 1 are what it cannot predict. Reads the
stored runs only; nothing is run or calibrated.

    .venv/bin/python -m research.simulator_validation.stage_compute_by_schedule --out results/simulate/stage_compute_by_schedule \\
        results/simulate/validation_resnet18w16_cpu2_busylink_glibc ...

writes ``OUT.md`` and ``OUT.csv``. ``--group NAME=GLOB`` adds other measurements of the same runs
(any ``bench pipeline`` JSON files, e.g. the alternated allocator rounds of ``research/simulator_validation/bench_malloc.sh``)
as a row group named NAME.
"""
from __future__ import annotations

import argparse
import glob
import json
import shlex
import sys
from pathlib import Path

import pandas as pd

from .remeasure import compute_vs_1f1b, measurement_files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tables", nargs="*", help="validation tables, without .runs.json")
    ap.add_argument("--group", action="append", default=[], metavar="NAME=GLOB",
                    help="bench pipeline JSON files measuring the same runs, shown as NAME (repeatable)")
    ap.add_argument("--out", required=True, help="output path without suffix")
    args = ap.parse_args(argv)
    groups = {}
    for base in args.tables:
        groups[Path(base).name] = measurement_files(base)
        if not groups[Path(base).name]:
            raise SystemExit(f"error: {base}.runs.json not found")
    for spec in args.group:
        name, sep, pattern = spec.partition("=")
        groups[name] = [Path(p) for p in sorted(glob.glob(pattern))]
        if not sep or not groups[name]:
            raise SystemExit(f"error: --group {spec!r}: give NAME=GLOB matching bench pipeline JSON files")
    if not groups:
        raise SystemExit("error: give validation tables or --group NAME=GLOB")
    frames = []
    for name, paths in groups.items():
        measurements = [json.loads(p.read_text()) for p in paths]
        for part in ("forward_backward", "forward", "backward"):
            frames.append(compute_vs_1f1b(measurements, part).assign(table=name, part=part))
    both = pd.concat(frames, ignore_index=True).astype({"micro_batch": int, "stage": int, "measurements": int})
    both.to_csv(f"{args.out}.csv", index=False)
    out = both[both.part == "forward_backward"]
    lines = ["# A stage's compute per micro-batch, schedule by schedule, against 1F1B's", "",
             "Each stage's timed forward+backward per micro-batch (the real runs' `forward_backward` phase over "
             "the micro-batches timed) divided by the same stage's under 1F1B in the same measurement; median "
             "[min-max] over the measurements of each table (the table and its `_set*` re-measurements). The "
             "simulator's calibration gives every schedule the same compute per micro-batch, up to the cost of "
             "adding to existing gradients. Made with "
             f"`{shlex.join(['.venv/bin/python', '-m', 'research.simulator_validation.stage_compute_by_schedule', *sys.argv[1:]])}`.", "",
             "| table | micro_batch | stage | measurements | local | local-per-step | gpipe | 1f1b-recompute | "
             "1F1B ms per micro-batch |", "|---|---|---|---|---|---|---|---|---|"]
    for (table, B, v), g in out.groupby(["table", "micro_batch", "stage"], sort=False):
        cell = {r.schedule: f"{r.compute_vs_1f1b:.2f} [{r.min:.2f}-{r.max:.2f}]" for r in g.itertuples()}
        ref = g["1f1b_ms_per_micro_batch"].iloc[0]
        lines.append(f"| {table} | {B} | {v} | {g.measurements.iloc[0]} | " + " | ".join(
            cell.get(s, "") for s in ("local", "local-per-step", "gpipe", "1f1b-recompute")) + f" | {ref:.1f} |")
    halves = both[both.part != "forward_backward"]
    if not halves.empty:
        lines += ["", "## Forwards and backwards apart", "",
                  "The same ratio for the forwards (the loss included) and the backwards (weight gradients and "
                  "any re-forward included) alone, from the measurements whose stages timed the two apart "
                  "(`compute_split_s`: torch's schedules; recorded by the later measurements, e.g. `_set6` at "
                  "micro-batches 8-64, `_set4` and `_set5` at 128 and 256).", "",
                  "| table | micro_batch | stage | measurements | gpipe forward | gpipe backward | "
                  "1f1b-recompute forward | 1f1b-recompute backward | 1F1B forward / backward ms |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for (table, B, v), g in halves.groupby(["table", "micro_batch", "stage"], sort=False):
            cell = {(r.schedule, r.part): f"{r.compute_vs_1f1b:.2f} [{r.min:.2f}-{r.max:.2f}]"
                    for r in g.itertuples()}
            own = g[g.schedule == "1f1b"]
            ref = dict(zip(own.part, own["1f1b_ms_per_micro_batch"]))
            lines.append(f"| {table} | {B} | {v} | {g.measurements.iloc[0]} | " + " | ".join(
                cell.get((s, p), "") for s in ("gpipe", "1f1b-recompute") for p in ("forward", "backward"))
                + f" | {ref.get('forward', float('nan')):.1f} / {ref.get('backward', float('nan')):.1f} |")
    Path(f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
