"""First-layer convolution filters as one image: the data of the paper's filter-grid figure."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn

from ..models import BlockNet


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
