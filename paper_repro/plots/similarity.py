"""Figures of the probes: gradient cosine per layer and its ablation, CKA heatmap, first-layer
filter grids with their low-frequency share, random-label training accuracy. The tables and
nets come from :mod:`paper_repro.probes`."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
import torch
from matplotlib.figure import Figure

from ..probes.filters import filter_mosaic, mean_low_frequency_fraction
from .colors import method_colors


def plot_gradient_cosine(df: pd.DataFrame, title: str, methods: list[str] | None = None) -> Figure:
    """One panel per method: cosine vs iteration, one line per layer, band = sd over seeds."""
    methods = methods or list(dict.fromkeys(df.method))
    fig, axes = plt.subplots(1, len(methods), figsize=(4.2 * len(methods), 3.6), sharey=True, squeeze=False)
    for ax, method in zip(axes[0], methods):
        d = df[df.method == method]
        sns.lineplot(data=d, x="step", y="cosine", hue="layer", errorbar="sd", palette="viridis", ax=ax,
                     legend=ax is axes[0][-1])
        ax.set(title=method, xlabel="iteration", ylabel="cosine(local, backprop grad)", ylim=(-0.05, 1.05))
        ax.grid(alpha=0.3)
    if axes[0][-1].get_legend() is not None:
        sns.move_legend(axes[0][-1], "center left", bbox_to_anchor=(1.02, 0.5),
                        title="layer\nline: mean over seeds\nband: sd over seeds")
    fig.suptitle(title, y=1.02)
    fig.tight_layout()
    return fig


def plot_cka_heatmap(df: pd.DataFrame, title: str) -> Figure:
    """Rows = methods, columns = block number, value = linear CKA with the reference net."""
    table = df.pivot(index="method", columns="layer", values="cka").reindex(list(dict.fromkeys(df.method)))
    fig, ax = plt.subplots(figsize=(0.75 * table.shape[1] + 2.5, 0.55 * table.shape[0] + 1.6))
    sns.heatmap(table, vmin=0, vmax=1, cmap="magma", annot=True, fmt=".2f", cbar_kws={"label": "linear CKA"},
                ax=ax, annot_kws={"size": 8})
    ax.set(xlabel="block (1 = stem)", ylabel="method")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_filter_weights(weights: dict[str, torch.Tensor], title: str, init: torch.Tensor | None = None,
                        cutoff: float = 0.25) -> Figure:
    """One panel per net: the grid of its first-layer filters, each min-max scaled on its own,
    titled with the mean share of the filters' energy at low spatial frequency
    (:func:`~paper_repro.probes.filters.mean_low_frequency_fraction`).

    With ``init`` (the common initial weights) the first panel is the initialisation itself,
    and a second row shows each net's change since initialisation, ``W - W_init``."""
    panels = ({"initialisation": init} if init is not None else {}) | dict(weights)
    rows = 2 if init is not None else 1
    fig, axes = plt.subplots(rows, len(panels), figsize=(2.9 * len(panels), 3.6 * rows + 0.3), squeeze=False)
    for j, (name, w) in enumerate(panels.items()):
        w = w.detach().float().cpu()
        shown = [(w, f"{name}\nlow-freq {mean_low_frequency_fraction(w, cutoff):.2f}")]
        if init is not None:
            change = w - init.float().cpu()
            label = "change since init" if name != "initialisation" else ""
            if label:
                label += f"\nlow-freq {mean_low_frequency_fraction(change, cutoff):.2f}"
            shown.append((change if label else None, label))
        for i, (weights_i, label) in enumerate(shown):
            ax = axes[i][j]
            ax.axis("off")
            if weights_i is None:
                continue
            img = filter_mosaic(weights_i)
            ax.imshow(img, cmap="gray" if img.ndim == 2 else None, interpolation="nearest")
            ax.set_title(label, fontsize=9)
    fig.suptitle(title, y=1.0)
    fig.tight_layout()
    return fig


def plot_ablation(layers: pd.DataFrame, title: str, paper: dict[int, tuple[float, float]] | None = None) -> Figure:
    """Per-layer cosine at the end of training (mean over seeds, bars = sd) for each ablation
    variant, layers aligned from the top; grey boxes = the paper's range per layer."""
    variants = list(dict.fromkeys(layers.variant))
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for v, colour in zip(variants, sns.color_palette("tab20", len(variants))):
        d = layers[layers.variant == v].sort_values("layer")
        top = d.layer - d.layer.max() + 5                      # the last layer is the paper's 5th
        ax.errorbar(top, d.measured, yerr=d.sd_over_seeds.fillna(0), marker="o", ms=4, lw=1.2, capsize=2,
                    label=v, color=colour)
    ax.plot([], [], " ", label="bars: sd over seeds")
    for layer, (lo, hi) in (paper or {}).items():
        ax.add_patch(plt.Rectangle((layer - 0.2, lo - 0.01), 0.4, hi - lo + 0.02, color="0.6", alpha=0.5, zorder=0))
    ax.set(xlabel="layer (5 = last; deeper nets aligned from the top)", ylabel="cosine(local, backprop grad)",
           ylim=(-0.05, 1.05))
    ax.legend(fontsize=7, ncol=2, loc="lower right")
    ax.grid(alpha=0.3)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_random_labels(df: pd.DataFrame, title: str, chance: float | None = None) -> Figure:
    """Training accuracy vs epoch, one line per method (mean over seeds, band = sd over seeds)."""
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    order = list(dict.fromkeys(df.method))
    sns.lineplot(data=df, x="epoch", y="train_acc", hue="method", hue_order=order, palette=method_colors(order),
                 errorbar="sd", ax=ax)
    if chance is not None:
        ax.axhline(chance, color="gray", ls="--", lw=1, label=f"chance ({chance:g})")
    ax.legend(title="line: mean over seeds\nband: sd over seeds")
    ax.set(xlabel="epoch", ylabel="train accuracy (random labels)", ylim=(0, 1.02))
    ax.grid(alpha=0.3)
    ax.set_title(title)
    fig.tight_layout()
    return fig
