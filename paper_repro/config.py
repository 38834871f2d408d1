"""The parts every run configuration shares: which model, which data, which optimizer.

:class:`~paper_repro.train.TrainConfig` (one training run) and
:class:`~paper_repro.distributed.config.PipelineConfig` (one multi-process pipeline run)
inherit from these dataclasses, so both take the same flat keyword arguments
(``TrainConfig(model="mlp", lr=0.01, ...)``) and :func:`dataclasses.asdict` gives the same
flat keys, while the fields and their checks are written once: the fields and their defaults
in :mod:`paper_repro.fields` (torch-free, for the parsers), the checks here.
:mod:`paper_repro.build` turns any configuration with these parts into data, a model, a
learner and an optimizer.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

import torch

from . import data as data_mod
from . import models
from .factory import check_factory, is_factory_name
from .fields import DataFields, ModelFields, OptimFields
from .names import OPTIMIZERS



def check_positive_int(key: str, value) -> None:
    """ValueError naming ``key`` unless ``value`` is an int >= 1 (bools refused)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{key} must be a positive integer, got {value!r}")


def check_device(device) -> None:
    """A clear ValueError for a device string torch does not know or this machine lacks."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"unknown device {device!r}; valid: cpu, cuda, cuda:N, mps") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asked for, but CUDA is not available on this machine "
                             "(torch.cuda.is_available() is False); use device 'cpu'")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r} asked for, but this machine has {torch.cuda.device_count()} "
                             f"CUDA device(s): cuda:0..cuda:{torch.cuda.device_count() - 1}")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"device {device!r} asked for, but MPS is not available on this machine; use 'cpu'")
    elif dev.type != "cpu":
        raise ValueError(f"unsupported device {device!r}; valid: cpu, cuda, cuda:N, mps")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class ModelParts(ModelFields):
    """The model: a name from :data:`paper_repro.models.MODELS`, or a user's own model as
``package.module:function`` (:mod:`paper_repro.factory`), and its keyword arguments.

    ``model=None`` means "the model of the learner handed over" (``train(cfg, learner=...)``);
    such a configuration cannot build a model itself."""

    def validate_model(self) -> None:
        if not isinstance(self.model_kwargs, dict):
            raise ValueError(f"model_kwargs must be a dict, got {self.model_kwargs!r}")
        if self.model is None:
            return
        if is_factory_name(self.model):
            check_factory(self.model, self.model_kwargs)
            return
        if self.model not in models.MODELS:
            raise ValueError(f"unknown model {self.model!r}; valid: {', '.join(models.MODELS)}, or your own "
                             "as package.module:function")
        models.check_kwargs(self.model, self.model_kwargs)


@dataclass
class DataParts(DataFields):
    """The data: a name from :data:`paper_repro.data.DATASETS`, where it lives, and the
    keyword arguments of :func:`paper_repro.data.load`."""

    def validate_data(self, extra: tuple[str, ...] = ()) -> None:
        """Check the data set name (``extra``: names a caller handles itself) and kwargs."""
        valid = data_mod.DATASETS + tuple(extra)
        if self.dataset not in valid:
            raise ValueError(f"unknown dataset {self.dataset!r}; valid: {', '.join(valid)}")
        if not isinstance(self.data_kwargs, dict):
            raise ValueError(f"data_kwargs must be a dict, got {self.data_kwargs!r}")
        load_args = [p for p in inspect.signature(data_mod.load).parameters if p not in ("name", "data_dir")]
        unknown = sorted(set(self.data_kwargs) - set(load_args))
        if unknown:
            raise ValueError(f"unknown data_kwargs {', '.join(map(repr, unknown))}; valid: {', '.join(load_args)}")

    def validate_model_fits_data(self, model: str | None) -> None:
        """A Transformer needs a text data set, every other model an image data set."""
        if model not in models.MODELS or self.dataset not in data_mod.DATASETS:
            return
        needs = data_mod.TEXT_DATASETS if model == "transformer" else data_mod.IMAGE_DATASETS
        if self.dataset not in needs:
            raise ValueError(f"model {model!r} needs {'a text' if model == 'transformer' else 'an image'} "
                             f"dataset ({', '.join(needs)}), got {self.dataset!r}")


@dataclass
class OptimParts(OptimFields):
    """The optimizer: Adam, or SGD with ``momentum``; ``weight_decay`` for both."""

    def validate_optim(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
        if not _is_number(self.lr) or not self.lr > 0:
            raise ValueError(f"lr must be a positive number, got {self.lr!r}")
        if not _is_number(self.momentum) or not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be a number in [0, 1), got {self.momentum!r}")
        if not _is_number(self.weight_decay) or self.weight_decay < 0:
            raise ValueError(f"weight_decay must be a non-negative number, got {self.weight_decay!r}")
