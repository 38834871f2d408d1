"""First-layer convolution filters: as one image (the data of the paper's filter-grid figure) and
as a number a reader can compare across methods, the share of each filter's spectral energy at
low spatial frequency (:func:`low_frequency_fraction`), with its value for random filters
(:func:`noise_low_frequency_fraction`) as the reference."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
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


# ------------------------------------------------------------------ filter structure
def frequency_radius(k: int) -> np.ndarray:
    """(k, k) radius, in cycles per pixel, of every bin of a k x k 2-D DFT (``np.fft.fftfreq`` order)."""
    f = np.fft.fftfreq(k)
    return np.sqrt(f[:, None] ** 2 + f[None, :] ** 2)


def low_frequency_fraction(weight: torch.Tensor, cutoff: float = 0.25) -> np.ndarray:
    """Per filter: the share of its spectral energy at spatial frequencies of radius <= ``cutoff``
    cycles per pixel (the constant component included), summed over its input channels.

    ``weight`` is (out, C, k, k). Smooth filters (colour blobs, broad oriented edges) score
    near 1, pixel noise near :func:`noise_low_frequency_fraction` (its expected value for
    filters of independent, equal-variance random weights such as a fresh initialisation),
    checkerboards near 0. The measure does not depend on a filter's scale; a filter that is
    all zeros gives NaN."""
    w = weight.detach().double().cpu()
    if w.ndim != 4 or w.shape[-1] != w.shape[-2]:
        raise ValueError(f"expected square conv weights (out, C, k, k), got shape {tuple(w.shape)}")
    if not 0 < cutoff <= 0.5 * math.sqrt(2):
        raise ValueError(f"cutoff must be in (0, {0.5 * math.sqrt(2):.3f}] cycles per pixel, got {cutoff!r}")
    power = torch.fft.fft2(w).abs().square().sum(1).numpy()            # (out, k, k)
    low = frequency_radius(w.shape[-1]) <= cutoff + 1e-12
    total = power.sum(axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, power[:, low].sum(axis=1) / total, np.nan)


def noise_low_frequency_fraction(k: int, cutoff: float = 0.25) -> float:
    """Expected :func:`low_frequency_fraction` of k x k filters of i.i.d. zero-mean weights:
    their expected power is the same in every DFT bin, so it is the share of bins below ``cutoff``."""
    return float((frequency_radius(k) <= cutoff + 1e-12).mean())


def _nanmean(values: np.ndarray) -> float:
    """Mean of the finite values; NaN when there are none (all filters zero)."""
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if len(finite) else math.nan


def mean_low_frequency_fraction(weight: torch.Tensor, cutoff: float = 0.25) -> float:
    """:func:`low_frequency_fraction` averaged over the filters (all-zero filters left out; NaN if all are)."""
    return _nanmean(low_frequency_fraction(weight, cutoff))


def filter_structure(weights: dict[str, torch.Tensor], init: torch.Tensor | None = None,
                     cutoff: float = 0.25) -> pd.DataFrame:
    """One row per net: mean and sd over filters of :func:`low_frequency_fraction`, and (with
    ``init``, the common initial weights) the same number for the change ``W - W_init``."""
    rows = []
    for name, w in weights.items():
        frac = low_frequency_fraction(w, cutoff)
        row = {"method": name, "low_freq_mean": _nanmean(frac),
               "low_freq_sd": float(np.std(frac[np.isfinite(frac)])) if np.isfinite(frac).any() else math.nan}
        if init is not None:
            row["change_low_freq_mean"] = mean_low_frequency_fraction(w - init.to(w.device), cutoff)
        rows.append(row)
    return pd.DataFrame(rows)
