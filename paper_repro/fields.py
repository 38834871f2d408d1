"""The fields every run configuration shares, with their defaults and without their checks:
which model, which data, which optimizer.

Nothing here imports torch, so a parser can take its defaults from these classes and answer
``--help`` at once. :mod:`paper_repro.config` adds the checks (they need the models and the
data sets, hence torch); the run configurations inherit from both.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ModelFields:
    """The model: a built-in name (:data:`paper_repro.names.MODELS`) or a user's own model as
    ``package.module:function`` (:mod:`paper_repro.factory`), and its keyword arguments.
    ``model=None`` means "the model of the learner handed over"."""
    model: str | None = "mlp"
    model_kwargs: dict = field(default_factory=dict)


@dataclass
class DataFields:
    """The data: a name from :data:`paper_repro.names.DATASETS`, where it lives, and the
    keyword arguments of :func:`paper_repro.data.load`."""
    dataset: str = "digits"
    data_dir: str | None = None
    data_kwargs: dict = field(default_factory=dict)


@dataclass
class OptimFields:
    """The optimizer: Adam, or SGD with ``momentum``; ``weight_decay`` for both."""
    optimizer: str = "adam"
    lr: float = 1e-3
    momentum: float = 0.9           # sgd only
    weight_decay: float = 0.0


@dataclass
class TrainFields(ModelFields, DataFields, OptimFields):
    """One single-process training run (:class:`paper_repro.train.TrainConfig` adds the checks):
    ``method`` (backprop | greedy | overlapping | chunked-K; None: the learner handed over's),
    ``steps`` optimizer steps of ``batch_size`` examples (in ``micro_batches`` parts: gradient
    accumulation), ``seed`` (weights and batch order), the test evaluation every ``eval_every``
    steps on ``eval_examples`` examples (0: only at the end), the training-subset evaluation every
    ``eval_every_examples`` examples on ``train_eval_examples`` (None: all), the stop rule
    (``stop_loss``, ``stop_overshoot``), torch ``threads`` (None: leave torch's setting), ``device``
    and the progress bar."""
    method: str | None = "backprop"
    steps: int = 500
    batch_size: int = 64
    seed: int = 0
    eval_every: int = 100
    eval_examples: int | None = 2000
    eval_every_examples: int = 0
    train_eval_examples: int | None = None
    stop_loss: float | None = None
    stop_overshoot: float = 0.0
    micro_batches: int = 1
    threads: int | None = None
    device: str = "cpu"
    progress: bool = True

