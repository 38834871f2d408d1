"""Compute-efficiency analysis (tables only) that does not depend on how long a run is.

Their figures are in :mod:`paper_repro.plots.efficiency`.

Pure functions of a sweep table (one row per step of every point: ``point_id``,
``method``, ``batch_size``, ``lr``, ``seed``, ``step``, ``examples``, the losses, and the
per-example FLOPs ``total_flops_pe``, ``critical_path_flops_pe``, ``fill_flops_pe``).

**When a run reaches a target** is decided by a *rule*:

* ``"eval"`` (the default): the loss of the net's own head on a fixed subset of the
  training set, measured every ``k`` training examples (the same ``k`` for every batch
  size; column ``train_eval_loss``). A run reaches ``L`` at the first evaluation whose
  loss is ``<= L``. A short large-batch run and a long small-batch run are judged by the
  same measurement at the same cadence in examples.
* ``"examples:W"``: the training mini-batch loss of the net's own head (``final_loss``)
  smoothed with a trailing mean over the last ``W`` *examples* (``ceil(W / batch)``
  steps), so the window lags every run by the same amount of data.
* ``"steps:w"``: a trailing mean over ``w`` steps, kept only to show how much a window
  counted in steps moves the result.

**Seeds**: a (method, batch size, learning rate) configuration reaches a target at the
median over its seeds of steps, examples, compute and time (an unreached seed counts as
infinite, so the configuration reaches the target only if at least half of its seeds do).

**Frontiers are staircases**: a method's time at compute ``c`` is the best time of any of
its configurations that reached the target with compute ``<= c``. Nothing is interpolated.
**Speedup** at ``c`` = backprop's staircase time / the method's, only for ``c`` from the
point where both staircases start up to the largest compute both actually ran (no
extrapolation). Both staircases are constant between their steps, so the speedup curve is
evaluated exactly at every step of either inside that range.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

CONFIG_KEYS = ("method", "batch_size", "lr")
FLOP_COLUMNS = ("total_flops_pe", "critical_path_flops_pe", "fill_flops_pe")


def _check_columns(df: pd.DataFrame, columns) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"table lacks columns {missing}; it has {list(df.columns)}")


def parse_rule(rule: str) -> tuple[str, int | None]:
    """``"eval"`` -> ("eval", None); ``"examples:4096"`` -> ("examples", 4096); ``"steps:20"``."""
    if rule == "eval":
        return "eval", None
    kind, _, value = str(rule).partition(":")
    if kind in ("examples", "steps") and value.isdigit() and int(value) >= 1:
        return kind, int(value)
    raise ValueError(f"unknown target rule {rule!r}; valid: 'eval', 'examples:W', 'steps:w' (W, w positive integers)")


def trailing_mean(values, window: int) -> np.ndarray:
    """Mean of the last ``window`` values (all values so far at the start); NaN counts as +inf."""
    v = np.asarray(values, dtype=float)
    v = np.where(np.isnan(v), np.inf, v)
    if len(v) == 0:
        return v
    padded = np.concatenate([np.full(window - 1, np.nan), v])
    return np.nanmean(np.lib.stride_tricks.sliding_window_view(padded, window), axis=1)


def run_curve(run: pd.DataFrame, rule: str) -> pd.DataFrame:
    """The (step, examples, loss) rows of one run on which ``rule`` decides a target.

    A diverged run (a non-finite training loss) is cut at that step: nothing after it counts."""
    kind, value = parse_rule(rule)
    run = run.sort_values("step")
    bad = ~np.isfinite(run["final_loss"].to_numpy(dtype=float))
    if bad.any():
        run = run.iloc[: int(np.argmax(bad))]
    if kind == "eval":
        _check_columns(run, ("train_eval_loss",))
        rows = run[np.isfinite(run["train_eval_loss"].to_numpy(dtype=float))]
        return pd.DataFrame({"step": rows["step"].to_numpy(), "examples": rows["examples"].to_numpy(),
                             "loss": rows["train_eval_loss"].to_numpy(dtype=float)})
    window = value if kind == "steps" else max(1, math.ceil(value / int(run["batch_size"].iloc[0])))
    return pd.DataFrame({"step": run["step"].to_numpy(), "examples": run["examples"].to_numpy(),
                         "loss": trailing_mean(run["final_loss"].to_numpy(dtype=float), window)})


def time_to_target(df: pd.DataFrame, targets, rule: str = "eval") -> pd.DataFrame:
    """One row per (point, target): ``reached``, ``step``, ``examples``, ``compute``, ``time``.

    ``compute = examples * total_flops_pe``; ``time = fill_flops_pe + step *
    critical_path_flops_pe`` (the ideal machine of ``docs/compute_efficiency.md``)."""
    _check_columns(df, ("point_id", "step", "examples", "final_loss", *CONFIG_KEYS, *FLOP_COLUMNS))
    targets = [float(t) for t in np.atleast_1d(targets)]
    keys = [k for k in ("point_id", *CONFIG_KEYS, "seed") if k in df.columns]
    rows = []
    for _, run in df.groupby("point_id", sort=True):
        first = run.iloc[0]
        curve = run_curve(run, rule)
        for target in targets:
            hit = np.flatnonzero(curve["loss"].to_numpy() <= target)
            row = {k: first[k] for k in keys} | {"target": target}
            if len(hit):
                step, examples = int(curve["step"].iloc[hit[0]]), int(curve["examples"].iloc[hit[0]])
                row.update(reached=True, step=step, examples=examples,
                           compute=examples * float(first["total_flops_pe"]),
                           time=float(first["fill_flops_pe"]) + step * float(first["critical_path_flops_pe"]))
            else:
                row.update(reached=False, step=math.nan, examples=math.nan, compute=math.nan, time=math.nan)
            rows.append(row)
    return pd.DataFrame(rows)


def over_seeds(ttt: pd.DataFrame) -> pd.DataFrame:
    """Median over seeds per (method, batch size, lr, target), with min / max of ``time`` and
    ``step`` over the seeds that reached it and ``seeds`` / ``seeds_reached`` counts."""
    _check_columns(ttt, (*CONFIG_KEYS, "target", "reached", "step", "examples", "compute", "time"))
    rows = []
    for key, group in ttt.groupby([*CONFIG_KEYS, "target"], sort=True):
        row = dict(zip((*CONFIG_KEYS, "target"), key))
        ok = group["reached"].astype(bool)
        for col in ("step", "examples", "compute", "time"):
            values = np.where(ok, group[col].to_numpy(dtype=float), np.inf)
            med = float(np.median(values))
            row[col] = med if math.isfinite(med) else math.nan
        row["reached"] = math.isfinite(row["time"])
        reached = group[ok]
        for col in ("time", "step"):
            row[f"{col}_min"] = float(reached[col].min()) if len(reached) else math.nan
            row[f"{col}_max"] = float(reached[col].max()) if len(reached) else math.nan
        row["seeds"], row["seeds_reached"] = len(group), int(ok.sum())
        rows.append(row)
    return pd.DataFrame(rows)


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


def suggest_targets(df: pd.DataFrame, n: int = 3, rule: str = "eval", fractions=(0.4, 0.2, 0.05)) -> list[float]:
    """``n`` targets every method reaches on at least one point under ``rule``:
    ``floor + f * (start - floor)`` with ``floor`` the largest over methods of the lowest
    loss a method reaches and ``start`` the median first loss, rounded up to 3 digits."""
    if not 1 <= n <= len(fractions):
        raise ValueError(f"n must be between 1 and {len(fractions)}, got {n}")
    best, starts = {}, []
    for _, run in df.groupby("point_id"):
        curve = run_curve(run, rule)["loss"].to_numpy()
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


def unreached_targets(ttt: pd.DataFrame) -> list[float]:
    """The targets of a :func:`time_to_target` table that no run reaches (largest first)."""
    _check_columns(ttt, ("target", "reached"))
    reached = ttt.groupby("target")["reached"].agg(lambda r: bool(r.astype(bool).any()))
    return sorted((float(t) for t, ok in reached.items() if not ok), reverse=True)


def best_lr_points(df: pd.DataFrame, rule: str = "eval") -> pd.DataFrame:
    """The rows of the best learning rate per (method, batch size, seed): the lowest last
    loss under ``rule`` (a diverged run counts as infinite)."""
    finals = []
    for pid, run in df.groupby("point_id"):
        curve = run_curve(run, rule)["loss"].to_numpy()
        final = curve[-1] if len(curve) and np.isfinite(curve[-1]) else math.inf
        first = run.iloc[0]
        finals.append((first["method"], first["batch_size"], first.get("seed", 0), final, pid))
    best = pd.DataFrame(finals, columns=["method", "batch_size", "seed", "final", "point_id"])
    best = best.sort_values("final", kind="stable").groupby(["method", "batch_size", "seed"]).head(1)
    return df[df["point_id"].isin(best["point_id"])]


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
