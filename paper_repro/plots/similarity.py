"""Figures of the probes: gradient cosine per layer, CKA heatmap, first-layer filter grids,
random-label training accuracy. The tables and nets come from :mod:`paper_repro.probes`."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from ..models import BlockNet
from ..probes.filters import filter_mosaic, first_conv


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
        sns.move_legend(axes[0][-1], "center left", bbox_to_anchor=(1.02, 0.5), title="layer")
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


def plot_filter_grids(nets: dict[str, BlockNet], title: str, init: BlockNet | None = None) -> Figure:
    """One panel per net: the 8x8 grid of its first-layer conv filters (the paper's figure).

    With ``init`` (the common initial net), a second row shows each net's change since
    initialisation, ``W - W_init``: after a short run the filters themselves still look like
    their random start, while the change shows what each method has learned."""
    rows = 2 if init is not None else 1
    fig, axes = plt.subplots(rows, len(nets), figsize=(2.9 * len(nets), 3.2 * rows + 0.3), squeeze=False)
    for j, (name, net) in enumerate(nets.items()):
        w = first_conv(net).weight
        panels = [(w, name)] + ([(w - first_conv(init).weight.to(w.device), "change since init")] if init else [])
        for i, (weights, label) in enumerate(panels):
            img = filter_mosaic(weights)
            axes[i][j].imshow(img, cmap="gray" if img.ndim == 2 else None, interpolation="nearest")
            axes[i][j].set_title(label, fontsize=10)
            axes[i][j].axis("off")
    fig.suptitle(title, y=1.0)
    fig.tight_layout()
    return fig


def plot_random_labels(df: pd.DataFrame, title: str, chance: float | None = None) -> Figure:
    """Training accuracy vs epoch, one line per method (band over seeds when there are several)."""
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    sns.lineplot(data=df, x="epoch", y="train_acc", hue="method", errorbar="sd", ax=ax)
    if chance is not None:
        ax.axhline(chance, color="gray", ls="--", lw=1, label=f"chance ({chance:g})")
        ax.legend()
    ax.set(xlabel="epoch", ylabel="train accuracy (random labels)", ylim=(0, 1.02))
    ax.grid(alpha=0.3)
    ax.set_title(title)
    fig.tight_layout()
    return fig
