"""When a run reaches a target: the rules, time and compute to target, medians over seeds."""
from __future__ import annotations

import math

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
    keys = [*CONFIG_KEYS, "target"]
    _check_columns(ttt, (*keys, "reached", "step", "examples", "compute", "time"))
    ok = ttt["reached"].astype(bool).to_numpy()
    cols = ["step", "examples", "compute", "time"]
    # an unreached seed counts as infinitely late: the median is finite only if most seeds reached
    late = pd.DataFrame({c: np.where(ok, ttt[c].to_numpy(dtype=float), np.inf) for c in cols}, index=ttt.index)
    by = [ttt[k] for k in keys]
    groups = late.groupby(by, sort=True)
    out = groups.median().replace(np.inf, np.nan)
    out["reached"] = out["time"].notna()
    reached = ttt.loc[ok, ["time", "step"]].astype(float).groupby([k[ok] for k in by], sort=True)
    for col in ("time", "step"):
        out[f"{col}_min"] = reached[col].min().reindex(out.index)
        out[f"{col}_max"] = reached[col].max().reindex(out.index)
    out["seeds"] = groups.size()
    out["seeds_reached"] = pd.Series(ok.astype(int), index=ttt.index).groupby(by, sort=True).sum()
    return out.reset_index()

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
