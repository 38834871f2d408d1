"""Staircase frontiers, speedup over backprop at equal compute, its spread over seeds and over rules."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .targets import _check_columns, over_seeds, time_to_target


def staircase(configs: pd.DataFrame, x: str = "compute", y: str = "time") -> pd.DataFrame:
    """Per (method, target): the configurations at which the best ``y`` reached with at
    most that ``x`` improves, sorted by ``x``. Reading it: ``y`` at any ``c`` is the ``y`` of
    the last row with ``x <= c`` (undefined before the first row)."""
    _check_columns(configs, ("method", "target", x, y))
    data = configs[np.isfinite(configs[x]) & np.isfinite(configs[y])]
    if "reached" in data.columns:
        data = data[data["reached"].astype(bool)]
    keep = []
    for _, group in data.groupby(["method", "target"], sort=True):
        best = math.inf
        for idx, row in group.sort_values([x, y], kind="stable").iterrows():
            if row[y] < best:
                keep.append(idx)
                best = row[y]
    return data.loc[keep].reset_index(drop=True)

def staircase_at(front: pd.DataFrame, at, x: str = "compute", y: str = "time") -> np.ndarray:
    """``y`` of one staircase (one method and target) at each ``at``; NaN before its first step."""
    xs = front[x].to_numpy(dtype=float)
    ys = front[y].to_numpy(dtype=float)
    order = np.argsort(xs, kind="stable")
    xs, ys = xs[order], np.minimum.accumulate(ys[order])
    idx = np.searchsorted(xs, np.asarray(at, dtype=float), side="right") - 1
    return np.where(idx >= 0, ys[np.clip(idx, 0, None)], np.nan)

def speedup(configs: pd.DataFrame, baseline: str = "backprop", x: str = "compute", y: str = "time") -> pd.DataFrame:
    """Speedup of every method over ``baseline`` at equal ``x``, per target, from the
    staircases of ``configs`` (a :func:`over_seeds` or :func:`time_to_target` table).

    Rows ``method``, ``target``, ``compute``, ``baseline_time``, ``method_time``,
    ``speedup``, at every step of either staircase from where both are defined up to the
    largest ``x`` that both methods reached the target with."""
    _check_columns(configs, ("method", "target", x, y))
    fronts = staircase(configs, x, y)
    cols = ["method", "target", x, "baseline_time", "method_time", "speedup"]
    if not fronts.empty and baseline not in set(fronts["method"]):
        raise ValueError(f"baseline method {baseline!r} reached none of the targets (or is not in the table); "
                         f"methods that reached one: {sorted(set(fronts['method']))}")
    reached = configs[np.isfinite(configs[x]) & np.isfinite(configs[y])]
    rows = []
    for target, group in fronts.groupby("target", sort=True):
        base = group[group["method"] == baseline]
        if base.empty:
            continue
        base_hi = reached[(reached["method"] == baseline) & (reached["target"] == target)][x].max()
        for method, front in group[group["method"] != baseline].groupby("method", sort=True):
            hi = min(base_hi, reached[(reached["method"] == method) & (reached["target"] == target)][x].max())
            lo = max(base[x].min(), front[x].min())
            if lo > hi:
                continue
            at = np.unique(np.concatenate([base[x], front[x], [lo, hi]]))
            at = at[(at >= lo) & (at <= hi)]
            tb, tm = staircase_at(base, at, x, y), staircase_at(front, at, x, y)
            rows += [{"method": method, "target": target, x: c, "baseline_time": b, "method_time": m,
                      "speedup": b / m} for c, b, m in zip(at, tb, tm)]
    return pd.DataFrame(rows, columns=cols)

def summarize_speedup(sp: pd.DataFrame) -> pd.DataFrame:
    """Per (method, target): the largest speedup (``max_speedup``, at ``max_compute``) and the
    speedup at the largest compute both reached (``high_compute_speedup``)."""
    cols = ["method", "target", "max_speedup", "max_compute", "high_compute_speedup", "high_compute"]
    if sp.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for (method, target), g in sp.groupby(["method", "target"], sort=True):
        best, high = g.loc[g["speedup"].idxmax()], g.loc[g["compute"].idxmax()]
        rows.append({"method": method, "target": target, "max_speedup": best["speedup"],
                     "max_compute": best["compute"], "high_compute_speedup": high["speedup"],
                     "high_compute": high["compute"]})
    return pd.DataFrame(rows, columns=cols)

def per_seed_curves(ttt: pd.DataFrame, baseline: str = "backprop") -> dict:
    """``{seed: speedup curve}`` computed from each seed's runs alone (seed ``s`` of every
    method); seeds whose runs give no baseline frontier are left out."""
    _check_columns(ttt, ("seed",))
    curves = {}
    for seed, group in ttt.groupby("seed", sort=True):
        try:
            curves[seed] = speedup(group, baseline)
        except ValueError:
            continue
    return curves

def per_seed_speedups(ttt: pd.DataFrame, baseline: str = "backprop") -> pd.DataFrame:
    """:func:`summarize_speedup` of each seed's :func:`per_seed_curves`, with a ``seed``
    column: the spread of the headline over seeds."""
    parts = [summarize_speedup(sp).assign(seed=seed) for seed, sp in per_seed_curves(ttt, baseline).items()]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

def speedup_table(ttt: pd.DataFrame, baseline: str = "backprop") -> pd.DataFrame:
    """The headline table: per (method, target), max and high-compute speedup from the
    median-over-seeds staircases, with the min and max of each over per-seed analyses."""
    main = summarize_speedup(speedup(over_seeds(ttt), baseline))
    seeds = per_seed_speedups(ttt, baseline)
    for col in ("max_speedup", "high_compute_speedup"):
        if seeds.empty:
            main[f"{col}_lo"] = main[f"{col}_hi"] = math.nan
            continue
        spread = seeds.groupby(["method", "target"])[col].agg(["min", "max"]).reset_index()
        spread.columns = ["method", "target", f"{col}_lo", f"{col}_hi"]
        main = main.merge(spread, on=["method", "target"], how="left")
    return main

def sensitivity(df: pd.DataFrame, targets, rules, baseline: str = "backprop") -> pd.DataFrame:
    """Max and high-compute speedup per (rule, method, target) under each target rule, and
    for each (method, target) the spread across rules relative to the first rule."""
    parts = []
    for rule in rules:
        table = summarize_speedup(speedup(over_seeds(time_to_target(df, targets, rule)), baseline))
        parts.append(table.assign(rule=rule))
    out = pd.concat(parts, ignore_index=True)
    return out[["rule", "method", "target", "max_speedup", "high_compute_speedup"]]

def sensitivity_spread(sens: pd.DataFrame, within: float = 0.2) -> pd.DataFrame:
    """Per (method, target): min / max over rules of each headline and whether every
    rule agrees with the median over rules within ``within`` (e.g. 0.2 = +-20%)."""
    rows = []
    for (method, target), g in sens.groupby(["method", "target"], sort=True):
        row = {"method": method, "target": target, "rules": len(g)}
        for col in ("max_speedup", "high_compute_speedup"):
            v = g[col].to_numpy(dtype=float)
            mid = float(np.median(v))
            row |= {f"{col}_min": v.min(), f"{col}_median": mid, f"{col}_max": v.max(),
                    f"{col}_agrees": bool(np.all(np.abs(v / mid - 1) <= within))}
        rows.append(row)
    return pd.DataFrame(rows)
