"""Labels for figure titles: model, data set, profile and hardware, as every figure states them."""
from __future__ import annotations

from ..hardware import hardware_label

_DATASET_NAMES = {"digits": "sklearn digits", "cifar10": "CIFAR-10", "imagenet": "ImageNet", "text": "text"}


def figure_title(what: str, *, model: str, dataset: str, profile: str, device: str = "cpu") -> str:
    """``what`` plus the model, data set, profile and hardware, as every figure must state."""
    return f"{what}\n{model} on {dataset} | profile={profile} | {hardware_label(device)}"


def model_label(model: str, model_kwargs: dict | None = None, image_size: int | None = None) -> str:
    """``MLP 8x1024``, ``MLP 10x256 + LayerNorm``, ``ResNet-18 (width 16), 32x32 inputs``,
    ``Transformer 4 layers, d=64``."""
    kw = model_kwargs or {}
    if model == "mlp":
        name = f"MLP {kw.get('depth', 4)}x{kw.get('width', 256)}" + (" + LayerNorm" if kw.get("layer_norm") else "")
    elif model.startswith("resnet"):
        name = f"ResNet-{model[6:]}" + (f" (width {kw['width']})" if "width" in kw else "")
    elif kw:
        name = f"Transformer {kw.get('n_layers', 4)} layers, d={kw.get('d_model', 128)}"
    else:
        name = "Transformer"
    return name + (f", {image_size}x{image_size} inputs" if image_size and model != "transformer" else "")


def grid_labels(grid, data_source: str | None = None) -> tuple[str, str]:
    """(model label, data-set label) of a sweep :class:`~paper_repro.sweep.Grid`, e.g.
    ``("MLP 6x512", "CIFAR-10 (10000 train images, 16x16 px)")``; ``data_source`` names the
    text corpus."""
    kw, dk = grid.model_kwargs, grid.data_kwargs
    if grid.model == "transformer":
        model = f"Transformer {kw.get('n_layers', 4)} layers, d={kw.get('d_model', 128)}"
    else:
        model = model_label(grid.model, kw)
    data = data_source if (grid.dataset == "text" and data_source) else _DATASET_NAMES.get(grid.dataset, grid.dataset)
    notes = []
    if dk.get("max_train"):
        notes.append(f"{dk['max_train']} train {'tokens' if grid.dataset == 'text' else 'images'}")
    if dk.get("image_size"):
        notes.append(f"{dk['image_size']}x{dk['image_size']} px")
    if grid.dataset == "text":
        notes.append(f"{dk.get('seq_len', 64)}-token windows")
    return model, data + (f" ({', '.join(notes)})" if notes else "")


def data_label(d) -> str:
    """E.g. ``'cifar10, 10000 train images 3x32x32'`` for a loaded data set."""
    return f"{d.name}, {d.num_examples('train')} train images {'x'.join(map(str, d.input_shape))}"
