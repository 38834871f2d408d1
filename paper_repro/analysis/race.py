"""Tables of the race (:mod:`paper_repro.race`): who reaches each target first, and why.

* :func:`load_race`: the store's runs, one row per update (records + what ran).
* :func:`time_to_target`: per run and target: ``seconds`` (the run's clock, from the moment every
  process had started, at the first training-subset evaluation at or below the target),
  ``updates``, ``examples``, ``eval_seconds`` (evaluations up to then: the run's evaluation time
  shared equally among its evaluations) and ``samples_per_s`` (examples per second of training,
  evaluations left out).
* :func:`race_table`: median [min-max] over repeats per (target, batch, strategy) (samples/s: the
  median examples over the median seconds of training), the ratio to the
  fastest backprop strategy at that batch (``speedup``: its seconds over this one's) and its
  decomposition: training-time ratio = examples ratio x throughput ratio, with evaluation and
  start-up apart.
* :func:`fastest_table`: every strategy at the batch where it reaches the target soonest, its ratio
  to the fastest backprop strategy, and that ratio's range taken repeat by repeat.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

BACKPROP = ("single", "ddp", "gpipe", "1f1b", "1f1b-recompute", "interleaved-1f1b", "interleaved-zb", "zbv",
            "dualpipev")


def load_race(store: str | Path) -> pd.DataFrame:
    """Every run's records with its description (strategy, schedule, method, batch, repeat, lr,
    update_batch, status, eval_time, startup_time, hardware); empty if no run is there."""
    runs = Path(store) / "runs"
    frames = []
    for info in sorted(runs.glob("*.json")) if runs.is_dir() else []:
        csv = info.with_suffix(".csv")
        if not csv.is_file():
            continue
        meta = json.loads(info.read_text())
        frame = pd.read_csv(csv)
        frames.append(frame.assign(**{k: v for k, v in meta.items() if not isinstance(v, (list, dict))}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def time_to_target(df: pd.DataFrame, targets) -> pd.DataFrame:
    """One row per (run, target); unreached targets have NaN seconds."""
    rows = []
    for run_id, run in df.groupby("run_id", sort=True):
        first = run.iloc[0]
        evals = run.dropna(subset=["train_eval_loss"])
        per_eval = float(first["eval_time"]) / len(evals) if len(evals) else 0.0
        for target in targets:
            hit = evals[evals["train_eval_loss"] <= target]
            row = {k: first[k] for k in ("run_id", "strategy", "schedule", "method", "batch", "repeat", "lr",
                                         "update_batch", "startup_time")} | {"target": float(target)}
            if len(hit):
                at = hit.iloc[0]
                n_evals = int((evals["step"] <= at["step"]).sum())
                seconds, eval_s = float(at["wall_time"]), per_eval * n_evals
                row.update(reached=True, seconds=seconds, updates=int(at["step"]), examples=int(at["examples"]),
                           eval_seconds=eval_s, samples_per_s=float(at["examples"]) / max(seconds - eval_s, 1e-9))
            else:
                row.update(reached=False, seconds=math.nan, updates=math.nan, examples=math.nan,
                           eval_seconds=math.nan, samples_per_s=math.nan)
            rows.append(row)
    return pd.DataFrame(rows)


def _median_span(values: pd.Series) -> tuple[float, float, float]:
    v = values.dropna().to_numpy(dtype=float)
    return (float(np.median(v)), float(v.min()), float(v.max())) if len(v) else (math.nan, math.nan, math.nan)


def race_table(ttt: pd.DataFrame) -> pd.DataFrame:
    """Per (target, batch, strategy): seconds to target median [min-max] over repeats, repeats that
    reached it, median updates and examples, samples/s, evaluation and start-up seconds, and the
    ratios to the fastest backprop strategy at that batch (``reference``)."""
    rows = []
    for (target, batch, strategy), g in ttt.groupby(["target", "batch", "strategy"], sort=True):
        first = g.iloc[0]
        med, lo, hi = _median_span(g["seconds"])
        rows.append({"target": target, "batch": batch, "strategy": strategy, "schedule": first["schedule"],
                     "method": first["method"], "update_batch": first["update_batch"], "lr": first["lr"],
                     "seconds": med, "seconds_min": lo, "seconds_max": hi,
                     "reached": f"{int(g['reached'].sum())}/{len(g)}",
                     "updates": float(g["updates"].median()), "examples": float(g["examples"].median()),
                     "eval_seconds": float(g["eval_seconds"].median()),
                     "startup_seconds": float(g["startup_time"].median())})
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    # of the medians, so that training-time ratio = examples ratio x throughput ratio exactly
    table.insert(table.columns.get_loc("eval_seconds"), "samples_per_s",
                 table["examples"] / (table["seconds"] - table["eval_seconds"]))
    out = []
    for _, g in table.groupby(["target", "batch"], sort=True):
        bp = g[g["schedule"].isin(BACKPROP) & g["seconds"].notna()]
        ref = bp.loc[bp["seconds"].idxmin()] if len(bp) else None
        g = g.copy()
        g["reference"] = ref["strategy"] if ref is not None else None
        if ref is not None:
            g["speedup"] = ref["seconds"] / g["seconds"]
            train_ref = ref["seconds"] - ref["eval_seconds"]
            g["training_time_ratio"] = train_ref / (g["seconds"] - g["eval_seconds"])
            g["examples_ratio"] = ref["examples"] / g["examples"]
            g["throughput_ratio"] = g["samples_per_s"] / ref["samples_per_s"]
        out.append(g)
    return pd.concat(out, ignore_index=True)


def fastest_table(table: pd.DataFrame, ttt: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (target, strategy): the batch where its median seconds to target is smallest, with the
    ratio to the fastest backprop strategy at its own fastest batch (``speedup``: the ratio of the
    medians). With ``ttt`` (:func:`time_to_target`'s runs), also ``speedup_min`` and
    ``speedup_max``: the lowest and highest of the same ratio taken repeat by repeat (each
    repeat's reference run over its run, at those two batches)."""
    reached = table.dropna(subset=["seconds"])
    if reached.empty:
        return reached
    best = reached.loc[reached.groupby(["target", "strategy"])["seconds"].idxmin()].copy()
    out = []
    for _, g in best.groupby("target", sort=True):
        bp = g[g["schedule"].isin(BACKPROP)]
        ref = bp.loc[bp["seconds"].idxmin()] if len(bp) else None
        g = g.assign(reference=ref["strategy"] if ref is not None else None,
                     speedup=ref["seconds"] / g["seconds"] if ref is not None else math.nan)
        if ttt is not None:
            spans = [_paired_span(ttt, row, ref) for _, row in g.iterrows()]
            g = g.assign(speedup_min=[lo for lo, _ in spans], speedup_max=[hi for _, hi in spans])
        out.append(g.sort_values("seconds"))
    columns = ["target", "strategy", "batch", "update_batch", "seconds", "seconds_min", "seconds_max", "reached",
               "reference", "speedup"]
    return pd.concat(out, ignore_index=True)[columns + (["speedup_min", "speedup_max"] if ttt is not None else [])]


def _paired_span(ttt: pd.DataFrame, row, ref) -> tuple[float, float]:
    """(lowest, highest) over repeats of the reference run's seconds over ``row``'s strategy's,
    each at its batch of the fastest table; NaN without a repeat where both reached the target."""
    if ref is None:
        return math.nan, math.nan
    at = ttt[ttt["target"] == row["target"]]
    mine = at[(at["strategy"] == row["strategy"]) & (at["batch"] == row["batch"])].set_index("repeat")["seconds"]
    theirs = at[(at["strategy"] == ref["strategy"]) & (at["batch"] == ref["batch"])].set_index("repeat")["seconds"]
    ratio = (theirs / mine).dropna()
    return (float(ratio.min()), float(ratio.max())) if len(ratio) else (math.nan, math.nan)


def loss_curves(df: pd.DataFrame) -> pd.DataFrame:
    """The training-subset evaluations of every run: (strategy, batch, repeat, seconds, loss)."""
    ev = df.dropna(subset=["train_eval_loss"])
    return ev[["strategy", "schedule", "method", "batch", "repeat", "wall_time", "train_eval_loss"]].rename(
        columns={"wall_time": "seconds", "train_eval_loss": "loss"}).reset_index(drop=True)
