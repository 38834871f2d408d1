"""Figures of the pipeline simulator (:mod:`paper_repro.simulate`): Gantt charts of simulated
steps, peak memory per processor, throughput ratios of local parallelism over pipelined
backprop (tables from :mod:`paper_repro.simulate.scaling`), and the simulator against repeated
measurements (:func:`research.simulator_validation.remeasure.agreement`)."""
from __future__ import annotations

import statistics

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .colors import schedule_colors

GIB = 2 ** 30


def _log2_axis(ax, values) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(values)), [str(v) for v in sorted(set(values))])
    ax.minorticks_off()


def plot_memory(df: pd.DataFrame, title: str) -> Figure:
    """Peak memory per processor vs micro-batch size, one panel per processor count: the worst
    stage as a line, every stage as a dot."""
    stages = sorted(df.stages.unique())
    fig, axes = plt.subplots(1, len(stages), figsize=(5.5 * len(stages), 4.2), squeeze=False, sharey=True)
    colors = schedule_colors(df.schedule.unique())
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


def plot_ratios(tables: dict[str, pd.DataFrame], x: str, title: str) -> Figure:
    """Simulated samples/s of local over each pipelined-backprop schedule vs ``x``
    (``"stages"`` or ``"micro_batches"``), one panel per model."""
    fig, axes = plt.subplots(1, len(tables), figsize=(5.5 * len(tables), 4.2), squeeze=False)
    label = {"stages": "processors (pipeline stages)", "micro_batches": "micro-batches per step"}[x]
    order = list(dict.fromkeys(b for df in tables.values() for b in df.baseline))   # same colours in every panel
    for ax, (model, df) in zip(axes[0], tables.items()):
        sns.lineplot(df, x=x, y="ratio", hue="baseline", style="baseline", hue_order=order, style_order=order,
                     palette=schedule_colors(order), markers=True, dashes=False, ax=ax)
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


def plot_paper_setting(ratios: dict[str, float | list[float]], paper: float, title: str) -> Figure:
    """Simulated local / baseline ratios as bars, the paper's reported ratio as a line. A list of
    ratios per baseline (one per calibration) draws its median, with its range as an error bar."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    names = list(ratios)
    values = {n: sorted(v) if isinstance(v, (list, tuple)) else [v] for n, v in ratios.items()}
    if not all(values.values()):
        raise ValueError(f"every baseline needs at least one ratio, got {ratios!r}")
    mid = [statistics.median(values[n]) for n in names]
    low = [m - values[n][0] for m, n in zip(mid, names)]
    high = [values[n][-1] - m for m, n in zip(mid, names)]
    spread = any(len(v) > 1 for v in values.values())
    colors = schedule_colors(names)
    bars = ax.bar(names, mid, color=[colors[n] for n in names],
                  yerr=[low, high] if spread else None, capsize=4)
    labels = [f"{m:.2f}" + (f"\n[{values[n][0]:.2f}-{values[n][-1]:.2f}]" if len(values[n]) > 1 else "")
              for m, n in zip(mid, names)]
    ax.bar_label(bars, labels=labels, fontsize=8, label_type="center")
    ax.axhline(paper, color="black", ls="--", lw=1)
    ax.text(len(names) - 0.5, paper, f"paper: {paper:.2f} (4 IPUs)", ha="right", va="bottom", fontsize=9)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_ylabel("samples/s: local / baseline" + ("\n(median; bar: range over calibrations)" if spread else ""))
    ax.set_xlabel("pipelined-backprop baseline")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_validation(per_ratio: pd.DataFrame, title: str, tolerance: float = 0.15) -> Figure:
    """Simulated against measured ratios to 1F1B, one panel per validation table (the rows of
    :func:`research.simulator_validation.remeasure.agreement` with a ``table`` column): the pooled
    measurement with the range of the single measurements, the median simulation with the range
    of the simulations, the diagonal and its +-``tolerance`` band."""
    needed = {"table", "schedule", "measured_pooled", "measured_min", "measured_max", "simulated_median"}
    if needed - set(per_ratio.columns):
        raise ValueError(f"per_ratio lacks columns {sorted(needed - set(per_ratio.columns))}")
    tables = list(dict.fromkeys(per_ratio.table))
    cols = min(2, len(tables))
    rows = -(-len(tables) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.4 * rows), squeeze=False)
    schedules = list(dict.fromkeys(per_ratio.schedule))
    palette = schedule_colors(schedules)
    sims = [c for c in per_ratio.columns if c.startswith("simulated:")]
    lo = min(per_ratio.measured_min.min(), per_ratio[sims or ["simulated_median"]].min().min()) * 0.9
    hi = max(per_ratio.measured_max.max(), per_ratio[sims or ["simulated_median"]].max().max()) * 1.05
    for ax, table in zip(axes.flat, tables):
        g = per_ratio[per_ratio.table == table]
        line = [lo, hi]
        ax.fill_between(line, [v * (1 - tolerance) for v in line], [v * (1 + tolerance) for v in line],
                        color="grey", alpha=0.15, lw=0, label=f"within {tolerance:.0%}")
        ax.plot(line, line, color="black", lw=0.8)
        for schedule, h in g.groupby("schedule", sort=False):
            sim = h[sims] if sims else h[["simulated_median"]]
            # the pooled median of all paired repeats can fall outside the single measurements' medians
            xerr = [(h.measured_pooled - h.measured_min).clip(lower=0),
                    (h.measured_max - h.measured_pooled).clip(lower=0)]
            ax.errorbar(h.measured_pooled, h.simulated_median, xerr=xerr,
                        yerr=[h.simulated_median - sim.min(axis=1), sim.max(axis=1) - h.simulated_median],
                        fmt="o", ms=5, capsize=2, lw=0.8, color=palette[schedule], label=schedule)
        inside = int(((g.simulated_median / g.measured_pooled - 1).abs() <= tolerance).sum())
        ax.set_title(f"{table.removeprefix('validation_')}: {inside} of {len(g)} within {tolerance:.0%}",
                     fontsize=9)
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured ratio to 1F1B (pooled; bar: range of measurements)")
        ax.set_ylabel("simulated ratio to 1F1B (median; bar: range of simulations)")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(tables):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------- Gantt chart
COLORS = {"F": "#4c72b0", "B": "#dd8452", "I": "#dd8452", "W": "#8172b3", "FB": "#55a868", "OPT": "#c44e52",
          "DATA": "#937860"}
LABELS = {"F": "forward", "B": "backward", "I": "backward (input gradient)", "W": "backward (weight gradient)",
          "FB": "forward + backward (local)", "OPT": "optimizer step",
          "DATA": "input drawn"}


def plot_gantt(results: list, title: str = "", step: int | None = 0, ax_width: float = 11.0) -> Figure:
    """One panel per :class:`paper_repro.simulate.engine.Result` in ``results``, each processor a row, each action a bar (micro-batch number inside
    when there is room). ``step``: draw only that simulated step (None: all of them)."""
    if not results:
        raise ValueError("plot_gantt needs at least one simulation result")
    height = 1.0 + 0.45 * sum(r.stages for r in results) + 0.5 * len(results)
    fig, axes = plt.subplots(len(results), 1, figsize=(ax_width, height), squeeze=False, sharex=True)
    used = set()
    end = 0.0
    for ax, r in zip(axes[:, 0], results):
        shown = [iv for iv in r.intervals if step is None or iv.step == step]
        t0 = min(iv.start for iv in shown)
        for iv in shown:
            used.add(iv.kind)
            width = iv.end - iv.start
            ax.barh(iv.rank, width, left=iv.start - t0, height=0.8, color=COLORS[iv.kind], edgecolor="white",
                    linewidth=0.5, alpha=0.6 if iv.kind == "W" else 1.0)
            if iv.micro_batch >= 0 and width > 0.025 * r.makespan_s:
                ax.text(iv.start - t0 + width / 2, iv.rank, str(iv.micro_batch % r.micro_batches), ha="center",
                        va="center", fontsize=7, color="white")
            end = max(end, iv.end - t0)
        ax.set_yticks(range(r.stages), [f"P{s}" for s in range(r.stages)])
        ax.invert_yaxis()
        ax.set_title(f"{r.schedule}: {r.stages} processors, {r.micro_batches} micro-batches; "
                     f"bubble {r.bubble_fraction:.0%}, {r.samples_per_s:.3g} samples/s", fontsize=9, loc="left")
    axes[-1, 0].set_xlim(0, end * 1.01)
    axes[-1, 0].set_xlabel("time (s)")
    handles = [Patch(color=COLORS[k], label=LABELS[k]) for k in COLORS if k in used and not (k == "I" and "B" in used)]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, bbox_to_anchor=(0.5, -0.02))
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig
