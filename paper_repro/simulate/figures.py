"""Figures of the scaling study (tables from :mod:`.scaling`); Gantt charts are in :mod:`.gantt`."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

GIB = 2 ** 30


def _log2_axis(ax, values) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(values)), [str(v) for v in sorted(set(values))])
    ax.minorticks_off()


def plot_memory(df: pd.DataFrame, title: str):
    """Peak memory per processor vs micro-batch size, one panel per processor count: the worst
    stage as a line, every stage as a dot."""
    stages = sorted(df.stages.unique())
    fig, axes = plt.subplots(1, len(stages), figsize=(5.5 * len(stages), 4.2), squeeze=False, sharey=True)
    colors = dict(zip(df.schedule.unique(), sns.color_palette(n_colors=df.schedule.nunique())))
    for ax, S in zip(axes[0], stages):
        part = df[df.stages == S]
        for schedule, g in part.groupby("schedule", sort=False):
            worst = g.groupby("micro_batch").peak_bytes.max()
            ax.plot(worst.index, worst.values / GIB, marker="o", color=colors[schedule], label=schedule)
            ax.scatter(g.micro_batch, g.peak_bytes / GIB, s=8, color=colors[schedule], alpha=0.35)
        _log2_axis(ax, part.micro_batch)
        ax.set_yscale("log")
        ax.set_title(f"{S} processors (line: worst stage, dots: every stage)", fontsize=10)
        ax.set_xlabel("micro-batch size")
        ax.grid(alpha=0.3, which="both")
    axes[0, 0].set_ylabel("peak memory per processor (GiB)")
    axes[0, -1].legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def plot_ratios(tables: dict[str, pd.DataFrame], x: str, title: str):
    """Simulated samples/s of local over each pipelined-backprop schedule vs ``x``
    (``"stages"`` or ``"micro_batches"``), one panel per model."""
    fig, axes = plt.subplots(1, len(tables), figsize=(5.5 * len(tables), 4.2), squeeze=False)
    label = {"stages": "processors (pipeline stages)", "micro_batches": "micro-batches per step"}[x]
    order = list(dict.fromkeys(b for df in tables.values() for b in df.baseline))   # same colours in every panel
    for ax, (model, df) in zip(axes[0], tables.items()):
        sns.lineplot(df, x=x, y="ratio", hue="baseline", style="baseline", hue_order=order, style_order=order,
                     markers=True, dashes=False, ax=ax)
        ax.axhline(1.0, color="grey", lw=0.8)
        _log2_axis(ax, df[x])
        ax.set_xlabel(label)
        ax.set_ylabel("samples/s: local / pipelined backprop")
        ax.set_title(model, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, title=None)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def plot_paper_setting(ratios: dict[str, float], paper: float, title: str):
    """Simulated local / baseline ratios as bars, the paper's reported ratio as a line."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    names = list(ratios)
    bars = ax.bar(names, [ratios[n] for n in names], color=sns.color_palette(n_colors=len(names)))
    ax.bar_label(bars, fmt="%.2f", fontsize=9)
    ax.axhline(paper, color="black", ls="--", lw=1)
    ax.text(len(names) - 0.5, paper, f"paper: {paper:.2f} (4 IPUs)", ha="right", va="bottom", fontsize=9)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_ylabel("samples/s: local / baseline")
    ax.set_xlabel("pipelined-backprop baseline")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
