"""From a configuration to data, a model, a learner and an optimizer.

Every function takes any configuration object with the parts it needs
(:mod:`paper_repro.config`): the single-process trainer and the multi-process pipeline
build their runs through the same calls. ``data`` below is a
:class:`~paper_repro.data.DataSet`, or any object with the same ``kind``,
``num_classes``, ``input_shape`` and ``seq_len`` (the pipeline's synthetic inputs).
"""
from __future__ import annotations

import math

import torch

from . import data as data_mod
from . import methods, models
from .config import DataParts, ModelParts, OptimParts
from .factory import build_from_factory, is_factory_name

OPTIMIZER_IMPLS = ("fused", "foreach", "default")


def load_data(cfg: DataParts) -> data_mod.DataSet:
    """The data set of ``cfg`` (``dataset``, ``data_dir``, ``data_kwargs``)."""
    return data_mod.load(cfg.dataset, cfg.data_dir, **cfg.data_kwargs)


def build_model(cfg: ModelParts, data) -> models.BlockNet:
    """The model named in ``cfg``, with input and output sizes taken from ``data``.

    ``model_kwargs`` may repeat a size the data set fixes (``in_dim``, ``in_channels``,
    ``num_classes``, ``vocab_size``, ``seq_len``) only with the data set's value. A model named
    ``package.module:function`` is built by calling that function with ``model_kwargs``, its
    default heads sized for ``data`` on two of its training examples."""
    if cfg.model is None:
        raise ValueError("model is None (meaning: the model of a learner handed over), so there is no "
                         f"model to build; name one of {', '.join(models.MODELS)}")
    if is_factory_name(cfg.model):
        if hasattr(data, "batch"):
            example = data.batch("train", torch.arange(min(2, data.num_examples("train"))))[0]
        else:  # a shape description (the pipeline's synthetic inputs)
            example = (torch.zeros(2, data.seq_len, dtype=torch.long) if data.kind == "text"
                       else torch.zeros(2, *data.input_shape))
        return build_from_factory(cfg.model, cfg.model_kwargs, data.num_classes, example)
    kw = dict(cfg.model_kwargs)
    models.check_kwargs(cfg.model, kw)
    dataset = getattr(cfg, "dataset", getattr(data, "name", "?"))
    shape = tuple(data.input_shape)
    if cfg.model == "transformer":
        if data.kind != "text":
            raise ValueError(f"model 'transformer' needs a text dataset, got {dataset!r}")
        fixed = {"vocab_size": (data.num_classes, "its vocabulary size"),
                 "seq_len": (data.seq_len, "its window length; set that with data_kwargs {'seq_len': N}")}
    else:
        if data.kind != "image":
            raise ValueError(f"model {cfg.model!r} needs an image dataset, got {dataset!r}")
        fixed = {"num_classes": (data.num_classes, "its number of classes")}
        if cfg.model == "mlp":
            fixed["in_dim"] = (math.prod(shape), f"the values per image (shape {shape})")
        else:
            fixed["in_channels"] = (shape[0], f"the channels of its images (shape {shape})")
            kw.setdefault("small_input", shape[-1] <= 64)
    for key, (value, what) in fixed.items():
        if key in kw and kw[key] != value:
            raise ValueError(f"{cfg.model} {key}={kw[key]!r} does not match data set {dataset!r}: "
                             f"{key} must be {value}, {what}")
        kw[key] = value
    return models.build(cfg.model, **kw)


def build_learner(cfg: ModelParts, data, method: str, seed: int) -> methods.Learner:
    """The model of ``cfg`` for ``data`` under ``method``, its weights drawn after
    ``torch.manual_seed(seed)`` (so every process that calls this builds the same one)."""
    torch.manual_seed(seed)
    return methods.build(build_model(cfg, data), method)


def make_optimizer(cfg: OptimParts, params) -> torch.optim.Optimizer:
    """Adam or SGD (with ``momentum``) over ``params``, ``lr`` and ``weight_decay`` from ``cfg``.

    Uses the cheapest implementation the installed torch accepts for these parameters'
    device and dtype: ``fused=True`` (one kernel for all parameters), else ``foreach=True``
    (batched per-op kernels), else the default per-parameter loop. The three compute the
    same update up to float rounding; :func:`optimizer_impl` says which one was taken."""
    cfg.validate_optim()
    params = list(params)
    if cfg.optimizer == "adam":
        cls, kw = torch.optim.Adam, dict(lr=cfg.lr, weight_decay=cfg.weight_decay)
    else:
        cls, kw = torch.optim.SGD, dict(lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    for impl in ("fused", "foreach"):
        try:
            return cls(params, **kw, **{impl: True})
        except (RuntimeError, ValueError, TypeError):  # not supported for this device / dtype / torch
            continue
    return cls(params, **kw)


def optimizer_impl(opt: torch.optim.Optimizer) -> str:
    """``"fused"``, ``"foreach"`` or ``"default"``: which implementation ``opt`` runs."""
    if opt.defaults.get("fused"):
        return "fused"
    return "foreach" if opt.defaults.get("foreach") else "default"
