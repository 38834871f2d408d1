"""The data-parallel regime: steps to target vs batch size and the critical batch size."""
from __future__ import annotations

import math

import pandas as pd

from .targets import over_seeds, time_to_target


def steps_vs_batch(ttt: pd.DataFrame) -> pd.DataFrame:
    """Per (method, target, batch size): the best learning rate (fewest median steps over
    seeds) with its median ``step`` / ``examples`` and the min / max steps over its seeds."""
    seeds = over_seeds(ttt)
    seeds = seeds[seeds["reached"]]
    if seeds.empty:
        return pd.DataFrame(columns=["method", "target", "batch_size", "lr", "step", "examples",
                                     "step_min", "step_max"])
    best = seeds.sort_values(["step", "lr"], kind="stable").groupby(["method", "target", "batch_size"]).head(1)
    return best[["method", "target", "batch_size", "lr", "step", "examples", "step_min", "step_max"]] \
        .sort_values(["method", "target", "batch_size"]).reset_index(drop=True)

def critical_batch(svb: pd.DataFrame) -> pd.DataFrame:
    """Per (method, target) from a :func:`steps_vs_batch` table: ``S_min`` (fewest steps over
    batch sizes), ``E_min`` (fewest examples), the critical batch size ``E_min / S_min``
    (McCandlish et al., 2018: above it, doubling the batch no longer halves the steps), and
    ``last_doubling``: steps at the second-largest batch / steps at the largest (1.0: flat;
    2.0: perfect scaling), with the two batch sizes it compares."""
    rows = []
    for (method, target), g in svb.groupby(["method", "target"], sort=True):
        g = g.sort_values("batch_size")
        s_min, e_min = float(g["step"].min()), float(g["examples"].min())
        row = {"method": method, "target": target, "batch_sizes": len(g), "S_min": s_min, "E_min": e_min,
               "critical_batch": e_min / s_min, "last_doubling": math.nan, "largest_batch": int(g["batch_size"].iloc[-1])}
        if len(g) >= 2 and g["batch_size"].iloc[-1] == 2 * g["batch_size"].iloc[-2]:
            row["last_doubling"] = float(g["step"].iloc[-2]) / float(g["step"].iloc[-1])
        rows.append(row)
    return pd.DataFrame(rows)


def _per_doubling(small_batch, small_steps, large_batch, large_steps) -> float:
    """Steps at ``small_batch`` over steps at ``large_batch`` per doubling of the batch:
    ``(small_steps / large_steps) ** (1 / log2(large_batch / small_batch))`` (the plain ratio
    when the two differ by one doubling; its geometric share per doubling when by more)."""
    doublings = math.log2(float(large_batch) / float(small_batch))
    if doublings <= 0 or not (large_steps > 0):
        return math.nan
    return (float(small_steps) / float(large_steps)) ** (1.0 / doublings)


def regime_by_rule(df: pd.DataFrame, targets, rules, method: str = "backprop", within: float = 1.25) -> pd.DataFrame:
    """Whether ``method`` is in the high-compute regime under every target rule: per (rule,
    target), :func:`critical_batch`'s ``last_doubling`` (steps at the second-largest batch over
    steps at the largest, best learning rate of each; NaN unless the two differ by one doubling),
    ``per_doubling`` (the same ratio per doubling of the batch, for grids whose two largest
    batches are further apart, e.g. 4096 and 16384: the square root of the ratio) and
    ``in_regime``: ``per_doubling`` below ``within`` (e.g. 1.25: doubling the batch cuts the
    steps by less than 1.25x). A rule under which the largest batches do not both reach the
    target gives NaN and ``in_regime`` False."""
    rows = []
    for rule in rules:
        svb = steps_vs_batch(time_to_target(df[df["method"] == method], targets, rule))
        crit = critical_batch(svb)
        for target in targets:
            row = crit[crit["target"] == target] if len(crit) else crit
            last = float(row["last_doubling"].iloc[0]) if len(row) else math.nan
            g = svb[svb["target"] == target].sort_values("batch_size")
            per = math.nan
            if len(g) >= 2:
                (b0, s0), (b1, s1) = g[["batch_size", "step"]].iloc[-2], g[["batch_size", "step"]].iloc[-1]
                per = _per_doubling(b0, s0, b1, s1)
            rows.append({"rule": rule, "method": method, "target": target, "last_doubling": last,
                         "largest_batch": int(row["largest_batch"].iloc[0]) if len(row) else None,
                         "per_doubling": per, "in_regime": bool(per < within)})
    return pd.DataFrame(rows)


def regime_start(svb: pd.DataFrame, within: float = 1.25) -> float:
    """The smallest batch size of one (method, target)'s :func:`steps_vs_batch` rows from which
    every further step to a larger batch cuts the steps by less than ``within`` per doubling
    (:func:`regime_by_rule`'s reading, applied to every pair of neighbouring batch sizes): the
    start of the high-compute regime on that grid. NaN when even the last step cuts by more."""
    g = svb.sort_values("batch_size")
    b, s = g["batch_size"].to_numpy(dtype=float), g["step"].to_numpy(dtype=float)
    start = math.nan
    for i in range(len(g) - 1, 0, -1):
        if _per_doubling(b[i - 1], s[i - 1], b[i], s[i]) < within:
            start = b[i - 1]
        else:
            break
    return start


def lr_at_edge(svb: pd.DataFrame, lrs_for) -> pd.DataFrame:
    """The rows of a :func:`steps_vs_batch` table whose best learning rate is the smallest or
    the largest swept at its batch size (``lrs_for(batch_size, method)``: the grid's list there), with
    ``edge``: ``"lowest"``, ``"highest"`` or ``"only"`` (one learning rate swept). Where a best
    sits at an edge, a learning rate beyond it might have done better: extend the grid there."""
    rows = []
    for _, r in svb.iterrows():
        lrs = sorted(float(v) for v in lrs_for(int(r["batch_size"]), r["method"]))
        lr = float(r["lr"])
        edge = "only" if len(lrs) == 1 else "lowest" if math.isclose(lr, lrs[0]) else \
            "highest" if math.isclose(lr, lrs[-1]) else None
        if edge:
            rows.append({**r.to_dict(), "edge": edge, "swept": lrs})
    return pd.DataFrame(rows, columns=[*svb.columns, "edge", "swept"])
