"""Named sizes of the compute-efficiency sweeps: quick | cpu | full.

``compute_grid(study, profile)`` returns the :class:`~paper_repro.sweep.Grid` a notebook
or ``paper-repro sweep STUDY --profile P`` runs:

* ``quick``  offline, a minute on a 2-core CPU: what nbval executes. Digits (MLP and a
             narrow ResNet-18) and the pydoc text corpus (Transformer); tiny grids.
* ``cpu``    an afternoon on a 2-core CPU: MLP on a CIFAR-10 subset, a small Transformer
             on the pydoc corpus, ResNet-18 (narrow) on a CIFAR-10 subset, reduced grids.
* ``full``   paper scale, for GPU servers: MLP on CIFAR-10, a Transformer on an LM1B-style
             text file, ResNet-18 on CIFAR-10 and ResNet-34 on ImageNet (``resnet-imagenet``).

Data folders are never written here: CIFAR-10, ImageNet and the LM1B text are passed as
``data_dir`` by the caller. :func:`grid_flops` gives a grid's total training compute
(the README's expected cost of the full profile comes from it).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from . import cost, methods, models
from .sweep import Grid

PROFILES = ("quick", "cpu", "full")
STUDIES = ("mlp", "transformer", "resnet", "resnet-imagenet")
LOCAL = ["greedy", "overlapping", "chunked-2"]


def pow2(lo: int, hi: int) -> list[int]:
    """Powers of two from ``2**lo`` to ``2**hi``."""
    return [2 ** k for k in range(lo, hi + 1)]


def loggrid(lo: float, hi: float, n: int) -> list[float]:
    """``n`` learning rates evenly spaced in log from ``lo`` to ``hi`` (3 significant digits)."""
    return [float(f"{v:.3g}") for v in np.geomspace(lo, hi, n)]


def compute_grid(study: str, profile: str = "quick") -> Grid:
    """The grid of ``study`` (mlp | transformer | resnet | resnet-imagenet) at ``profile``."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid: {', '.join(PROFILES)}")
    if study not in STUDIES:
        raise ValueError(f"unknown study {study!r}; valid: {', '.join(STUDIES)}")
    key = (study, profile)
    if key not in _GRIDS:
        raise ValueError(f"study {study!r} has no {profile!r} profile; it has: "
                         + ", ".join(p for s, p in _GRIDS if s == study))
    return Grid(**_GRIDS[key])


_GRIDS = {
    # ---------------------------------------------------------------- quick (nbval)
    ("mlp", "quick"): dict(
        name="mlp_digits_quick", model="mlp", dataset="digits",
        model_kwargs=dict(depth=4, width=128), methods=["backprop"] + LOCAL,
        batch_sizes=[8, 32, 128, 512], lrs=[3e-3], steps=150, eval_examples=360,
        description="4x128 MLP on sklearn digits, 150 steps per point"),
    ("transformer", "quick"): dict(
        name="transformer_text_quick", model="transformer", dataset="text",
        model_kwargs=dict(d_model=32, n_layers=4, n_heads=2), data_kwargs=dict(seq_len=32),
        methods=["backprop", "greedy", "chunked-2"], batch_sizes=[4, 16, 64], lrs=[3e-3], steps=100,
        eval_examples=64, description="4-layer d=32 Transformer on pydoc text (bytes), 100 steps"),
    ("resnet", "quick"): dict(
        name="resnet_digits_quick", model="resnet18", dataset="digits", model_kwargs=dict(width=8),
        methods=["backprop", "greedy", "chunked-3"], batch_sizes=[8, 32, 128], lrs=[3e-3], steps=50,
        eval_examples=360, description="ResNet-18 (width 8) on sklearn digits, 50 steps"),
    # --------------------------------------------------------- cpu (an afternoon)
    ("mlp", "cpu"): dict(
        name="mlp_cifar10_cpu", model="mlp", dataset="cifar10",
        model_kwargs=dict(depth=6, width=512), data_kwargs=dict(max_train=10000, max_test=1000, image_size=16),
        methods=["backprop", "greedy", "chunked-2", "chunked-3"], batch_sizes=[16, 64, 256, 1024],
        lrs=[5e-4, 2e-3], steps=1000, examples=16000, min_steps=60, eval_examples=1000,
        description="6x512 MLP on a 10k-image CIFAR-10 subset at 16x16 px"),
    ("transformer", "cpu"): dict(
        name="transformer_text_cpu", model="transformer", dataset="text",
        model_kwargs=dict(d_model=64, n_layers=4, n_heads=4), data_kwargs=dict(seq_len=32),
        methods=["backprop", "greedy", "chunked-2"], batch_sizes=[8, 32, 128], lrs=[1e-3, 3e-3],
        steps=500, examples=4000, min_steps=60, eval_examples=256,
        description="4-layer d=64 Transformer on pydoc text (bytes, 32-token windows)"),
    ("resnet", "cpu"): dict(
        name="resnet_cifar10_cpu", model="resnet18", dataset="cifar10", model_kwargs=dict(width=16),
        data_kwargs=dict(max_train=10000, max_test=1000), methods=["backprop", "greedy", "chunked-3"],
        batch_sizes=[32, 128], lrs=[1e-3], steps=300, examples=9600, min_steps=75, eval_examples=1000,
        description="ResNet-18 (width 16) on a 10k-image CIFAR-10 subset, reduced sweep"),
    # ------------------------------------------------------------ full (GPU servers)
    ("mlp", "full"): dict(
        name="mlp_cifar10_full", model="mlp", dataset="cifar10", model_kwargs=dict(depth=8, width=4096),
        methods=["backprop", "greedy", "overlapping", "chunked-2", "chunked-4"], batch_sizes=pow2(5, 14),
        lrs=loggrid(1e-4, 3e-3, 4), steps=20000, examples=5_000_000, min_steps=500, eval_every=1000,
        eval_examples=10000, description="8x4096 MLP on CIFAR-10 (paper scale)"),
    ("transformer", "full"): dict(
        name="transformer_lm1b_full", model="transformer", dataset="text",
        model_kwargs=dict(d_model=512, n_layers=6, n_heads=8), data_kwargs=dict(seq_len=128),
        methods=["backprop", "greedy", "overlapping", "chunked-2", "chunked-3"], batch_sizes=pow2(4, 11),
        lrs=loggrid(1e-4, 1e-3, 3), steps=20000, examples=2_000_000, min_steps=500, eval_every=1000,
        eval_examples=2000, description="6-layer d=512 Transformer LM on an LM1B-style text file (bytes)"),
    ("resnet", "full"): dict(
        name="resnet18_cifar10_full", model="resnet18", dataset="cifar10",
        methods=["backprop", "greedy", "overlapping", "chunked-2", "chunked-3"], batch_sizes=pow2(5, 12),
        lrs=loggrid(3e-4, 3e-3, 3), steps=20000, examples=2_500_000, min_steps=300, eval_every=1000,
        eval_examples=10000, description="ResNet-18 on CIFAR-10 (paper scale)"),
    ("resnet-imagenet", "full"): dict(
        name="resnet34_imagenet_full", model="resnet34", dataset="imagenet", data_kwargs=dict(image_size=224),
        methods=["backprop", "greedy", "chunked-2", "chunked-4"], batch_sizes=pow2(6, 11),
        lrs=loggrid(3e-4, 3e-3, 2), steps=50000, examples=12_800_000, min_steps=2000, eval_every=5000,
        eval_examples=10000, description="ResNet-34 on ImageNet at 224 px (paper scale)"),
}


def grid_flops(grid: Grid, input_shape: tuple, num_classes: int) -> dict:
    """Total training FLOPs of ``grid`` (forward + backward of all blocks and heads, every
    point), measured per example on a net of the grid's size, without any data.

    ``input_shape`` is one example's shape ((C, H, W), or (seq_len,) for text) and
    ``num_classes`` the classes or vocabulary size. Returns ``{"flops": total,
    "per_method": {method: flops}}``."""
    kw = dict(grid.model_kwargs)
    if grid.model == "transformer":
        net_fn = lambda: models.transformer_lm(vocab_size=num_classes, seq_len=input_shape[0], **kw)  # noqa: E731
        x = torch.randint(num_classes, (2, *input_shape))
        y = torch.randint(num_classes, (2, *input_shape))
    else:
        if grid.model == "mlp":
            kw.setdefault("in_dim", math.prod(input_shape))
        else:
            kw.setdefault("small_input", input_shape[-1] <= 64)
            kw.setdefault("in_channels", input_shape[0])
        net_fn = lambda: models.build(grid.model, num_classes=num_classes, **kw)  # noqa: E731
        x, y = torch.randn(2, *input_shape), torch.randint(num_classes, (2,))
    per_method = {}
    for method in grid.methods:
        c = cost.step_cost(methods.build(net_fn(), method), x, y)
        examples = sum(grid.steps_for(b) * b for b in grid.batch_sizes) * len(grid.lrs) * len(grid.seeds)
        per_method[method] = examples * c.total_flops
    return {"flops": sum(per_method.values()), "per_method": per_method}


# ------------------------------------------------------------- quickstart notebook
QUICKSTART_METHODS = ["backprop", "greedy", "overlapping", "chunked-2", "chunked-3"]
_QUICKSTART = {
    "quick": dict(dataset="digits", steps=400, batch_size=64, lr=1e-3, eval_every=25, eval_examples=None,
                  model_kwargs=dict(depth=4, width=128)),
    "cpu": dict(dataset="cifar10", steps=3000, batch_size=128, lr=3e-4, eval_every=250, eval_examples=2000,
                model_kwargs=dict(depth=4, width=1024)),
    "full": dict(dataset="cifar10", steps=20000, batch_size=256, lr=3e-4, eval_every=1000, eval_examples=None,
                 model_kwargs=dict(depth=8, width=4096)),
}


def quickstart_config(profile: str = "quick", data_dir: str | None = None, seed: int = 0):
    """The 00_quickstart settings: a 4-block MLP (8 at full scale) trained with every method."""
    from .train import TrainConfig

    if profile not in _QUICKSTART:
        raise ValueError(f"unknown profile {profile!r}; valid: {', '.join(PROFILES)}")
    kw = dict(_QUICKSTART[profile])
    if kw["dataset"] != "digits" and data_dir is None:
        raise ValueError(f"profile {profile!r} trains on {kw['dataset']}: pass data_dir (e.g. an ImageFolder "
                         "tree with train/<class>/*.jpg, or the official cifar-10-batches-py folder)")
    return TrainConfig(model="mlp", data_dir=data_dir, seed=seed, **kw)
