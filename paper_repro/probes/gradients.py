"""Gradient cosine: how close a block's local update is to its true backprop gradient.

:func:`gradient_cosine` gives, per block, the cosine between the block's *local* update
(the gradient of ``sum(learner.losses(x, y))``) and its *true* backprop gradient (the
gradient of the net's own final loss ``net.loss(net(x), y)``), at the same parameters on
the same batch. :class:`GradientCosineRecorder` is a ``train.train`` callback that records
it every few steps. A "layer" of the paper is a block of
:class:`~paper_repro.models.BlockNet`; tables number them from 1, as the paper does.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

import pandas as pd
import torch
import torch.nn as nn

from ..methods import Learner


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
