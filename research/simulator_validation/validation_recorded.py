"""The validation count of every measurement against the simulation made beside it.

Each validation table and re-measurement (``research/simulator_validation/validation_sets.sh``) was simulated in the same
command that measured it, with a calibration made just before its runs; its stored ``.csv`` holds
that comparison. This tool counts, per measurement, the ratios to 1F1B within the tolerance
(:func:`research.simulator_validation.remeasure.recorded_counts`). Set beside ``research/simulator_validation/validation_repro.py``
(every measurement simulated again with calibrations made later, one after the other), it says
whether a calibration made beside its measurement predicts that measurement better. Reads the
stored tables only; nothing is run or calibrated.

    .venv/bin/python -m research.simulator_validation.validation_recorded --out results/simulate/validation_recorded \\
        results/simulate/validation_resnet18w16_cpu2_busylink_glibc ...
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import pandas as pd

from .remeasure import recorded_counts
from .validate import TOLERANCE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tables", nargs="+", help="validation tables, without .runs.json")
    ap.add_argument("--out", required=True, help="output path without suffix")
    args = ap.parse_args(argv)
    try:
        counts = pd.concat([recorded_counts(base) for base in args.tables], ignore_index=True)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    if counts.empty:
        raise SystemExit("error: no stored measurements found (give tables without .runs.json)")
    counts.to_csv(f"{args.out}.csv", index=False)
    width = counts.groupby("table").size().max()
    lines = ["# Each measurement against the simulation made beside it", "",
             f"Ratios to 1F1B within {TOLERANCE:.0%} in each measurement's own stored table (simulated in the "
             "command that measured it, with a calibration made just before its runs), and their median error. "
             "Made with "
             f"`{shlex.join(['.venv/bin/python', '-m', 'research.simulator_validation.validation_recorded', *sys.argv[1:]])}`.", "",
             "| table | " + " | ".join(f"m{k}" for k in range(1, width + 1)) + " |", "|---|" + "---|" * width]
    for table, g in counts.groupby("table", sort=False):
        cells = [f"{r.within} of {r.ratios} ({r.median_abs_error:.0%})" for r in g.itertuples()]
        lines.append(f"| {table} | " + " | ".join(cells + [""] * (width - len(cells))) + " |")
    per_m = counts.groupby("measurement", sort=False)[["within", "ratios"]].sum()
    lines.append("| **all** | " + " | ".join(f"{r.within} of {r.ratios}" for r in per_m.itertuples())
                 + " |" * (width - len(per_m) + 1))
    Path(f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
