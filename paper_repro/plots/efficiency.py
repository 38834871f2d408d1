"""Figures of the compute-efficiency study: loss curves, steps to target vs batch size,
staircase frontiers, and speedup over backprop with its spread over seeds.

They take the tables of :mod:`paper_repro.analysis`."""
from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib import pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

from ..analysis import best_lr_points, run_curve
from .colors import method_colors
from .common import clean_log_ticks


def _colors(methods) -> dict:
    """``{method: colour}`` in sorted order; each method's colour is its own (:mod:`.colors`),
    whatever other methods the figure draws."""
    return method_colors(sorted(methods))


def _legend(axes, title: str | None = None) -> None:
    """One legend, beside the last panel, of the labelled lines of every panel."""
    seen = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    if seen:
        axes[-1].legend(seen.values(), seen.keys(), loc="upper left", bbox_to_anchor=(1, 1), title=title)


def _no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set(xticks=[], yticks=[])


def _target_panels(frame: pd.DataFrame, width: float, **subplots):
    """A figure with one panel per target of ``frame`` (highest first), a colour per method,
    and ``(ax, target, rows)`` for each panel with data (the others say so)."""
    targets = sorted(frame["target"].unique(), reverse=True) if len(frame) else [None]
    fig, axes = plt.subplots(1, len(targets), figsize=(width * len(targets), 3.8), squeeze=False, **subplots)
    colors = _colors(frame["method"].unique()) if len(frame) else {}
    panels = []
    for ax, t in zip(axes[0], targets):
        d = frame[frame["target"] == t] if t is not None else frame
        if d.empty:
            _no_data(ax, "no run reached a target")
        else:
            panels.append((ax, t, d))
    return fig, axes, colors, panels


def plot_loss_curves(df: pd.DataFrame, title: str, rule: str = "eval", max_panels: int = 4) -> Figure:
    """The loss that decides a target (``rule``) vs examples seen, one line per method (seeds
    pooled: mean and range), one panel per batch size (at most ``max_panels``, spread over
    the sweep's range). Each (method, batch size, seed) is drawn at its learning rate of lowest
    final loss (:func:`~paper_repro.analysis.best_lr_points`), which need not be the learning
    rate of fewest steps to a target that the steps-vs-batch table picks; the legend says so."""
    runs = best_lr_points(df, rule)
    curves = [run_curve(run, rule).assign(method=run["method"].iloc[0], batch_size=run["batch_size"].iloc[0])
              for _, run in runs.groupby("point_id")]
    data = pd.concat(curves, ignore_index=True)
    sizes = sorted(data["batch_size"].unique())
    pick = sorted({sizes[round(i)] for i in np.linspace(0, len(sizes) - 1, min(max_panels, len(sizes)))})
    fig, axes = plt.subplots(1, len(pick), figsize=(3.6 * len(pick), 3.4), sharey=True, squeeze=False)
    colors = _colors(data["method"].unique())
    for ax, b in zip(axes[0], pick):
        sns.lineplot(data=data[data["batch_size"] == b], x="examples", y="loss", hue="method", ax=ax,
                     palette=colors, hue_order=sorted(colors), errorbar=("pi", 100), legend=ax is axes[0][-1])
        ax.set(title=f"batch {b}", xscale="log", ylabel="training-subset loss" if rule == "eval" else f"loss ({rule})")
    if axes[0][-1].get_legend() is not None:
        sns.move_legend(axes[0][-1], "upper left", bbox_to_anchor=(1, 1),
                        title="method\nline: mean over seeds\nband: range over seeds\n"
                              "each seed at its learning rate\nof lowest final loss")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_steps_vs_batch(svb: pd.DataFrame, title: str) -> Figure:
    """Steps to target vs batch size (best learning rate per batch size, median over seeds,
    bars: min-max over seeds), one panel per target, one line per method, log-log, with
    the perfect-scaling line (steps halve when the batch doubles) through each method's
    smallest batch."""
    fig, axes, colors, panels = _target_panels(svb, 4.2)
    for ax, t, d in panels:
        for m, g in d.groupby("method"):
            g = g.sort_values("batch_size")
            err = [g["step"] - g["step_min"], g["step_max"] - g["step"]]
            ax.errorbar(g["batch_size"], g["step"], yerr=err, fmt="o-", ms=4, color=colors[m], label=m, capsize=2)
            b0, s0 = g["batch_size"].iloc[0], g["step"].iloc[0]
            bs = np.array(sorted(d["batch_size"].unique()))
            ax.plot(bs[bs >= b0], s0 * b0 / bs[bs >= b0], ls=":", color=colors[m], lw=1)
        ax.set(xscale="log", yscale="log", xlabel="batch size", ylabel="steps to target", title=f"target {t:g}")
        ax.set_xscale("log", base=2)
        clean_log_ticks(ax)
    _legend(axes[0], "method: median over seeds\nbars: range over seeds\ndotted: perfect scaling")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_frontiers(configs: pd.DataFrame, fronts: pd.DataFrame, title: str) -> Figure:
    """Time vs compute to each target: every configuration that reached it (median over
    seeds, dots) and each method's staircase frontier of those medians (best time with at most
    that compute, drawn as steps, never interpolated), one panel per target; the legend says
    that both are medians over seeds."""
    targets = sorted(configs["target"].unique(), reverse=True)
    colors = _colors(configs["method"].unique())
    fig, axes = plt.subplots(1, len(targets), figsize=(4.2 * len(targets), 3.8), squeeze=False)
    for ax, t in zip(axes[0], targets):
        pts = configs[(configs["target"] == t) & configs["reached"].astype(bool)]
        ax.set_title(f"target {t:g}")
        if pts.empty:
            _no_data(ax, f"target {t:g} not reached\nby any run")
            continue
        hi = pts["compute"].max()
        for m in sorted(colors):
            p = pts[pts["method"] == m]
            f = fronts[(fronts["target"] == t) & (fronts["method"] == m)].sort_values("compute")
            ax.scatter(p["compute"], p["time"], color=colors[m], alpha=0.3, s=12)
            if len(f):
                xs = np.append(f["compute"].to_numpy(), max(hi, f["compute"].max()))
                ys = np.append(f["time"].to_numpy(), f["time"].iloc[-1])
                ax.step(xs, ys, where="post", color=colors[m], label=m)
        missing = [m for m in sorted(colors) if m not in set(pts["method"])]
        if missing:
            ax.text(0.02, 0.02, "not reached by " + ", ".join(missing), transform=ax.transAxes, fontsize=8)
        ax.set(xscale="log", yscale="log", xlabel="compute to target (FLOPs)", ylabel="time (sequential FLOPs)")
        clean_log_ticks(ax)
    _legend(axes[0], "method\ndots: configurations,\nmedian over seeds\nsteps: frontier of the medians")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_speedup_band(sp: pd.DataFrame, per_seed: list[pd.DataFrame], title: str) -> Figure:
    """Speedup over backprop vs compute from the median-over-seeds staircases (lines), with
    the range of the same curve computed from each seed alone (band), one panel per target."""
    targets = sorted(sp["target"].unique(), reverse=True) if len(sp) else [None]
    colors = _colors(sp["method"].unique()) if len(sp) else {}
    fig, axes = plt.subplots(1, len(targets), figsize=(4.2 * len(targets), 3.6), squeeze=False, sharey=True)
    for ax, t in zip(axes[0], targets):
        if t is None:
            _no_data(ax, "no speedup defined: no target reached by backprop\nand a local method at equal compute")
            continue
        for m, g in sp[sp["target"] == t].groupby("method"):
            g = g.sort_values("compute")
            ax.step(g["compute"], g["speedup"], where="post", color=colors[m], label=m)
            seeds = [s[(s["target"] == t) & (s["method"] == m)] for s in per_seed]
            seeds = [s for s in seeds if len(s)]
            if seeds:
                grid = np.unique(np.concatenate([s["compute"].to_numpy() for s in seeds] + [g["compute"].to_numpy()]))
                vals = np.array([_step_values(s, grid) for s in seeds])
                lo, hi = np.nanmin(vals, axis=0), np.nanmax(vals, axis=0)
                ax.fill_between(grid, lo, hi, step="post", color=colors[m], alpha=0.15, lw=0)
        ax.axhline(1.0, color="grey", lw=1, ls="--")
        ax.set(xscale="log", yscale="log", xlabel="compute (FLOPs)", ylabel="speedup over backprop",
               title=f"target {t:g}")
        clean_log_ticks(ax)
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    _legend(axes[0], "method\nline: median-over-seeds frontiers\nband: range over seeds")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def _step_values(curve: pd.DataFrame, at: np.ndarray) -> np.ndarray:
    """A speedup curve (constant between its computes) read at ``at``; NaN outside its range."""
    c = curve.sort_values("compute")
    xs, ys = c["compute"].to_numpy(), c["speedup"].to_numpy()
    idx = np.searchsorted(xs, at, side="right") - 1
    out = np.where(idx >= 0, ys[np.clip(idx, 0, None)], np.nan)
    return np.where(at > xs[-1], np.nan, out)


def plot_speedup_vs_modules(frame: pd.DataFrame, title: str) -> Figure:
    """High-compute speedup over backprop against the net's depth (greedy's number of local
    modules), one panel per target, one colour per method: points at the median-over-seeds
    staircases with bars over the seeds' own (a bar need not contain its point: a staircase of
    medians is not a median of staircases), and each method's critical-path ratio (the
    speedup it would reach in as few steps as backprop) as a dashed line
    (``frame``: :func:`paper_repro.studies.modules_study`). Where ``frame`` has
    ``backprop_in_regime``, the points read where backprop is not in the high-compute regime are
    drawn open."""
    fig, axes, colors, panels = _target_panels(frame, 4.4, sharey=True)
    for ax, t, d in panels:
        for m, g in d.groupby("method"):
            g = g.sort_values("depth")
            y = g["high_compute_speedup"].to_numpy(dtype=float)
            lo = g.get("high_compute_speedup_lo", g["high_compute_speedup"]).to_numpy(dtype=float)
            hi = g.get("high_compute_speedup_hi", g["high_compute_speedup"]).to_numpy(dtype=float)
            # the seeds' range as its own segment: the median-over-seeds staircase can lie outside it
            ax.plot(g["depth"], y, "-", color=colors[m], label=m)
            inside = g["backprop_in_regime"].to_numpy(dtype=bool) if "backprop_in_regime" in g else np.ones(len(g), bool)
            ax.plot(g["depth"][inside], y[inside], "o", ms=5, color=colors[m])
            ax.plot(g["depth"][~inside], y[~inside], "o", ms=5, mfc="white", color=colors[m])
            ax.vlines(g["depth"], np.where(np.isnan(lo), y, lo), np.where(np.isnan(hi), y, hi), color=colors[m], lw=2)
            ax.plot(g["depth"], g["critical_path_ratio"], ls="--", lw=1, color=colors[m],
                    label=f"{m}: critical-path ratio")
        ax.axhline(1, color="k", lw=0.8, ls=":")
        depths = sorted(d["depth"].unique())
        ax.set(xscale="log", yscale="log", xlabel="blocks (= greedy's local modules)",
               ylabel="speedup over backprop, high-compute end", title=f"target {t:g}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(depths, [str(v) for v in depths])
        ax.xaxis.set_minor_locator(NullLocator())
        lo, hi = ax.get_ylim()
        ax.set_yticks([v for v in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100) if lo <= v <= hi])
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(lo, hi)
        ax.grid(alpha=0.3)
    if "backprop_in_regime" in frame and not frame["backprop_in_regime"].astype(bool).all():
        axes[0][-1].plot([], [], "o", ms=5, mfc="white", color="grey", label="open: backprop not in the regime")
    _legend(axes[0], "method\npoint: median-over-seeds frontiers\nbar: range over seeds")
    fig.suptitle(title)
    fig.tight_layout()
    return fig
