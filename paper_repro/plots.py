"""Plotting helpers shared by the notebooks: one function per figure family lives in the
module that owns the analysis; this file holds what every figure needs (hardware label,
titles, saving)."""
from __future__ import annotations

import os
import platform
from pathlib import Path

import matplotlib
import torch


def hardware_label(device: str = "cpu") -> str:
    """A short description of the hardware, e.g. ``'CPU x2 (x86_64)'`` or ``'NVIDIA H100'``."""
    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"CPU x{cores} ({platform.machine()})"


def figure_title(what: str, *, model: str, dataset: str, profile: str, device: str = "cpu") -> str:
    """``what`` plus the model, data set, profile and hardware, as every figure must state."""
    return f"{what}\n{model} on {dataset} | profile={profile} | {hardware_label(device)}"


def save_figure(fig: "matplotlib.figure.Figure", name: str, figures_dir: str | os.PathLike = "figures") -> Path:
    """Save ``fig`` as ``figures_dir/name.png`` (folder created) and return the path."""
    out = Path(figures_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / (name if name.endswith(".png") else f"{name}.png")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


def training_curves(records, y: str = "final_loss", *, title: str, ax=None, smooth: int = 1,
                    logy: bool = False):
    """One line per ``method`` of ``records[y]`` against ``step`` (rows where ``y`` is set),
    optionally smoothed with a centred rolling mean of ``smooth`` steps."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    df = records.dropna(subset=[y]).copy()
    if smooth > 1:
        df[y] = df.groupby("method")[y].transform(lambda s: s.rolling(smooth, min_periods=1, center=True).mean())
    sns.lineplot(data=df, x="step", y=y, hue="method", ax=ax)
    if logy:
        ax.set_yscale("log")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    return ax.figure
