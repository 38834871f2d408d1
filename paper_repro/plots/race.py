"""The race's figure: training-subset loss against wall-clock seconds, a line per strategy."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .colors import strategy_color


def _median_band(runs: list[pd.DataFrame], grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Median, min and max over repeats of the loss at each time of ``grid`` (each repeat's
    evaluations joined by straight lines; NaN outside a repeat's span)."""
    values = np.full((len(runs), len(grid)), np.nan)
    for i, run in enumerate(runs):
        t, y = run["seconds"].to_numpy(float), run["loss"].to_numpy(float)
        inside = (grid >= t.min()) & (grid <= t.max())
        values[i, inside] = np.interp(grid[inside], t, y)
    with np.errstate(all="ignore"):
        counted = np.isfinite(values).sum(0) == len(runs)      # where every repeat has a value
        med = np.where(counted, np.nanmedian(values, 0), np.nan)
        return med, np.where(counted, np.nanmin(values, 0), np.nan), np.where(counted, np.nanmax(values, 0), np.nan)


def plot_race(curves: pd.DataFrame, targets, title: str):
    """A panel per batch: each strategy's training-subset loss against seconds since its
    processes started, the median over repeats as a line and their range as a band; the targets
    as dotted lines."""
    batches = sorted(curves["batch"].unique())
    fig, axes = plt.subplots(1, len(batches), figsize=(5.2 * len(batches), 4.2), squeeze=False, sharey=True)
    repeats = curves["repeat"].nunique()
    for ax, batch in zip(axes[0], batches):
        at = curves[curves["batch"] == batch]
        for strategy, g in at.groupby("strategy", sort=False):
            first = g.iloc[0]
            color = strategy_color(first["schedule"], first["method"])
            runs = [r.sort_values("seconds") for _, r in g.groupby("repeat")]
            grid = np.linspace(0, max(r["seconds"].max() for r in runs), 200)
            med, lo, hi = _median_band(runs, grid)
            ax.plot(grid, med, color=color, label=strategy, lw=1.6)
            if repeats > 1:
                ax.fill_between(grid, lo, hi, color=color, alpha=0.15, lw=0)
        for t in targets:
            ax.axhline(t, color="grey", ls=":", lw=1)
        ax.set_title(f"batch {batch}")
        ax.set_xlabel("wall-clock seconds (processes started)")
    axes[0][0].set_ylabel("training-subset loss")
    what = f"median of {repeats} repeats; band: their range" if repeats > 1 else "one repeat"
    axes[0][-1].legend(title=what, fontsize=8, title_fontsize=8, loc="upper right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
