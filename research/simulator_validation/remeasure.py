"""How far apart are independent measurements of the same real runs, and is the simulator farther?

A validation table (:func:`.validate.against`) compares the simulator with one measurement: 5
interleaved repeats of every schedule. Measuring the same runs again, from scratch at another
time, gives another table. :func:`agreement` puts several such tables side by side and counts,
for every ratio to 1F1B, how often

* one measurement lands within the tolerance of another (the measurement's own reproducibility:
  the best a prediction can be expected to do on this machine);
* the simulation calibrated beside one measurement lands within the tolerance of that same
  measurement (the usual validation count) and of the other measurements;
* the median simulation lands within the tolerance of the pooled measurement (the median of every
  paired repeat of every measurement).

Ratios are compared as ``|predicted / measured - 1| <= tolerance``; each ordered pair counts once.

:func:`compute_vs_1f1b` looks inside the measurements: each stage's forward+backward per
micro-batch under every schedule, over 1F1B's in the same measurement. The calibration gives every
schedule the same per-micro-batch compute, so where this differs from 1 the simulator cannot follow.
"""
from __future__ import annotations

import itertools
import statistics
from pathlib import Path

import pandas as pd

from .validate import TOLERANCE, paired_ratios, record_schedule

KEYS = ["stages", "micro_batch", "schedule"]


def _within(predicted: float, measured: float, tolerance: float) -> bool:
    return abs(predicted / measured - 1) <= tolerance


def agreement(tables: dict[str, pd.DataFrame], tolerance: float = TOLERANCE) -> pd.DataFrame:
    """One row per ratio to 1F1B (``stages``, ``micro_batch``, ``schedule``; 1F1B's own rows left
    out) found in every table of ``tables`` (name -> a :func:`.validate.against` table, with its
    ``measured_runs``): each measurement's ratio (``measured:<name>``), each simulation's
    (``simulated:<name>``), the pooled measured ratio, and the counts described in the module's
    docstring (``remeasure_within`` of ``remeasure_pairs``, ``own_within`` of ``sets``,
    ``cross_within`` of ``remeasure_pairs``, ``pooled_within``: 0 or 1)."""
    if len(tables) < 2:
        raise ValueError(f"agreement needs at least 2 independent measurements, got {len(tables)}")
    names = list(tables)
    indexed = {}
    for name, df in tables.items():
        missing = {*KEYS, "measured_ratio_vs_1f1b", "simulated_ratio_vs_1f1b", "measured_runs"} - set(df.columns)
        if missing:
            raise ValueError(f"table {name!r} lacks columns {sorted(missing)}")
        ref = df[df.schedule == "1f1b"].set_index(["stages", "micro_batch"]).measured_runs
        df = df[df.schedule != "1f1b"].copy()
        df["paired"] = [paired_ratios(list(runs), list(ref.loc[(s, b)]))
                        for s, b, runs in zip(df.stages, df.micro_batch, df.measured_runs)]
        indexed[name] = df.set_index(KEYS)
    common = [k for k in indexed[names[0]].index if all(k in t.index for t in indexed.values())]
    pairs = list(itertools.permutations(names, 2))
    rows = []
    for key in common:
        measured = {n: indexed[n].loc[key, "measured_ratio_vs_1f1b"] for n in names}
        simulated = {n: indexed[n].loc[key, "simulated_ratio_vs_1f1b"] for n in names}
        pooled = statistics.median(v for n in names for v in indexed[n].loc[key, "paired"])
        sim_median = statistics.median(simulated.values())
        row = dict(zip(KEYS, key))
        row.update({f"measured:{n}": v for n, v in measured.items()})
        row.update({f"simulated:{n}": v for n, v in simulated.items()})
        row.update({
            "measured_pooled": pooled, "measured_min": min(measured.values()), "measured_max": max(measured.values()),
            "simulated_median": sim_median,
            "sets": len(names), "remeasure_pairs": len(pairs),
            "remeasure_within": sum(_within(measured[i], measured[j], tolerance) for i, j in pairs),
            "own_within": sum(_within(simulated[n], measured[n], tolerance) for n in names),
            "cross_within": sum(_within(simulated[i], measured[j], tolerance) for i, j in pairs),
            "pooled_within": int(_within(sim_median, pooled, tolerance)),
            "pooled_error": sim_median / pooled - 1,
        })
        rows.append(row)
    return pd.DataFrame(rows)


def summary(per_ratio: pd.DataFrame) -> dict:
    """The counts of :func:`agreement`'s rows added up, as fractions and counts."""
    n = len(per_ratio)
    pairs = int(per_ratio.remeasure_pairs.sum())
    own = int(per_ratio.sets.sum())
    return {
        "ratios": n,
        "remeasure_within": int(per_ratio.remeasure_within.sum()), "remeasure_pairs": pairs,
        "own_within": int(per_ratio.own_within.sum()), "own_pairs": own,
        "cross_within": int(per_ratio.cross_within.sum()), "cross_pairs": pairs,
        "pooled_within": int(per_ratio.pooled_within.sum()),
        "reproducible_ratios": int((per_ratio.remeasure_within == per_ratio.remeasure_pairs).sum()),
        "pooled_within_where_reproducible": int(per_ratio.pooled_within[
            per_ratio.remeasure_within == per_ratio.remeasure_pairs].sum()),
    }


def measurement_files(base: str | Path) -> list[Path]:
    """The stored runs of a validation table (``BASE.runs.json``) and of its re-measurements
    (``BASE_set*.runs.json``), the table first."""
    first = Path(f"{base}.runs.json")
    again = sorted(first.parent.glob(f"{first.name.removesuffix('.runs.json')}_set*.runs.json"))
    return [p for p in [first, *again] if p.exists()]


def compute_vs_1f1b(measurements: list[list[dict]], part: str = "forward_backward") -> pd.DataFrame:
    """One row per (micro-batch size, schedule, stage): the stage's forward+backward per micro-batch
    (its timed ``forward_backward`` phase over the micro-batches timed) divided by 1F1B's for the
    same stage in the same measurement, as the median over ``measurements`` (each a list of
    ``bench pipeline`` records) with its range, and 1F1B's own median in milliseconds.
    ``part="forward"`` or ``"backward"`` compares that half alone, from the records that timed
    the two apart (``compute_split_s``: torch's schedules); the others are left out."""
    if part not in ("forward_backward", "forward", "backward"):
        raise ValueError(f"part={part!r}: give 'forward_backward', 'forward' or 'backward'")

    def seconds(st: dict):
        if part == "forward_backward":
            return st["phases_s"]["forward_backward"]
        return st.get("compute_split_s", {}).get(part)

    ratios: dict[tuple, list[float]] = {}
    reference_ms: dict[tuple, list[float]] = {}
    for records in measurements:
        per_mb = {}
        for r in records:
            n = r["steps"] * r["micro_batches"]
            times = [seconds(st) for st in r["per_stage"]]
            if None not in times:
                per_mb[(r["micro_batch"], record_schedule(r))] = [t / n for t in times]
        for (B, schedule), stages in per_mb.items():
            ref = per_mb.get((B, "1f1b"))
            if ref is None:
                raise ValueError(f"a measurement has no 1f1b run at micro-batch {B}, the reference")
            for v, (t, t_ref) in enumerate(zip(stages, ref)):
                ratios.setdefault((B, schedule, v), []).append(t / t_ref)
                reference_ms.setdefault((B, schedule, v), []).append(t_ref * 1e3)
    rows = [{"micro_batch": B, "schedule": schedule, "stage": v, "measurements": len(vals),
             "compute_vs_1f1b": statistics.median(vals), "min": min(vals), "max": max(vals),
             "1f1b_ms_per_micro_batch": statistics.median(reference_ms[(B, schedule, v)])}
            for (B, schedule, v), vals in sorted(ratios.items())]
    return pd.DataFrame(rows)


def recorded_counts(base: str | Path) -> pd.DataFrame:
    """One row per measurement of a validation table: how many ratios to 1F1B its own stored
    table (``BASE[_setK].csv``, simulated with a calibration made in the same command, just
    before the runs) has within the tolerance, the 1F1B rows left out. Reads stored files only."""
    rows = []
    for k, runs in enumerate(measurement_files(base), 1):
        table = runs.with_name(runs.name.removesuffix(".runs.json") + ".csv")
        if not table.exists():
            raise ValueError(f"{table} not found: the stored table of {runs.name}")
        df = pd.read_csv(table)
        df = df[df.schedule != "1f1b"]
        rows.append({"table": Path(base).name, "measurement": f"m{k}", "file": table.name,
                     "within": int(df.within_15pct.astype(str).eq("True").sum()), "ratios": len(df),
                     "median_abs_error": float(df.ratio_rel_error.abs().median())})
    return pd.DataFrame(rows)
