"""Figures of the pipeline benchmark: throughput, peak memory and busy fraction per stage,
from the records of :mod:`paper_repro.distributed.bench` (tables in
:mod:`paper_repro.distributed.report`)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import seaborn as sns
from matplotlib.figure import Figure

from ..distributed.report import to_frame
from .colors import schedule_colors
from .common import clean_log_ticks
from .labels import model_label


def _micro_batch_axis(ax, sizes) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(sizes), [str(v) for v in sorted(sizes)])
    ax.minorticks_off()
    ax.set_xlabel("micro-batch size (samples)")


def plot_throughput(records: list[dict], title: str) -> Figure:
    """Samples per second vs micro-batch size, one line per schedule."""
    df = to_frame(records).drop_duplicates(["schedule", "micro_batch"])
    fig, ax = plt.subplots(figsize=(7.5, 4))
    sns.lineplot(df, x="micro_batch", y="samples_per_s", hue="schedule", style="schedule", markers=True,
                 palette=schedule_colors(df.schedule.unique()), ax=ax)
    ax.set(ylabel="throughput (samples/s)", title=title, ylim=(0, None))
    _micro_batch_axis(ax, df.micro_batch.unique())
    sns.move_legend(ax, "upper left", bbox_to_anchor=(1.02, 1))
    fig.tight_layout()
    return fig


def plot_memory(records: list[dict], title: str) -> Figure:
    """Peak memory vs micro-batch size, one panel per stage, one line per schedule (log scale)."""
    df = to_frame(records)
    order = list(dict.fromkeys(df.schedule))
    stages = sorted(df.stage.unique())
    fig, axes = plt.subplots(1, len(stages), figsize=(4.5 * len(stages), 4), sharey=True, squeeze=False)
    for ax, s in zip(axes[0], stages):
        sns.lineplot(df[df.stage == s], x="micro_batch", y="peak_mem_MB", hue="schedule", style="schedule",
                     hue_order=order, style_order=order, palette=schedule_colors(order), markers=True, ax=ax,
                     legend=s == stages[-1])
        ax.set(ylabel="peak memory (MB, log scale)", title=f"stage {s}", yscale="log")
        _micro_batch_axis(ax, df.micro_batch.unique())
    sns.move_legend(axes[0][-1], "upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_busy(records: list[dict], title: str) -> Figure:
    """Steady-state busy fraction of each stage per schedule, one panel per micro-batch size."""
    df = to_frame(records)
    sizes = sorted(df.micro_batch.unique())
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.5 * len(sizes), 4), sharey=True, squeeze=False)
    for ax, b in zip(axes[0], sizes):
        sns.barplot(df[df.micro_batch == b], x="schedule", y="busy_fraction", hue="stage", ax=ax, errorbar=None,
                    legend=b == sizes[-1])
        if b == sizes[-1]:
            sns.move_legend(ax, "upper left", bbox_to_anchor=(1.02, 1), title="stage")
        ax.axhline(0.9, color="k", ls="--", lw=1)
        ax.set(ylim=(0, 1.05), ylabel="busy fraction (steady state)", title=f"micro-batch {b}", xlabel="")
        ax.tick_params(axis="x", rotation=45)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_comm_sizes(frame, title: str) -> Figure:
    """Bytes per step against micro-batch size (log-log), one panel per number of processors,
    one line per schedule (``frame``: :func:`~paper_repro.distributed.report.comm_sizes_frame`)."""
    procs = sorted(frame.processors.unique())
    order = list(dict.fromkeys(frame.schedule))
    fig, axes = plt.subplots(1, len(procs), figsize=(4.2 * len(procs), 3.8), sharey=True, squeeze=False)
    for ax, p in zip(axes[0], procs):
        sns.lineplot(frame[frame.processors == p], x="micro_batch", y="total_MB", hue="schedule",
                     style="schedule", hue_order=order, style_order=order, palette=schedule_colors(order),
                     markers=True, ax=ax, legend=p == procs[-1])
        ax.set(yscale="log", ylabel="MB per step (all boundaries)", title=f"{p} processors")
        _micro_batch_axis(ax, frame.micro_batch.unique())
        clean_log_ticks(ax)
        ax.grid(alpha=0.3)
    sns.move_legend(axes[0][-1], "upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_schedule_runs(frame, title: str) -> Figure:
    """Samples per second of every schedule in stored benchmark runs: one panel per model, a
    point per run at its median with a bar over its repeats' range
    (``frame``: :func:`~paper_repro.distributed.report.runs_frame`)."""
    models = list(dict.fromkeys(frame.model))
    fig, axes = plt.subplots(len(models), 1, figsize=(10, 3.6 * len(models)), squeeze=False)
    runs = list(dict.fromkeys(frame.run))
    colors = dict(zip(runs, sns.color_palette("colorblind", len(runs))))   # runs, not schedules: by position
    for ax, model in zip(axes[:, 0], models):
        df = frame[frame.model == model]
        order = list(dict.fromkeys(df.schedule))
        for k, run in enumerate(runs):
            d = df[df.run == run].set_index("schedule").reindex(order).dropna(subset=["samples_per_s"])
            x = [order.index(s) + (k - (len(runs) - 1) / 2) * 0.22 for s in d.index]
            ax.errorbar(x, d.samples_per_s, yerr=[d.samples_per_s - d.lo, d.hi - d.samples_per_s], fmt="o",
                        color=colors[run], capsize=3, label=run)
        ax.set_xticks(range(len(order)), order, rotation=35, ha="right")
        mbs = sorted(df.micro_batch.unique())
        first = df.iloc[0]
        ax.set(ylabel="samples/s (median over repeats,\nbar: range over repeats)", ylim=(0, None),
               title=f"{model_label(model, first.model_kwargs, first.image_size)}, "
                     f"micro-batch {', '.join(map(str, mbs))}")
        ax.grid(axis="y", alpha=0.3)
    axes[0, 0].legend(title="run", loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.suptitle(title)
    fig.tight_layout()
    return fig
