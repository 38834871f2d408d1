"""What every figure needs: saving, log-axis tick labels, and training curves of records."""
from __future__ import annotations

import math
import os
from pathlib import Path

import matplotlib.pyplot as plt
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from .colors import method_colors


def save_figure(fig: Figure, name: str, figures_dir: str | os.PathLike = "figures") -> Path:
    """Save ``fig`` as ``figures_dir/name.png`` (folder created) and return the path."""
    out = Path(figures_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / (name if name.endswith(".png") else f"{name}.png")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


def clean_log_ticks(ax) -> None:
    """Log axes whose minor tick labels would overlap: none on axes spanning a decade or more,
    only 2x and 5x a power of ten on shorter ones (``3x10^9`` and ``4x10^9`` collide)."""
    for axis, scale, lim in ((ax.xaxis, ax.get_xscale(), ax.get_xlim()), (ax.yaxis, ax.get_yscale(), ax.get_ylim())):
        if scale != "log" or lim[0] <= 0:
            continue
        axis.set_minor_formatter(NullFormatter() if lim[1] / lim[0] >= 10 else FuncFormatter(_two_or_five))


def _two_or_five(value: float, _pos=None) -> str:
    """``2x10^k`` and ``5x10^k`` in the axis's mathtext style; nothing for other values."""
    if value <= 0:
        return ""
    exponent = math.floor(math.log10(value) + 1e-9)
    mantissa = value / 10 ** exponent
    if min(abs(mantissa - 2), abs(mantissa - 5)) > 1e-6:
        return ""
    if -2 <= exponent <= 3:
        return f"{value:g}"
    return f"$\\mathdefault{{{mantissa:g}\\times10^{{{exponent}}}}}$"


def training_curves(records, y: str = "final_loss", *, title: str, ax=None, smooth: int = 1,
                    logy: bool = False) -> Figure:
    """One line per ``method`` of ``records[y]`` against ``step`` (rows where ``y`` is set),
    optionally smoothed with a centred rolling mean of ``smooth`` steps."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    df = records.dropna(subset=[y]).copy()
    if smooth > 1:
        df[y] = df.groupby("method")[y].transform(lambda s: s.rolling(smooth, min_periods=1, center=True).mean())
    order = list(dict.fromkeys(df["method"]))
    sns.lineplot(data=df, x="step", y=y, hue="method", hue_order=order, palette=method_colors(order), ax=ax)
    if logy:
        ax.set_yscale("log")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    return ax.figure
