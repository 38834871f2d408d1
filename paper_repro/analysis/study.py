"""Every table of one compute-efficiency study, the claims row and the cost table."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .frontiers import per_seed_curves, speedup, speedup_table, staircase, staircase_at, summarize_speedup
from .regime import critical_batch, regime_start, steps_vs_batch
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
    """The tables notebook 01 shows for one study, from one sweep table."""
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

def _config_at(front: pd.DataFrame, c: float) -> pd.Series | None:
    """The configuration of one staircase that sets its time at compute ``c`` (its last row
    with compute ``<= c``), or None before its first row."""
    rows = front[front["compute"] <= c * (1 + 1e-12)].sort_values("compute")
    return rows.iloc[-1] if len(rows) else None


def shared_end_speedup(fronts: pd.DataFrame, baseline: str = "backprop") -> pd.DataFrame:
    """Per (method, target) of staircase frontiers ``fronts``: the speedup at the largest compute
    at which both frontiers have a configuration of their own (``shared_compute``: the smaller of
    the two frontiers' last computes), where neither frontier is held flat past its last run.
    With ``baseline_end`` / ``method_end``, each frontier's last compute."""
    cols = ["method", "target", "baseline_end", "method_end", "shared_compute", "shared_speedup"]
    rows = []
    for (method, target), front in fronts.groupby(["method", "target"], sort=True):
        base = fronts[(fronts["method"] == baseline) & (fronts["target"] == target)]
        if method == baseline or base.empty:
            continue
        b_end, m_end = float(base["compute"].max()), float(front["compute"].max())
        c = min(b_end, m_end)
        tb, tm = staircase_at(base, [c])[0], staircase_at(front, [c])[0]
        rows.append({"method": method, "target": target, "baseline_end": b_end, "method_end": m_end,
                     "shared_compute": c, "shared_speedup": tb / tm})
    return pd.DataFrame(rows, columns=cols)


def verdict_table(tables: StudyTables, baseline: str = "backprop", within: float = 1.25) -> pd.DataFrame:
    """Per (method, target): the readings a verdict on the headline needs, each from the tables.

    * ``high_compute_speedup`` [``_lo``-``_hi`` over seeds] at ``high_compute`` (the largest
      compute both methods reached, :func:`summarize_speedup`), with the configurations that set
      each frontier's time there (``high_batch``, ``high_baseline_batch``) and
      ``high_compute_ratio``: the method's configuration's compute over the baseline's (above 1:
      the baseline's frontier is held flat past its last run by that factor);
    * ``shared_speedup`` [``_lo``-``_hi``, each seed's own frontiers] at ``shared_compute``, the
      largest compute at which both frontiers have a run of their own (:func:`shared_end_speedup`);
    * ``max_speedup`` [``_lo``-``_hi``] at ``max_compute``, the batch sizes of the two
      configurations compared there (``max_batch``, ``max_baseline_batch``), the baseline's
      ``regime_start`` (:func:`~paper_repro.analysis.regime.regime_start` at ``within``) and
      ``max_in_regime``: whether both batch sizes are at or beyond it."""
    head = tables.headline
    cols = ["method", "target", "high_compute_speedup", "high_compute_speedup_lo", "high_compute_speedup_hi",
            "high_compute", "high_batch", "high_baseline_batch", "high_compute_ratio", "shared_speedup",
            "shared_speedup_lo", "shared_speedup_hi", "shared_compute", "max_speedup", "max_speedup_lo",
            "max_speedup_hi", "max_compute", "max_batch", "max_baseline_batch", "regime_start", "max_in_regime"]
    if head.empty:
        return pd.DataFrame(columns=cols)
    shared = shared_end_speedup(tables.fronts, baseline).set_index(["method", "target"])
    per_seed = [shared_end_speedup(staircase(over_seeds(g)), baseline)
                for _, g in tables.ttt.groupby("seed", sort=True)] if "seed" in tables.ttt else []
    per_seed = pd.concat(per_seed, ignore_index=True) if per_seed else pd.DataFrame(columns=["method", "target"])
    svb = tables.steps_vs_batch
    rows = []
    for _, h in head.iterrows():
        key = (h["method"], h["target"])
        front = tables.fronts[(tables.fronts["method"] == key[0]) & (tables.fronts["target"] == key[1])]
        base = tables.fronts[(tables.fronts["method"] == baseline) & (tables.fronts["target"] == key[1])]
        m_high, b_high = _config_at(front, h["high_compute"]), _config_at(base, h["high_compute"])
        m_max, b_max = _config_at(front, h["max_compute"]), _config_at(base, h["max_compute"])
        seeds = per_seed[(per_seed["method"] == key[0]) & (per_seed["target"] == key[1])]
        start = regime_start(svb[(svb["method"] == baseline) & (svb["target"] == key[1])], within)
        row = {c: h.get(c, math.nan) for c in cols if c in head.columns}
        row.update(
            method=key[0], target=key[1],
            high_batch=int(m_high["batch_size"]), high_baseline_batch=int(b_high["batch_size"]),
            high_compute_ratio=float(m_high["compute"]) / float(b_high["compute"]),
            shared_speedup=shared.loc[key, "shared_speedup"] if key in shared.index else math.nan,
            shared_compute=shared.loc[key, "shared_compute"] if key in shared.index else math.nan,
            shared_speedup_lo=float(seeds["shared_speedup"].min()) if len(seeds) else math.nan,
            shared_speedup_hi=float(seeds["shared_speedup"].max()) if len(seeds) else math.nan,
            max_batch=int(m_max["batch_size"]), max_baseline_batch=int(b_max["batch_size"]), regime_start=start,
            max_in_regime=bool(min(m_max["batch_size"], b_max["batch_size"]) >= start))
        rows.append(row)
    return pd.DataFrame(rows, columns=cols)


def step_ratio_table(svb: pd.DataFrame, baseline: str = "backprop") -> pd.DataFrame:
    """Per (method, target, batch size) of a :func:`steps_vs_batch` table: the method's steps
    over the baseline's (each at its best learning rate, median over seeds): the step penalty
    that a local method pays for its shorter critical path."""
    base = svb[svb["method"] == baseline].set_index(["target", "batch_size"])["step"]
    out = svb[svb["method"] != baseline][["method", "target", "batch_size", "step"]].copy()
    out["baseline_step"] = [base.get((t, b), math.nan) for t, b in zip(out["target"], out["batch_size"])]
    out["step_ratio"] = out["step"] / out["baseline_step"]
    return out.dropna(subset=["step_ratio"]).reset_index(drop=True)


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
