"""Probing local learning: gradient cosine, linear CKA, first-layer filters, random labels.

The paper's three probing figures (PAPER.md, "Probing figures"), one function each:

* :func:`gradient_cosine` -- per block, the cosine between the block's *local* update
  (the gradient of ``sum(learner.losses(x, y))``) and its *true* backprop gradient (the
  gradient of the net's own final loss ``net.loss(net(x), y)``), at the same parameters on
  the same batch. :class:`GradientCosineRecorder` is a ``train.train`` callback that
  records it every few steps; :func:`gradient_similarity_runs` runs methods x seeds.
* :func:`linear_cka` -- linear Centered Kernel Alignment (Kornblith et al., 2019) with the
  biased (default) or the unbiased HSIC estimator (Song et al., 2012);
  :func:`cka_table` compares every block of several nets with a reference net.
* :func:`plot_filter_grids` -- the 8x8 grids of first-layer conv filters;
  :func:`plot_cka_heatmap` -- methods x blocks CKA against backprop.
* :func:`random_label_runs` -- training accuracy per epoch when the labels are random.

A "layer" of the paper is a block of :class:`~paper_repro.models.BlockNet`; figures number
them from 1, as the paper does. :func:`settings` maps a notebook and a profile
(quick | cpu | full) to the sizes the notebooks use.
"""
from __future__ import annotations

import copy
import dataclasses
import math
from contextlib import contextmanager

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import torch.nn as nn

from . import train as train_mod
from .methods import Learner
from .models import BlockNet
from .plots import figure_title, hardware_label, save_figure  # noqa: F401  (re-exported for notebooks)

PROFILES = ("quick", "cpu", "full")
NOTEBOOKS = ("gradient", "features", "random_labels")

# ------------------------------------------------------------------------------ profiles
_SETTINGS = {
    # 05: a 5-block MLP trained by each local method; cosine every `every` steps.
    "gradient": {
        "quick": dict(dataset="digits", data_kwargs={}, depth=5, width=128, steps=300,
                      every=10, batch_size=64, lr=1e-3, seeds=[0, 1, 2],
                      methods=["greedy", "overlapping", "chunked-2"]),
        "cpu": dict(dataset="cifar10", data_kwargs=dict(max_train=10000, max_test=1000),
                    depth=5, width=512, steps=1500, every=30, batch_size=128, lr=3e-4, seeds=[0, 1, 2],
                    methods=["greedy", "overlapping", "chunked-2"]),
        "full": dict(dataset="cifar10", data_kwargs={}, depth=5, width=1024, steps=10000,
                     every=100, batch_size=128, lr=3e-4, seeds=[0, 1, 2, 3, 4],
                     methods=["greedy", "overlapping", "chunked-2"]),
    },
    # 06: ResNet-18 with a 64-channel stem per method; CKA on held-out images.
    "features": {
        "quick": dict(dataset="digits", data_kwargs={}, model="resnet18", steps=12,
                      batch_size=32, lr=1e-3, cka_examples=128,
                      methods=["backprop", "chunked-2", "chunked-3", "overlapping", "greedy"]),
        "cpu": dict(dataset="cifar10",
                    data_kwargs=dict(max_train=10000, max_test=1000, image_size=16), model="resnet18",
                    steps=300, batch_size=32, lr=1e-3, cka_examples=500,
                    methods=["backprop", "chunked-2", "chunked-3", "overlapping", "greedy"]),
        "full": dict(dataset="imagenet", data_kwargs=dict(image_size=224, max_train=100000, max_test=5000),
                     model="resnet18", steps=20000, batch_size=256, lr=1e-3, cka_examples=500,
                     methods=["backprop", "chunked-2", "chunked-3", "overlapping", "greedy"]),
    },
    # 07: fitting random labels. The paper's architecture for this figure is not known: an MLP
    # and a narrow ResNet-18 (whose early blocks + pooled linear heads have little capacity).
    "random_labels": {
        "quick": dict(dataset="digits", seeds=[0], methods=["backprop", "greedy", "chunked-2"], runs=[
            dict(model="mlp", label="MLP 5x128", model_kwargs=dict(depth=5, width=128), data_kwargs={},
                 epochs=30, batch_size=64, lr=1e-3),
            dict(model="resnet18", label="ResNet-18 width 8", model_kwargs=dict(width=8), data_kwargs={},
                 epochs=4, batch_size=64, lr=1e-3)]),
        "cpu": dict(dataset="cifar10", seeds=[0], methods=["backprop", "greedy", "chunked-2"], runs=[
            dict(model="mlp", label="MLP 5x512", model_kwargs=dict(depth=5, width=512),
                 data_kwargs=dict(max_train=5000, max_test=1000), epochs=100, batch_size=128, lr=3e-4),
            dict(model="resnet18", label="ResNet-18 width 16", model_kwargs=dict(width=16),
                 data_kwargs=dict(max_train=2500, max_test=500, image_size=16), epochs=40, batch_size=128,
                 lr=1e-3)]),
        "full": dict(dataset="cifar10", seeds=[0, 1, 2], methods=["backprop", "greedy", "chunked-2"], runs=[
            dict(model="mlp", label="MLP 5x1024", model_kwargs=dict(depth=5, width=1024), data_kwargs={},
                 epochs=100, batch_size=128, lr=3e-4),
            dict(model="resnet18", label="ResNet-18", model_kwargs={}, data_kwargs={}, epochs=100,
                 batch_size=128, lr=1e-3)]),
    },
}


def settings(notebook: str, profile: str) -> dict:
    """The run sizes of ``notebook`` (gradient | features | random_labels) under ``profile``."""
    if notebook not in _SETTINGS:
        raise ValueError(f"unknown notebook {notebook!r}; valid: {', '.join(NOTEBOOKS)}")
    if profile not in _SETTINGS[notebook]:
        raise ValueError(f"unknown profile {profile!r}; valid: {', '.join(PROFILES)}")
    return copy.deepcopy(_SETTINGS[notebook][profile])


def load_data(s: dict, data_dir=None):
    """The data set of settings ``s`` (``data_dir`` is ignored for the offline digits)."""
    from . import data as data_mod

    return data_mod.load(s["dataset"], None if s["dataset"] == "digits" else data_dir, **s.get("data_kwargs", {}))


def data_label(d) -> str:
    """E.g. ``'cifar10, 10000 train images 3x32x32'``, for figure titles."""
    return f"{d.name}, {d.num_examples('train')} train images {'x'.join(map(str, d.input_shape))}"


# ------------------------------------------------------------------- gradient cosine
@contextmanager
def preserved_buffers(module: nn.Module):
    """Restore every buffer (e.g. BatchNorm running stats) of ``module`` on exit, so extra
    forward passes made for a probe leave no trace in the model."""
    saved = [(b, b.detach().clone()) for b in module.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for b, value in saved:
                b.copy_(value)


def _flat(grads, params) -> torch.Tensor:
    return torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params)])


def block_gradients(learner: Learner, x: torch.Tensor, y: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(local, true) gradient of every block, each flattened over the block's parameters.

    local: gradient of ``sum(learner.losses(x, y))`` (the method's update); true: gradient
    of ``learner.net.loss(learner.net(x), y)`` (end-to-end backprop of the final loss).
    Uses ``torch.autograd.grad``: ``.grad`` and the buffers of the model are left as they were.
    """
    net = learner.net
    blocks = [list(b.parameters()) for b in net.blocks]
    params = [p for ps in blocks for p in ps]
    if not params:
        raise ValueError("the net's blocks have no parameters")
    with preserved_buffers(learner):
        local = torch.autograd.grad(sum(learner.losses(x, y)), params, allow_unused=True)
        true = torch.autograd.grad(net.loss(net(x), y), params, allow_unused=True)
    out_local, out_true, i = [], [], 0
    for ps in blocks:
        out_local.append(_flat(local[i:i + len(ps)], ps).detach())
        out_true.append(_flat(true[i:i + len(ps)], ps).detach())
        i += len(ps)
    return out_local, out_true


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cosine similarity of two flat vectors (NaN when either is zero)."""
    a, b = a.double(), b.double()
    denom = a.norm() * b.norm()
    return float(a @ b / denom) if denom > 0 else math.nan


def gradient_cosine(learner: Learner, x: torch.Tensor, y: torch.Tensor) -> list[float]:
    """Per block: cosine(local update, true backprop gradient) at the current parameters."""
    local, true = block_gradients(learner, x, y)
    return [cosine(a, b) for a, b in zip(local, true)]


class GradientCosineRecorder:
    """``train.train`` callback: records :func:`gradient_cosine` at step 1 and every ``every`` steps.

    ``frame()`` is a DataFrame with columns step, layer (1-based block number), cosine."""

    def __init__(self, every: int = 10):
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise ValueError(f"every must be a positive integer, got {every!r}")
        self.every = every
        self.rows: list[dict] = []

    def __call__(self, step: int, learner: Learner, x: torch.Tensor, y: torch.Tensor) -> None:
        if step == 1 or step % self.every == 0:
            for i, c in enumerate(gradient_cosine(learner, x, y)):
                self.rows.append({"step": step, "layer": i + 1, "cosine": c})

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=["step", "layer", "cosine"])


def gradient_similarity_runs(cfg: train_mod.TrainConfig, methods: list[str], seeds: list[int], every: int,
                             data=None) -> pd.DataFrame:
    """Train ``cfg`` once per method x seed, recording the gradient cosine every ``every`` steps.

    Returns a tidy DataFrame: method, seed, step, layer, cosine."""
    data = data if data is not None else train_mod.load_data(cfg)
    frames = []
    for method in methods:
        for seed in seeds:
            run_cfg = dataclasses.replace(cfg, method=method, seed=seed, eval_every=0)
            rec = GradientCosineRecorder(every)
            result = train_mod.train(run_cfg, data=data, callback=rec)
            if result.status != "finished":
                raise RuntimeError(f"{method} seed {seed} diverged; lower the learning rate ({cfg.lr})")
            frames.append(rec.frame().assign(method=method, seed=seed))
    return pd.concat(frames, ignore_index=True)[["method", "seed", "step", "layer", "cosine"]]


# Paper's greedy 5-module curves, read off its figure (PAPER.md): layer -> (low, high).
PAPER_GREEDY_COSINE = {5: (1.0, 1.0), 4: (0.95, 1.0), 3: (0.6, 0.75), 2: (0.4, 0.5), 1: (0.25, 0.3)}


def gradient_claims(df: pd.DataFrame, method: str = "greedy", last_fraction: float = 0.2) -> pd.DataFrame:
    """Mean (and sd over seeds) cosine per layer over the last ``last_fraction`` of steps,
    next to the paper's range for the greedy 5-module net."""
    d = df[df.method == method]
    if d.empty:
        raise ValueError(f"no rows for method {method!r}; have: {sorted(df.method.unique())}")
    cut = d.step.max() * (1 - last_fraction)
    per_seed = d[d.step >= cut].groupby(["layer", "seed"]).cosine.mean()
    out = per_seed.groupby("layer").agg(["mean", "std"]).rename(columns={"mean": "measured", "std": "sd_over_seeds"})
    n_layers = int(d.layer.max())
    rows = []
    for layer, r in out.iterrows():
        paper_layer = 5 - (n_layers - layer)  # align from the top: the last layer is the paper's 5th
        lo, hi = PAPER_GREEDY_COSINE.get(paper_layer, (math.nan, math.nan))
        rows.append({"layer": layer, "paper_low": lo, "paper_high": hi, "measured": round(r.measured, 3),
                     "sd_over_seeds": round(r.sd_over_seeds, 3) if np.isfinite(r.sd_over_seeds) else math.nan,
                     "in_paper_range": bool(lo - 0.025 <= r.measured <= hi + 0.025)})
    return pd.DataFrame(rows)


def ordering_holds(claims: pd.DataFrame) -> bool:
    """The paper's qualitative claim: similarity rises with depth (layer 1 < 2 < ... < last)."""
    return bool(np.all(np.diff(claims.sort_values("layer").measured.to_numpy()) > 0))


def plot_gradient_cosine(df: pd.DataFrame, title: str, methods: list[str] | None = None) -> plt.Figure:
    """One panel per method: cosine vs iteration, one line per layer, band = sd over seeds."""
    import seaborn as sns

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


# ------------------------------------------------------------------------ linear CKA
def _as_matrix(X, name: str) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(X) if not isinstance(X, torch.Tensor) else X).detach()
    if t.ndim < 2:
        raise ValueError(f"{name} must be (n_examples, n_features) (or more dims, flattened), got shape "
                         f"{tuple(t.shape)}")
    t = t.reshape(t.shape[0], -1).to(device="cpu", dtype=torch.float64)
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} contains NaN or inf")
    return t


def _hsic_biased(K: torch.Tensor, L: torch.Tensor) -> torch.Tensor:
    n = K.shape[0]
    H = torch.eye(n, dtype=K.dtype) - 1.0 / n
    return ((H @ K @ H) * (H @ L @ H)).sum() / (n - 1) ** 2


def _hsic_unbiased(K: torch.Tensor, L: torch.Tensor) -> torch.Tensor:
    """Song et al. (2012), eq. 5: the U-statistic estimator of HSIC (needs n > 3)."""
    n = K.shape[0]
    K, L = K.clone(), L.clone()
    K.fill_diagonal_(0)
    L.fill_diagonal_(0)
    KL = K @ L
    term = KL.trace() + K.sum() * L.sum() / ((n - 1) * (n - 2)) - 2.0 * KL.sum() / (n - 2)
    return term / (n * (n - 3))


def _hsic_unbiased_features(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """:func:`_hsic_unbiased` of ``K = X X^T``, ``L = Y Y^T`` without forming the n x n
    matrices: O(n p q) instead of O(n^2 (p + q) + n^3)."""
    n = X.shape[0]
    dk, dl = X.square().sum(1), Y.square().sum(1)                  # diag(K), diag(L)
    k1, l1 = X @ X.sum(0) - dk, Y @ Y.sum(0) - dl                  # K~ 1, L~ 1
    trace = (Y.T @ X).square().sum() - (dk * dl).sum()             # tr(K~ L~)
    term = trace + k1.sum() * l1.sum() / ((n - 1) * (n - 2)) - 2.0 * (k1 @ l1) / (n - 2)
    return term / (n * (n - 3))


def _hsic_biased_features(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    n = X.shape[0]
    return (Y.T @ (X - X.mean(0))).square().sum() / (n - 1) ** 2  # = tr(K H L H) / (n-1)^2


def linear_cka(X, Y, unbiased: bool = False) -> float:
    """Linear CKA between representations X (n, p) and Y (n, q) of the same n examples.

    ``HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L))`` with ``K = X X^T``, ``L = Y Y^T`` (features
    centred by the estimator); the biased HSIC estimator by default (Kornblith et al.,
    2019), the unbiased one (Song et al., 2012) with ``unbiased=True``. Extra dimensions
    (e.g. C, H, W) are flattened. Tensors or arrays; computed in float64, through the
    n x n Gram matrices when a representation has more features than examples and in
    feature space otherwise (same value, tested).
    """
    X, Y = _as_matrix(X, "X"), _as_matrix(Y, "Y")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X and Y must hold the same examples: {X.shape[0]} vs {Y.shape[0]} rows")
    n_min = 4 if unbiased else 2
    if X.shape[0] < n_min:
        raise ValueError(f"linear_cka(unbiased={unbiased}) needs at least {n_min} examples, got {X.shape[0]}")
    if max(X.shape[1], Y.shape[1]) > X.shape[0]:
        K, L = X @ X.T, Y @ Y.T
        hsic = _hsic_unbiased if unbiased else _hsic_biased
    else:
        K, L = X, Y
        hsic = _hsic_unbiased_features if unbiased else _hsic_biased_features
    xy, xx, yy = hsic(K, L), hsic(K, K), hsic(L, L)
    if not (xx > 0 and yy > 0):
        raise ValueError("linear_cka is undefined for a constant representation (zero variance)")
    return float(xy / torch.sqrt(xx * yy))


@torch.no_grad()
def block_features(net: BlockNet, x: torch.Tensor, batch_size: int = 256) -> list[torch.Tensor]:
    """Every block's output on ``x`` (eval mode), flattened to (n, features), on the CPU."""
    was_training = net.training
    net.eval()
    outs: list[list[torch.Tensor]] = []
    try:
        for chunk in x.split(batch_size):
            feats = net.features(chunk)
            if not outs:
                outs = [[] for _ in feats]
            for store, f in zip(outs, feats):
                store.append(f.reshape(f.shape[0], -1).float().cpu())
    finally:
        net.train(was_training)
    return [torch.cat(o) for o in outs]


def cka_table(nets: dict[str, BlockNet], reference: str, x: torch.Tensor, unbiased: bool = False) -> pd.DataFrame:
    """Linear CKA of each net's block outputs against the same block of ``nets[reference]`` on ``x``.

    Returns a tidy DataFrame: method, layer (1-based block number), cka."""
    if reference not in nets:
        raise ValueError(f"reference {reference!r} is not among the nets: {', '.join(nets)}")
    ref = block_features(nets[reference], x)
    rows = []
    for name, net in nets.items():
        feats = block_features(net, x)
        if len(feats) != len(ref):
            raise ValueError(f"net {name!r} has {len(feats)} blocks, the reference has {len(ref)}")
        for i, (a, b) in enumerate(zip(feats, ref)):
            rows.append({"method": name, "layer": i + 1, "cka": linear_cka(a, b, unbiased=unbiased)})
    return pd.DataFrame(rows)


def plot_cka_heatmap(df: pd.DataFrame, title: str) -> plt.Figure:
    """Rows = methods, columns = block number, value = linear CKA with the reference net."""
    import seaborn as sns

    table = df.pivot(index="method", columns="layer", values="cka").reindex(list(dict.fromkeys(df.method)))
    fig, ax = plt.subplots(figsize=(0.75 * table.shape[1] + 2.5, 0.55 * table.shape[0] + 1.6))
    sns.heatmap(table, vmin=0, vmax=1, cmap="magma", annot=True, fmt=".2f", cbar_kws={"label": "linear CKA"},
                ax=ax, annot_kws={"size": 8})
    ax.set(xlabel="block (1 = stem)", ylabel="method")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def feature_claims(cka: pd.DataFrame, reference: str = "backprop") -> pd.DataFrame:
    """Per method: CKA with the reference at the stem (layer 1), at the last block and the
    mean over blocks; the paper's visual claim is that chunked nets stay closer to backprop's
    features than overlapping and greedy ones."""
    d = cka[cka.method != reference]
    out = d.groupby("method", sort=False).agg(stem_cka=("cka", "first"), last_cka=("cka", "last"),
                                              mean_cka=("cka", "mean")).reset_index()
    return out.round(3)


# --------------------------------------------------------------------- filter grids
def first_conv(net: BlockNet) -> nn.Conv2d:
    """The first ``nn.Conv2d`` of the net (the ResNet stem)."""
    for m in net.blocks[0].modules():
        if isinstance(m, nn.Conv2d):
            return m
    raise ValueError(f"net {getattr(net, 'name', '?')!r} has no Conv2d in its first block")


def filter_mosaic(weight: torch.Tensor, ncols: int = 8, pad: int = 1) -> np.ndarray:
    """(out, C, k, k) conv weights -> one image of an ``ncols``-wide grid of filters, each
    min-max scaled to [0, 1] on its own; (H, W, 3) for RGB, (H, W) for one channel."""
    w = weight.detach().float().cpu()
    if w.ndim != 4 or w.shape[1] not in (1, 3):
        raise ValueError(f"expected conv weights (out, 1 or 3, k, k), got shape {tuple(w.shape)}")
    out, c, kh, kw = w.shape
    lo = w.amin(dim=(1, 2, 3), keepdim=True)
    hi = w.amax(dim=(1, 2, 3), keepdim=True)
    w = (w - lo) / (hi - lo).clamp_min(1e-12)
    nrows = math.ceil(out / ncols)
    img = np.ones((nrows * (kh + pad) + pad, ncols * (kw + pad) + pad, c), dtype=np.float32)
    for i in range(out):
        r, col = divmod(i, ncols)
        top, left = pad + r * (kh + pad), pad + col * (kw + pad)
        img[top:top + kh, left:left + kw] = w[i].permute(1, 2, 0).numpy()
    return img[..., 0] if c == 1 else img


def plot_filter_grids(nets: dict[str, BlockNet], title: str, init: BlockNet | None = None) -> plt.Figure:
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


def initial_net(cfg: train_mod.TrainConfig, data) -> BlockNet:
    """The net every method of ``cfg`` starts from (``build_learner`` seeds, then builds the
    net before any auxiliary head, so the initial net does not depend on the method)."""
    return train_mod.build_learner(dataclasses.replace(cfg, method="backprop"), data).net.eval()


def train_nets(cfg: train_mod.TrainConfig, methods: list[str], data=None) -> tuple[dict[str, BlockNet], pd.DataFrame]:
    """Train ``cfg`` once per method (same seed: the same initial net); returns the nets by
    method and a summary table (method, final train loss, test accuracy, wall time)."""
    data = data if data is not None else train_mod.load_data(cfg)
    nets, rows = {}, []
    for method in methods:
        result = train_mod.train(dataclasses.replace(cfg, method=method, eval_every=0), data=data)
        s = result.summary()
        rows.append({"method": method, "status": s["status"], "final_loss": s["final_loss"],
                     "test_acc": s["eval_acc"], "wall_time_s": s["wall_time_s"]})
        nets[method] = result.learner.net.eval()
    return nets, pd.DataFrame(rows)


# ---------------------------------------------------------------------- random labels
def random_label_runs(cfg: train_mod.TrainConfig, methods: list[str], seeds: list[int], epochs: int,
                      data=None) -> pd.DataFrame:
    """Training accuracy (on the training set with its random labels) after each epoch.

    ``data`` (or ``cfg``'s data set) gets random labels drawn with each seed; one epoch is
    ``ceil(n_train / batch_size)`` steps (the sampler shuffles every epoch). Returns a tidy
    DataFrame: method, seed, epoch (0 = initial net), train_acc, train_loss."""
    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1:
        raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
    base = data if data is not None else train_mod.load_data(cfg)
    rows = []
    for seed in seeds:
        shuffled = base.with_random_labels(seed)
        per_epoch = math.ceil(shuffled.num_examples("train") / cfg.batch_size)
        for method in methods:
            run_cfg = dataclasses.replace(cfg, method=method, seed=seed, steps=epochs * per_epoch, eval_every=0)

            def record(learner, epoch):
                loss, acc = train_mod.evaluate(learner.net, shuffled, "train", None, cfg.device)
                rows.append({"method": method, "seed": seed, "epoch": epoch, "train_acc": acc, "train_loss": loss})

            def callback(step, learner, x, y):  # before update `step`: `step - 1` updates done
                if (step - 1) % per_epoch == 0:
                    record(learner, (step - 1) // per_epoch)

            result = train_mod.train(run_cfg, data=shuffled, callback=callback)
            if result.status != "finished":
                raise RuntimeError(f"{method} seed {seed} diverged; lower the learning rate ({cfg.lr})")
            record(result.learner, epochs)
    return pd.DataFrame(rows)


# Paper's random-label figure after 100 epochs (PAPER.md); chunked-2 is not in the paper.
PAPER_RANDOM_LABELS = {"backprop": 0.78, "greedy": 0.28}


def random_label_claims(df: pd.DataFrame) -> pd.DataFrame:
    """Final-epoch training accuracy per method (mean over seeds; also averaged over the last
    5 epochs, as local runs are noisy) next to the paper's; one block of rows per ``model``
    when ``df`` has that column."""
    out = []
    for model, d in (df.groupby("model", sort=False) if "model" in df else [(None, df)]):
        last = d[d.epoch == d.epoch.max()].groupby("method", sort=False).train_acc.mean()
        last5 = d[d.epoch > d.epoch.max() - 5].groupby("method", sort=False).train_acc.mean()
        rows = pd.DataFrame({"method": last.index, "epochs": int(d.epoch.max()),
                             "paper_acc_100_epochs": [PAPER_RANDOM_LABELS.get(m, math.nan) for m in last.index],
                             "measured_acc": last.round(3).to_numpy(),
                             "mean_last_5_epochs": last5.reindex(last.index).round(3).to_numpy()})
        out.append(rows if model is None else rows.assign(model=model)[["model", *rows.columns]])
    return pd.concat(out, ignore_index=True)


def plot_random_labels(df: pd.DataFrame, title: str, chance: float | None = None) -> plt.Figure:
    """Training accuracy vs epoch, one line per method (band over seeds when there are several)."""
    import seaborn as sns

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
