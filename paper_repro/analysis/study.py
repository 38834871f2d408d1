"""Every table of one compute-efficiency study, the claims row and the cost table."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .frontiers import per_seed_curves, speedup, speedup_table, staircase, summarize_speedup
from .regime import critical_batch, steps_vs_batch
from .targets import FLOP_COLUMNS, _check_columns, over_seeds, time_to_target


@dataclass
class StudyTables:
    """Every table of one compute-efficiency study under one target rule."""

    rule: str
    targets: list
    ttt: pd.DataFrame          # per point and target
    configs: pd.DataFrame      # median over seeds per (method, batch, lr, target)
    steps_vs_batch: pd.DataFrame
    critical: pd.DataFrame
    fronts: pd.DataFrame       # staircase frontiers
    speedup: pd.DataFrame      # from the median-over-seeds staircases
    per_seed: dict             # {seed: speedup curve of that seed alone}
    headline: pd.DataFrame     # max / high-compute speedup with the range over seeds

def study_tables(df: pd.DataFrame, targets, rule: str = "eval", baseline: str = "backprop") -> StudyTables:
    """The tables the notebooks 01-03 show, from one sweep table."""
    ttt = time_to_target(df, targets, rule)
    configs = over_seeds(ttt)
    svb = steps_vs_batch(ttt)
    has_base = baseline in set(configs.loc[configs["reached"], "method"])
    sp = speedup(configs, baseline) if has_base else pd.DataFrame(
        columns=["method", "target", "compute", "baseline_time", "method_time", "speedup"])
    return StudyTables(rule=rule, targets=list(targets), ttt=ttt, configs=configs, steps_vs_batch=svb,
                       critical=critical_batch(svb), fronts=staircase(configs), speedup=sp,
                       per_seed=per_seed_curves(ttt, baseline) if has_base else {},
                       headline=speedup_table(ttt, baseline) if has_base else summarize_speedup(sp))

def claims_table(headline: pd.DataFrame, paper_claim: float | None, label: str) -> pd.DataFrame:
    """The paper's headline speedup (None: the paper states none) beside this study's: the
    largest max and high-compute speedup over local methods at the lowest target every
    method's row has, each with its range over seeds where :func:`speedup_table` gave one."""
    row = {"claim": label, "paper": "no number stated" if paper_claim is None else f"up to {paper_claim:g}x"}
    if headline.empty:
        row.update(target=math.nan, measured_max="none (no target reached by both at overlapping compute)",
                   measured_high_compute="none")
        return pd.DataFrame([row])
    target = headline["target"].min()
    rows = headline[headline["target"] == target]

    def fmt(col):
        top = rows.loc[rows[col].idxmax()]
        spread = ""
        if f"{col}_lo" in rows and np.isfinite(top.get(f"{col}_lo", np.nan)):
            spread = f" [{top[f'{col}_lo']:.2f}-{top[f'{col}_hi']:.2f} over seeds]"
        return f"{top[col]:.2f}x ({top['method']}){spread}"

    row.update(target=target, measured_max=fmt("max_speedup"), measured_high_compute=fmt("high_compute_speedup"))
    return pd.DataFrame([row])

def cost_table(df: pd.DataFrame, baseline: str = "backprop") -> pd.DataFrame:
    """Per method: local modules, per-example FLOPs (total, critical path, fill) and
    ``baseline``'s critical path over the method's (the speedup bound at equal steps)."""
    _check_columns(df, ("method", "num_modules", *FLOP_COLUMNS))
    costs = (df.groupby("method")[["num_modules", *FLOP_COLUMNS]].first()
             .sort_values("critical_path_flops_pe", ascending=False))
    if baseline in costs.index:
        costs["critical_path_vs_backprop"] = costs.loc[baseline, "critical_path_flops_pe"] / costs["critical_path_flops_pe"]
    return costs

def save_tables(root, tables: dict) -> None:
    """Write each ``{name: DataFrame}`` as ``root/<name>.csv`` (4 significant digits)."""
    for name, table in tables.items():
        table.to_csv(Path(root) / f"{name}.csv", index=False, float_format="%.4g")
