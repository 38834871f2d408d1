"""The data-parallel regime: steps to target vs batch size and the critical batch size."""
from __future__ import annotations

import math

import pandas as pd

from .targets import over_seeds


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
