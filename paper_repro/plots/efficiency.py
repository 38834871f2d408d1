"""Figures of the compute-efficiency study: loss curves, time-vs-compute Pareto frontiers and
speedup over backprop. The tables come from :mod:`paper_repro.analysis`."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..analysis import best_lr_runs, smooth
from .common import clean_log_ticks


def plot_loss_curves(df: pd.DataFrame, title: str, window: int = 20, max_panels: int = 4) -> Figure:
    """Smoothed training loss vs step, one line per method, one panel per batch size
    (at most ``max_panels``, spread over the sweep's range), best learning rate each."""
    runs = best_lr_runs(df, window).sort_values(["point_id", "step"]).copy()
    runs["smoothed loss"] = runs.groupby("point_id")["final_loss"].transform(
        lambda s: smooth(s.to_numpy(), window))
    sizes = sorted(runs["batch_size"].unique())
    pick = sorted({sizes[round(i)] for i in np.linspace(0, len(sizes) - 1, min(max_panels, len(sizes)))})
    fig, axes = plt.subplots(1, len(pick), figsize=(3.6 * len(pick), 3.4), sharey=True, squeeze=False)
    for ax, b in zip(axes[0], pick):
        sns.lineplot(data=runs[runs["batch_size"] == b], x="step", y="smoothed loss", hue="method", ax=ax,
                     hue_order=sorted(runs["method"].unique()), legend=ax is axes[0][-1])
        ax.set_title(f"batch {b}")
        ax.set_xscale("log")
    if axes[0][-1].get_legend() is not None:
        sns.move_legend(axes[0][-1], "upper left", bbox_to_anchor=(1, 1))
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_pareto(ttt: pd.DataFrame, frontier: pd.DataFrame, title: str) -> Figure:
    """Time vs compute to each target: every run that reached it (dots) and each method's
    lower-left frontier (lines), one panel per target of ``ttt``, log-log axes. A target no
    run reaches gets a panel saying so; methods that miss a target are named on its panel."""
    if ttt.empty:
        raise ValueError("the time-to-target table is empty: no runs or no targets")
    targets = sorted(ttt["target"].unique(), reverse=True)
    methods = sorted(ttt["method"].unique())
    colors = dict(zip(methods, sns.color_palette(n_colors=len(methods))))
    fig, axes = plt.subplots(1, len(targets), figsize=(4 * len(targets), 3.6), squeeze=False)
    for ax, t in zip(axes[0], targets):
        pts = ttt[(ttt["target"] == t) & ttt["reached"].astype(bool)]
        ax.set_title(f"target loss {t:g}")
        if pts.empty:
            ax.text(0.5, 0.5, f"target {t:g} not reached\nby any run", ha="center", va="center",
                    transform=ax.transAxes)
            ax.set(xticks=[], yticks=[])
            continue
        for m in methods:
            p, f = pts[pts["method"] == m], frontier[(frontier["target"] == t) & (frontier["method"] == m)]
            ax.scatter(p["compute"], p["time"], color=colors[m], alpha=0.3, s=12)
            ax.plot(f["compute"], f["time"], "o-", color=colors[m], ms=4)
        missing = [m for m in methods if m not in set(pts["method"])]
        if missing:
            ax.text(0.02, 0.02, "not reached by " + ", ".join(missing), transform=ax.transAxes, fontsize=8,
                    va="bottom")
        ax.set(xscale="log", yscale="log", xlabel="compute to target (FLOPs)",
               ylabel="time to target (sequential FLOPs)")
        clean_log_ticks(ax)
    handles = [Line2D([], [], color=colors[m], marker="o", ms=4, label=m) for m in methods]
    axes[0][-1].legend(handles=handles, loc="upper left", bbox_to_anchor=(1, 1))
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_speedup(speedups: pd.DataFrame, title: str) -> Figure:
    """Speedup over backprop vs compute at equal compute, one line per method and target."""
    fig, ax = plt.subplots(figsize=(6, 3.8))
    if speedups.empty:
        ax.text(0.5, 0.5, "no speedup defined: no target reached by both backprop\n"
                "and a local method at overlapping compute", ha="center", va="center", transform=ax.transAxes)
    else:
        data = speedups.assign(target=speedups["target"].map(lambda t: f"{t:g}"))
        sns.lineplot(data=data, x="compute", y="speedup", hue="method", style="target", markers=True, ax=ax,
                     hue_order=sorted(data["method"].unique()), estimator=None)
        sns.move_legend(ax, "upper left", bbox_to_anchor=(1, 1))
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.axhline(1.0, color="grey", lw=1, ls="--")
    ax.set(xlabel="compute (FLOPs)", ylabel="speedup over backprop (time ratio)")
    clean_log_ticks(ax)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
