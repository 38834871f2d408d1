"""Gantt chart of simulated steps: one row per processor, one bar per action.

matplotlib is imported when a chart is drawn, so that the command line (which imports this
module) does not load it for runs that draw nothing."""
from __future__ import annotations

from .engine import Result

COLORS = {"F": "#4c72b0", "B": "#dd8452", "I": "#dd8452", "W": "#8172b3", "FB": "#55a868", "OPT": "#c44e52"}
LABELS = {"F": "forward", "B": "backward", "I": "backward (input gradient)", "W": "backward (weight gradient)",
          "FB": "forward + backward (local)", "OPT": "optimizer step"}


def plot_gantt(results: list[Result], title: str = "", step: int | None = 0, ax_width: float = 11.0):
    """One panel per result, each processor a row, each action a bar (micro-batch number inside
    when there is room). ``step``: draw only that simulated step (None: all of them)."""
    if not results:
        raise ValueError("plot_gantt needs at least one simulation result")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    fig, axes = plt.subplots(len(results), 1, figsize=(ax_width, 1.0 + 0.45 * sum(r.stages for r in results) + 0.5 * len(results)),
                             squeeze=False, sharex=True)
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
