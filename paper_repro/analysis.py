"""Time- and compute-to-target, Pareto frontiers and speedups of the compute study: tables
only (their figures are in :mod:`paper_repro.plots.efficiency`).

Every function is a pure function of a sweep table (:func:`paper_repro.sweep.load_results`:
one row per step of every point, with ``point_id``, ``method``, ``batch_size``, ``lr``,
``step``, ``examples``, ``final_loss`` and the per-example FLOPs ``total_flops_pe``,
``critical_path_flops_pe``, ``fill_flops_pe`` of :mod:`paper_repro.cost`).

* **Reaching a target.** The training loss of the net's own head is smoothed with a
  trailing mean over ``window`` steps (fewer at the start); a point reaches target ``L``
  at the first step ``s`` where the smoothed loss is ``<= L``. Diverged runs count up to
  the step where they diverged.
* **Compute** to target = ``examples(s) * total_flops_pe`` (all FLOPs of all devices).
* **Time** to target (sequential FLOPs on the ideal machine) =
  ``fill_flops_pe + s * critical_path_flops_pe``: batch size does not change time, a
  local method pays one pipeline fill per run (0 for backprop).
* **Pareto frontier**: per method, the points not beaten in both compute and time by
  another point of the same method (the lower-left frontier in the time-compute plane).
* **Speedup** at compute ``C`` = backprop's frontier time at ``C`` / the method's frontier
  time at ``C``, each frontier interpolated linearly in log(time) vs log(compute) between
  its points, only where both frontiers cover ``C`` (no extrapolation). Evaluated at every
  frontier point of either method inside the overlap; since log-speedup is piecewise
  linear in log-compute with breaks there, its maximum over the overlap is among them.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

POINT_KEYS = ("point_id", "method", "batch_size", "lr", "seed")


def smooth(values, window: int) -> np.ndarray:
    """Trailing mean over the last ``window`` values (over all values so far at the start).

    A NaN counts as +inf (a diverged step), and an inf stays in every mean it enters."""
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive integer, got {window!r}")
    v = np.asarray(values, dtype=float)
    v = np.where(np.isnan(v), np.inf, v)
    if len(v) == 0:
        return v
    padded = np.concatenate([np.full(window - 1, np.nan), v])  # the padding is skipped by nanmean
    return np.nanmean(np.lib.stride_tricks.sliding_window_view(padded, window), axis=1)


def _check_columns(df: pd.DataFrame, columns) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"table lacks columns {missing}; it has {list(df.columns)}")


def time_to_target(df: pd.DataFrame, targets, window: int = 20, loss: str = "final_loss") -> pd.DataFrame:
    """One row per (point, target): ``reached``, ``step``, ``examples``, ``compute``, ``time``.

    Unreached targets have ``reached = False`` and NaN step/compute/time."""
    _check_columns(df, ("point_id", "method", "step", "examples", loss, "total_flops_pe",
                        "critical_path_flops_pe", "fill_flops_pe"))
    targets = [float(t) for t in np.atleast_1d(targets)]
    keys = [k for k in POINT_KEYS if k in df.columns]
    rows = []
    for _, run in df.sort_values("step").groupby("point_id", sort=True):
        first = run.iloc[0]
        curve = smooth(run[loss].to_numpy(dtype=float), window)  # a NaN/inf step never counts
        for target in targets:
            hit = np.flatnonzero(curve <= target)
            row = {k: first[k] for k in keys}
            row["target"] = target
            if len(hit):
                at = run.iloc[hit[0]]
                step, examples = int(at["step"]), int(at["examples"])
                row.update(reached=True, step=step, examples=examples,
                           compute=examples * float(first["total_flops_pe"]),
                           time=float(first["fill_flops_pe"]) + step * float(first["critical_path_flops_pe"]))
            else:
                row.update(reached=False, step=math.nan, examples=math.nan, compute=math.nan, time=math.nan)
            rows.append(row)
    return pd.DataFrame(rows)


def unreached_targets(ttt: pd.DataFrame) -> list[float]:
    """The targets of a :func:`time_to_target` table that no run reaches (largest first)."""
    _check_columns(ttt, ("target", "reached"))
    reached = ttt.groupby("target")["reached"].agg(lambda r: bool(r.astype(bool).any()))
    return sorted((float(t) for t, ok in reached.items() if not ok), reverse=True)


def pareto_frontier(ttt: pd.DataFrame, x: str = "compute", y: str = "time",
                    by=("method", "target")) -> pd.DataFrame:
    """The lower-left frontier of (``x``, ``y``) within each group ``by``, sorted by ``x``.

    A point is on the frontier when no other point of its group has ``x <=`` and ``y <=``
    with one of them strictly smaller; of exact duplicates the first is kept."""
    by = [by] if isinstance(by, str) else list(by)
    _check_columns(ttt, [x, y, *by])
    data = ttt[np.isfinite(ttt[x]) & np.isfinite(ttt[y])]
    if "reached" in data.columns:
        data = data[data["reached"].astype(bool)]
    keep = []
    for _, group in data.groupby(by, sort=True):
        best = math.inf
        for idx, row in group.sort_values([x, y], kind="stable").iterrows():
            if row[y] < best:
                keep.append(idx)
                best = row[y]
    return data.loc[keep].reset_index(drop=True)


def interpolate_loglog(xs, ys, at) -> np.ndarray:
    """Piecewise-linear interpolation of log(y) vs log(x) through ``(xs, ys)`` at ``at``;
    NaN outside ``[min(xs), max(xs)]``."""
    xs, ys, at = (np.asarray(v, dtype=float) for v in (xs, ys, at))
    order = np.argsort(xs)
    lx, ly = np.log(xs[order]), np.log(ys[order])
    la = np.log(at)
    out = np.exp(np.interp(la, lx, ly))
    out[(la < lx[0] - 1e-12) | (la > lx[-1] + 1e-12)] = np.nan
    return out


def speedup(frontier: pd.DataFrame, baseline: str = "backprop", x: str = "compute", y: str = "time",
            by: str = "target") -> pd.DataFrame:
    """Speedup of every method over ``baseline`` at equal ``x``, per ``by`` group.

    Returns rows ``method``, ``target``, ``compute``, ``baseline_time``, ``method_time``,
    ``speedup`` (= baseline_time / method_time) at the frontier points of either method
    inside the range of compute both frontiers cover. A method whose frontier does not
    overlap the baseline's contributes no rows, and so does a target the baseline does not
    reach. An empty frontier (no run reached any target) gives an empty table; a frontier
    without the baseline at all (it reached none of the targets the others reached, or it
    is not in the sweep) is a ValueError."""
    _check_columns(frontier, ["method", x, y, by])
    if not frontier.empty and baseline not in set(frontier["method"]):
        raise ValueError(f"baseline method {baseline!r} is not in the frontier: it reached none of the targets "
                         f"(or is not in the sweep); methods that reached one: {sorted(set(frontier['method']))}")
    rows = []
    for key, group in frontier.groupby(by, sort=True):
        base = group[group["method"] == baseline]
        if base.empty:
            continue
        for method, front in group[group["method"] != baseline].groupby("method", sort=True):
            lo = max(base[x].min(), front[x].min())
            hi = min(base[x].max(), front[x].max())
            if lo > hi:
                continue
            at = np.unique(np.concatenate([base[x], front[x], [lo, hi]]))
            at = at[(at >= lo) & (at <= hi)]
            tb = interpolate_loglog(base[x], base[y], at)
            tm = interpolate_loglog(front[x], front[y], at)
            for c, b, m in zip(at, tb, tm):
                rows.append({"method": method, by: key, x: c, "baseline_time": b, "method_time": m,
                             "speedup": b / m})
    return pd.DataFrame(rows, columns=["method", by, x, "baseline_time", "method_time", "speedup"])


def max_speedup(speedups: pd.DataFrame, by=("method", "target")) -> pd.DataFrame:
    """Per group, the largest speedup and the compute where it occurs."""
    by = [by] if isinstance(by, str) else list(by)
    if speedups.empty:
        return pd.DataFrame(columns=[*by, "speedup", "compute"])
    idx = speedups.groupby(by)["speedup"].idxmax()
    return speedups.loc[idx, [*by, "speedup", "compute"]].reset_index(drop=True)


def high_compute_speedup(speedups: pd.DataFrame, by=("method", "target")) -> pd.DataFrame:
    """Per group, the speedup at the largest compute both frontiers reach: the
    high-compute end, where the paper's claim lives (less sensitive than the maximum to a
    baseline run that only just reached the target)."""
    by = [by] if isinstance(by, str) else list(by)
    if speedups.empty:
        return pd.DataFrame(columns=[*by, "speedup", "compute"])
    idx = speedups.groupby(by)["compute"].idxmax()
    return speedups.loc[idx, [*by, "speedup", "compute"]].reset_index(drop=True)


def suggest_targets(df: pd.DataFrame, n: int = 3, window: int = 20, loss: str = "final_loss",
                    fractions=(0.4, 0.2, 0.05)) -> list[float]:
    """``n`` loss targets every method reaches on at least one point.

    ``floor`` = the largest, over methods, of the lowest smoothed loss the method reaches;
    ``start`` = the median smoothed loss at the first step. Targets are
    ``floor + f * (start - floor)`` for the first ``n`` of ``fractions``, rounded to 3
    significant digits (upwards, so they stay reachable)."""
    _check_columns(df, ("point_id", "method", "step", loss))
    if not 1 <= n <= len(fractions):
        raise ValueError(f"n must be between 1 and {len(fractions)}, got {n}")
    best, starts = {}, []
    for _, run in df.sort_values("step").groupby("point_id"):
        curve = smooth(run[loss].to_numpy(), window)
        curve = curve[np.isfinite(curve)]
        if len(curve):
            method = run["method"].iloc[0]
            best[method] = min(best.get(method, math.inf), curve.min())
            starts.append(curve[0])
    if not best:
        raise ValueError("no finite losses in the table")
    floor, start = max(best.values()), float(np.median(starts))
    out = []
    for f in fractions[:n]:
        t = floor + f * max(start - floor, 0.0)
        digits = 2 - int(math.floor(math.log10(abs(t)))) if t > 0 else 3
        out.append(math.ceil(t * 10 ** digits) / 10 ** digits)
    return out


def best_lr_runs(df: pd.DataFrame, window: int) -> pd.DataFrame:
    """The rows of the best learning rate (lowest final smoothed loss) per (method, batch size)."""
    finals = []
    for pid, run in df.sort_values("step").groupby("point_id"):
        curve = smooth(run["final_loss"].to_numpy(), window)
        final = curve[-1] if np.isfinite(curve[-1]) else math.inf
        finals.append((run["method"].iloc[0], run["batch_size"].iloc[0], final, pid))
    best = pd.DataFrame(finals, columns=["method", "batch_size", "final", "point_id"])
    best = best.sort_values("final", kind="stable").groupby(["method", "batch_size"]).head(1)
    return df[df["point_id"].isin(best["point_id"])]


def claims_table(speedups: pd.DataFrame, paper_claim: float | None, label: str) -> pd.DataFrame:
    """The paper's headline speedup (None: the paper states none) beside the largest one
    measured here (any local method, any target: ``measured_max``, with its method, target
    and compute) and the largest speedup at the high-compute end of the frontiers
    (``measured_high_compute``, see :func:`high_compute_speedup`)."""
    row = {"claim": label, "paper": "no number stated" if paper_claim is None else f"up to {paper_claim:g}x"}
    if speedups.empty:
        row.update(measured_max="none (no target reached by both at overlapping compute)", method="",
                   target=math.nan, compute=math.nan,
                   measured_high_compute="none")
    else:
        best = speedups.loc[speedups["speedup"].idxmax()]
        high = high_compute_speedup(speedups)
        top = high.loc[high["speedup"].idxmax()]
        row.update(measured_max=f"{best['speedup']:.2f}x", method=best["method"], target=best["target"],
                   compute=best["compute"],
                   measured_high_compute=f"{top['speedup']:.2f}x ({top['method']}, target {top['target']:g})")
    return pd.DataFrame([row])
