"""How much do the validation's counts move when the blocks are calibrated again?

Each validation table (``results/simulate/validation_*.md``) simulates stored real runs with one
per-block calibration. This simulates the same runs (``RUNS.json``) with ``--calibrations``
independent calibrations, one after the other, each with the link of the table's own note, and
reports per calibration how many ratios to 1F1B fall within 15%, and per ratio the range of the
simulated values beside the measured one.

    .venv/bin/python -m research.simulator_validation.validation_spread --calibrations 3 --out results/simulate/validation_spread \\
        results/simulate/validation_resnet18w16_cpu2_busylink_glibc.runs.json ...

writes ``OUT.md`` and ``OUT.csv``. Run it on an idle machine.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd

from .validate import TOLERANCE, against, machine_note, table_link


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="stored real runs (validation_*.runs.json)")
    ap.add_argument("--calibrations", type=int, default=3, help="independent calibrations per table")
    ap.add_argument("--reps", type=int, default=10, help="each calibration: best of this many rounds per block")
    ap.add_argument("--out", required=True, help="output path without suffix")
    args = ap.parse_args(argv)
    before, t0 = machine_note(), time.time()
    frames = []
    for path in map(Path, args.runs):
        records = json.loads(path.read_text())
        link = table_link(path)
        for k in range(1, args.calibrations + 1):
            df = against(records, reps=args.reps, link=link)
            frames.append(df.drop(columns=["measured_runs"]).assign(table=path.name.removesuffix(".runs.json"),
                                                                    calibration=k))
            print(f"{path.name}: calibration {k}/{args.calibrations} ({time.time() - t0:.0f} s)", flush=True)
    all_rows = pd.concat(frames, ignore_index=True)
    rows = all_rows[all_rows.schedule != "1f1b"]
    all_rows.to_csv(f"{args.out}.csv", index=False)
    counts = rows.groupby(["table", "calibration"]).agg(within=("within_15pct", "sum"), ratios=("within_15pct", "size"),
                                                         median_error=("ratio_rel_error", lambda e: e.abs().median()))
    keys = ["table", "micro_batch", "schedule"]
    per_ratio = rows.groupby(keys, sort=False).agg(
        measured=("measured_ratio_vs_1f1b", "first"), simulated_min=("simulated_ratio_vs_1f1b", "min"),
        simulated_max=("simulated_ratio_vs_1f1b", "max"), within_15pct=("within_15pct", "sum"))
    lines = ["# Validation counts under recalibration", "",
             f"The stored real runs of each table, simulated with {args.calibrations} independent per-block "
             f"calibrations (best of {args.reps} rounds each) made one after the other on {before}, each with the "
             f"link of the table's own note ({time.time() - t0:.0f} s in all). Made with "
             f"`{' '.join(['.venv/bin/python', '-m', 'research.simulator_validation.validation_spread', *sys.argv[1:]])}`.", "",
             f"## Ratios to 1F1B within {TOLERANCE:.0%}, per calibration", "",
             "| table | calibration | within | of | median error |", "|---|---|---|---|---|"]
    for (table, k), c in counts.iterrows():
        lines.append(f"| {table} | {k} | {int(c.within)} | {int(c.ratios)} | {c.median_error:.1%} |")
    lines += ["", "## Each ratio: measured, and the range simulated over the calibrations", "",
              "| table | micro_batch | schedule | measured | simulated min | simulated max | calibrations within 15% |",
              "|---|---|---|---|---|---|---|"]
    for (table, B, schedule), r in per_ratio.iterrows():
        lines.append(f"| {table} | {B} | {schedule} | {r.measured:.3f} | {r.simulated_min:.3f} | "
                     f"{r.simulated_max:.3f} | {int(r.within_15pct)} of {args.calibrations} |")
    Path(f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[4:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
