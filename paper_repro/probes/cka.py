"""Linear Centered Kernel Alignment (Kornblith et al., 2019) between block representations.

:func:`linear_cka` uses the biased (default) or the unbiased HSIC estimator (Song et al.,
2012); :func:`cka_table` compares every block of several nets with a reference net.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..models import BlockNet


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
