"""Is the simulator farther from a measurement than another measurement of the same runs is?

Each validation table (``results/simulate/validation_*.runs.json``) was measured again from
scratch by ``research/simulator_validation/validation_sets.sh`` (``..._set2``, ``..._set3``). This simulates every
measurement with a fresh per-block calibration (best of ``--reps`` rounds, the link of the
measurement's own note) and compares, per ratio to 1F1B, the measurements with each other and
with the simulations (:func:`research.simulator_validation.remeasure.agreement`).

    .venv/bin/python -m research.simulator_validation.validation_repro --out results/simulate/validation_repro \\
        results/simulate/validation_resnet18w16_cpu2_busylink_glibc ...

(each argument: a table's path without ``.runs.json``; its ``_set*`` siblings are found) writes
``OUT.md`` and ``OUT.csv``. Run it on an idle machine.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd

from .remeasure import agreement, measurement_files, summary
from .validate import TOLERANCE, against, machine_note, table_link


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tables", nargs="+", help="validation tables, without .runs.json")
    ap.add_argument("--reps", type=int, default=10, help="calibration: best of this many rounds per block")
    ap.add_argument("--in-situ", action="store_true",
                    help="simulate each measurement with the durations it measured itself (not a prediction: "
                         "a check of the schedule engine and the link model on every measurement)")
    ap.add_argument("--out", required=True, help="output path without suffix")
    args = ap.parse_args(argv)
    before, t0 = machine_note(), time.time()
    frames, counts, every = [], [], {}
    for base in args.tables:
        paths = measurement_files(base)
        if len(paths) < 2:
            raise SystemExit(f"error: {base}: found {len(paths)} measurement(s), need 2 or more "
                             "(run research/simulator_validation/validation_sets.sh)")
        tables = {}
        for k, path in enumerate(paths, 1):
            tables[f"m{k}"] = against(json.loads(path.read_text()), reps=args.reps, link=table_link(path),
                                   in_situ=args.in_situ)
            print(f"{path.name}: simulated ({time.time() - t0:.0f} s)", flush=True)
        name = Path(base).name
        every[name] = tables
        frames.append(agreement(tables).assign(table=name))
        again = [f"m{k}: {p.name.removesuffix('.runs.json').split('_')[-1]}" for k, p in enumerate(paths[1:], 2)]
        counts.append({"table": name, "measurements": ", ".join(["m1: the table", *again]), **summary(frames[-1])})
    per_ratio = pd.concat(frames, ignore_index=True)
    per_ratio.to_csv(f"{args.out}.csv", index=False)
    total = summary(per_ratio)
    lines = [
        "# Measured again: how far apart are two measurements, and how far is the simulator?", "",
        f"Every real run of each validation table was measured again from scratch "
        f"(`research/simulator_validation/validation_sets.sh`: fresh processes at another time, 5 interleaved repeats each). Every "
        f"measurement m1, m2, ... is simulated with its own fresh per-block calibration (best of {args.reps} "
        f"rounds, the link of its own note), made one after the other on {before} "
        f"({time.time() - t0:.0f} s). Made with "
        f"`{' '.join(['.venv/bin/python', '-m', 'research.simulator_validation.validation_repro', *sys.argv[1:]])}`.", "",
        *(["**In situ**: every measurement is simulated with the forward+backward and optimizer durations its own "
           "stages measured, so the simulations are not predictions; they check the schedule engine and the "
           "link model on every measurement.", ""] if args.in_situ else []),
        f"A prediction is *within* when |predicted / measured - 1| <= {TOLERANCE:.0%}. Columns:", "",
        "* *re-measurement*: one measurement taken as the prediction of another (every ordered pair): how well "
        "the measurement reproduces itself on this machine;",
        "* *simulator, own*: each measurement's simulation against that measurement (the usual validation count);",
        "* *simulator, others*: each simulation against the other measurements (the same pairs as re-measurement);",
        "* *simulator, pooled*: the median simulation against the pooled measurement (median of every paired "
        "repeat of every measurement);",
        "* *reproducible ratios*: ratios whose measurements all fall within the tolerance of each other, and how "
        "many of those the simulator gets within the tolerance of the pooled measurement.", "",
        "| table | ratios | re-measurement | simulator, own | simulator, others | simulator, pooled | "
        "reproducible ratios: simulator, pooled |",
        "|---|---|---|---|---|---|---|"]

    def count_row(name: str, c: dict) -> str:
        return (f"| {name} | {c['ratios']} | {c['remeasure_within']} of {c['remeasure_pairs']} | "
                f"{c['own_within']} of {c['own_pairs']} | {c['cross_within']} of {c['cross_pairs']} | "
                f"{c['pooled_within']} of {c['ratios']} | {c['pooled_within_where_reproducible']} of "
                f"{c['reproducible_ratios']} |")
    lines += [count_row(c["table"], c) for c in counts] + [count_row("**all**", total)]
    lines += ["", "Measurements per table: " + "; ".join(f"{c['table']}: {c['measurements']}" for c in counts), "",
              "## The usual validation count, measurement by measurement", "",
              f"Ratios to 1F1B within {TOLERANCE:.0%} of the measurement, each simulated with its own link, and "
              "their median error:", "",
              "| table | " + " | ".join(f"m{k}" for k in range(1, max(len(t) for t in every.values()) + 1)) + " |",
              "|---|" + "---|" * max(len(t) for t in every.values())]
    for name, tables in every.items():
        cells = []
        for df in tables.values():
            rows = df[df.schedule != "1f1b"]
            cells.append(f"{int(rows.within_15pct.sum())} of {len(rows)} ({rows.ratio_rel_error.abs().median():.0%})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "## Does the tolerance drive the verdict?", "",
              "The same counts, all tables together, at other tolerances:", "",
              "| tolerance | re-measurement | simulator, own | simulator, others | simulator, pooled |",
              "|---|---|---|---|---|"]
    for tol in (0.10, 0.15, 0.20, 0.25, 0.30):
        c = summary(pd.concat([agreement(t, tolerance=tol) for t in every.values()], ignore_index=True))
        lines.append(f"| {tol:.0%} | {c['remeasure_within']} of {c['remeasure_pairs']} | {c['own_within']} of "
                     f"{c['own_pairs']} | {c['cross_within']} of {c['cross_pairs']} | {c['pooled_within']} of "
                     f"{c['ratios']} |")
    lines += ["",
              "## Each ratio", "",
              "| table | micro_batch | schedule | measured (m1, m2, ...) | pooled | simulated (m1, m2, ...) | "
              "re-measurement within | simulator, pooled error |",
              "|---|---|---|---|---|---|---|---|"]
    for row in per_ratio.to_dict("records"):
        measured = ", ".join(f"{v:.3f}" for k, v in row.items() if k.startswith("measured:") and pd.notna(v))
        simulated = ", ".join(f"{v:.3f}" for k, v in row.items() if k.startswith("simulated:") and pd.notna(v))
        lines.append(f"| {row['table']} | {row['micro_batch']} | {row['schedule']} | {measured} | "
                     f"{row['measured_pooled']:.3f} | {simulated} | {row['remeasure_within']} of "
                     f"{row['remeasure_pairs']} | {row['pooled_error']:+.1%} |")
    Path(f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
