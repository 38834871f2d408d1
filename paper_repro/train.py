"""The single-process training loop: any model x method x data set -> per-step records.

``train(TrainConfig(...))`` returns a :class:`TrainResult` whose ``records`` is a tidy
pandas DataFrame with one row per step: ``step``, ``examples`` (seen so far),
``loss_0..loss_{M-1}`` (each local module's loss), ``final_loss`` (the net's own head,
i.e. the last module's loss), ``eval_loss`` / ``eval_acc`` (every ``eval_every`` steps
and at the end, NaN elsewhere), ``train_eval_loss`` (see below) and ``wall_time``
(seconds since the start). A NaN or inf loss ends the run with ``status == "diverged"``
instead of raising.

Options for compute-efficiency studies, which compare runs of different batch sizes at
equal numbers of examples:

* ``eval_every_examples`` (default 0: off). Whenever the examples seen cross a multiple
  of it (so at the same points in examples for every batch size; at every step when the
  batch is larger), and at the last step, the net's own head is evaluated on a fixed
  subset of the *training* set and its mean loss recorded as ``train_eval_loss`` (NaN on
  the other rows). The subset is :func:`train_eval_indices`: ``train_eval_examples``
  examples (text: non-overlapping windows) drawn with a fixed seed that does not depend
  on ``seed``, so every run on the same data set sees the same subset; ``None`` takes
  the whole training split.
* ``stop_loss`` (default None: off; needs ``eval_every_examples``). The run stops, with
  ``status == "finished"`` and the records so far, at the first training-subset
  evaluation whose ``train_eval_loss <= stop_loss``.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Callable

import pandas as pd
import torch
from tqdm.auto import tqdm

from . import data as data_mod
from . import build, methods, models
from .build import build_model, load_data, make_optimizer, optimizer_impl  # noqa: F401  (re-exported)
from .config import (OPTIMIZERS, DataParts, ModelParts, OptimParts, check_device,  # noqa: F401  (re-exported)
                     check_positive_int)


@dataclass
class TrainConfig(ModelParts, DataParts, OptimParts):
    """One training run. Model, data and optimizer fields come from :mod:`paper_repro.config`
    (``model``, ``model_kwargs``; ``dataset``, ``data_dir``, ``data_kwargs``; ``optimizer``,
    ``lr``, ``momentum``, ``weight_decay``), all passed as flat keyword arguments.

    ``model`` and ``method`` may be None when a learner is handed to :func:`train`: they
    are then taken from it. A named ``model`` / ``method`` must match the learner's."""
    method: str | None = "backprop"  # backprop | greedy | overlapping | chunked-K
    steps: int = 500
    batch_size: int = 64
    seed: int = 0
    eval_every: int = 100           # 0: evaluate only at the end
    eval_examples: int | None = 2000
    eval_every_examples: int = 0    # 0: no training-subset evaluation
    train_eval_examples: int | None = None  # None: the whole training split
    stop_loss: float | None = None  # stop at the first train_eval_loss <= stop_loss
    device: str = "cpu"
    progress: bool = True

    def validate(self) -> None:
        for key in ("steps", "batch_size"):
            check_positive_int(key, getattr(self, key))
        self.validate_optim()
        self.validate_data()
        self.validate_model_fits_data(self.model)
        self.validate_model()
        if not isinstance(self.eval_every, int) or self.eval_every < 0:
            raise ValueError(f"eval_every must be a non-negative integer, got {self.eval_every!r}")
        if (not isinstance(self.eval_every_examples, int) or isinstance(self.eval_every_examples, bool)
                or self.eval_every_examples < 0):
            raise ValueError(f"eval_every_examples must be a non-negative integer, got {self.eval_every_examples!r}")
        if self.train_eval_examples is not None and (
                not isinstance(self.train_eval_examples, int) or isinstance(self.train_eval_examples, bool)
                or self.train_eval_examples < 1):
            raise ValueError(f"train_eval_examples must be a positive integer or None, "
                             f"got {self.train_eval_examples!r}")
        if self.stop_loss is not None:
            if (not isinstance(self.stop_loss, (int, float)) or isinstance(self.stop_loss, bool)
                    or math.isnan(self.stop_loss)):
                raise ValueError(f"stop_loss must be a number or None, got {self.stop_loss!r}")
            if self.eval_every_examples == 0:
                raise ValueError(f"stop_loss={self.stop_loss!r} needs eval_every_examples > 0 "
                                 "(the loss it is compared with is the training-subset evaluation)")
        if self.method is not None:
            methods.parse_spec(self.method)  # syntax only: the K bound is checked on the net
        check_device(self.device)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class TrainResult:
    config: TrainConfig
    records: pd.DataFrame
    status: str                     # "finished" | "diverged"
    learner: methods.Learner
    data: data_mod.DataSet
    optimizer_impl: str = "default"  # fused | foreach | default (see build.make_optimizer)

    def summary(self) -> dict:
        last = self.records.iloc[-1]
        evals = self.records.dropna(subset=["eval_loss"])
        train_evals = self.records["train_eval_loss"].dropna()
        return {"model": self.config.model, "method": self.config.method, "dataset": self.config.dataset,
                "status": self.status, "steps": int(last["step"]), "final_loss": float(last["final_loss"]),
                "eval_loss": float(evals["eval_loss"].iloc[-1]) if len(evals) else float("nan"),
                "eval_acc": float(evals["eval_acc"].iloc[-1]) if len(evals) else float("nan"),
                "train_eval_loss": float(train_evals.iloc[-1]) if len(train_evals) else float("nan"),
                "optimizer_impl": self.optimizer_impl, "wall_time_s": float(last["wall_time"])}


def check_fits(learner: methods.Learner, data: data_mod.DataSet, cfg: TrainConfig) -> None:
    """Run two training examples through every local module (eval mode, no gradients, no
    state change): a model that does not fit the data fails here, before any training, with
    a ValueError naming the shape the model expects and the shape the data set gives."""
    x, y = data.batch("train", torch.arange(min(2, data.num_examples("train"))))
    was_training = learner.training
    learner.eval()
    try:
        with torch.no_grad():
            learner.losses(x.to(cfg.device), y.to(cfg.device))
    except torch.OutOfMemoryError:
        raise
    except (RuntimeError, IndexError) as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ValueError(f"model {learner.net.name} expects "
                         f"{learner.net.expects or 'other input'}, but data set {cfg.dataset!r} gives "
                         f"examples of shape {tuple(data.input_shape)} (a batch: {tuple(x.shape)}, "
                         f"{str(x.dtype).replace('torch.', '')}): {reason}") from err
    finally:
        learner.train(was_training)


def build_learner(cfg: TrainConfig, data: data_mod.DataSet) -> methods.Learner:
    """The learner of ``cfg`` for ``data``, seeded with ``cfg.seed``; checked to fit the data."""
    cfg.validate()
    if cfg.method is None:
        raise ValueError("method is None (meaning: the method of a learner handed over), so there is no "
                         f"learner to build; name one of {', '.join(methods.METHODS)}")
    learner = build.build_learner(cfg, data, cfg.method, cfg.seed).to(cfg.device)
    check_fits(learner, data, cfg)
    return learner


def model_name(net: models.BlockNet) -> str:
    """The registry name a net was built under (``"resnet18"``), else its own ``name``."""
    return getattr(net, "model", None) or net.name


def resolve_names(cfg: TrainConfig, learner: methods.Learner) -> TrainConfig:
    """``cfg`` with ``model`` and ``method`` taken from ``learner``; a ValueError naming both
    when ``cfg`` names a different model or method than the learner runs."""
    net_model = model_name(learner.net)
    for key, mine, theirs in (("model", cfg.model, net_model), ("method", cfg.method, learner.spec)):
        if mine is not None and mine != theirs:
            raise ValueError(f"config {key}={mine!r} contradicts the learner given, whose {key} is {theirs!r}; "
                             f"set {key}={theirs!r} or {key}=None (take it from the learner)")
    return dataclasses.replace(cfg, model=net_model, method=learner.spec)


@torch.no_grad()
def evaluate(net: models.BlockNet, data: data_mod.DataSet, split: str = "test",
             max_examples: int | None = 2000, device: str = "cpu") -> tuple[float, float]:
    """(mean loss, accuracy) of the net's own head on ``split`` (token accuracy for LMs)."""
    was_training = net.training
    net.eval()
    total_loss, correct, count = 0.0, 0, 0
    for x, y in data.eval_batches(split, max_examples=max_examples):
        x, y = x.to(device), y.to(device)
        logits = net(x)
        n = y.numel()
        total_loss += float(net.loss(logits, y)) * n
        correct += int((logits.argmax(-1) == y).sum())
        count += n
    net.train(was_training)
    return total_loss / max(count, 1), correct / max(count, 1)


def train_eval_indices(data: data_mod.DataSet, max_examples: int | None) -> torch.Tensor:
    """The fixed training subset that ``train_eval_loss`` is measured on: ``max_examples``
    images (text: starts of non-overlapping windows) drawn without replacement with a fixed
    seed, in increasing order; all of them if ``max_examples`` is None or larger."""
    n = data.num_examples("train")
    starts = torch.arange(0, n, data.seq_len) if data.kind == "text" else torch.arange(n)
    if max_examples is None or max_examples >= len(starts):
        return starts
    pick = torch.randperm(len(starts), generator=torch.Generator().manual_seed(0))[:max_examples]
    return starts[pick.sort().values]


@torch.no_grad()
def evaluate_indices(net: models.BlockNet, data: data_mod.DataSet, split: str, idx: torch.Tensor,
                     device: str = "cpu", batch_size: int = 512) -> float:
    """Mean loss (per example, or per token for LMs) of the net's own head on examples ``idx``."""
    was_training = net.training
    net.eval()
    total, count = 0.0, 0
    for i in range(0, len(idx), batch_size):
        x, y = data.batch(split, idx[i:i + batch_size])
        x, y = x.to(device), y.to(device)
        total += float(net.loss(net(x), y)) * y.numel()
        count += y.numel()
    net.train(was_training)
    return total / max(count, 1)


def crosses(step: int, batch_size: int, every: int) -> bool:
    """True when the examples seen pass a multiple of ``every`` during step ``step``."""
    return every > 0 and (step * batch_size) // every > ((step - 1) * batch_size) // every


def train(cfg: TrainConfig, data: data_mod.DataSet | None = None,
          callback: Callable[[int, methods.Learner, torch.Tensor, torch.Tensor], None] | None = None,
          learner: methods.Learner | None = None) -> TrainResult:
    """Train ``cfg`` for ``cfg.steps`` steps; ``callback(step, learner, x, y)`` runs before each update.

    With ``learner`` given, that learner is trained (and checked to fit ``data`` first); the
    records then name its model and method, and ``cfg.model`` / ``cfg.method`` must be
    None or agree with it (ValueError naming both otherwise). ``result.config`` is ``cfg``
    with those two names filled in."""
    cfg.validate()
    data = data if data is not None else load_data(cfg)
    if learner is None:
        learner = build_learner(cfg, data)
    else:
        check_fits(learner, data, cfg)
    cfg = resolve_names(cfg, learner)
    learner.train()
    opt = make_optimizer(cfg, learner.parameters())
    gen = torch.Generator().manual_seed(cfg.seed)
    batches = data.sampler("train", cfg.batch_size, gen)
    train_idx = train_eval_indices(data, cfg.train_eval_examples) if cfg.eval_every_examples else None
    rows, status, start = [], "finished", time.perf_counter()
    bar = tqdm(range(1, cfg.steps + 1), desc=f"{cfg.model}/{cfg.method}", disable=not cfg.progress,
               leave=False, mininterval=1.0)
    for step in bar:
        x, y = next(batches)
        x, y = x.to(cfg.device), y.to(cfg.device)
        if callback is not None:
            callback(step, learner, x, y)
        opt.zero_grad(set_to_none=True)
        losses = learner.losses(x, y)
        values = [float(v.detach()) for v in losses]
        row = {"step": step, "examples": step * cfg.batch_size,
               **{f"loss_{m}": v for m, v in enumerate(values)}, "final_loss": values[-1],
               "eval_loss": math.nan, "eval_acc": math.nan, "train_eval_loss": math.nan}
        if not all(math.isfinite(v) for v in values):
            status = "diverged"
        else:
            sum(losses).backward()
            opt.step()
            if step == cfg.steps or (cfg.eval_every and step % cfg.eval_every == 0):
                row["eval_loss"], row["eval_acc"] = evaluate(learner.net, data, "test", cfg.eval_examples,
                                                             cfg.device)
            if train_idx is not None and (step == cfg.steps or crosses(step, cfg.batch_size,
                                                                         cfg.eval_every_examples)):
                row["train_eval_loss"] = evaluate_indices(learner.net, data, "train", train_idx, cfg.device)
        row["wall_time"] = time.perf_counter() - start
        rows.append(row)
        if status == "diverged":
            break
        if cfg.stop_loss is not None and row["train_eval_loss"] <= cfg.stop_loss:
            break
        if step % 10 == 0:
            bar.set_postfix(loss=f"{values[-1]:.3f}")
    bar.close()
    return TrainResult(cfg, pd.DataFrame(rows), status, learner, data, optimizer_impl(opt))


def compare_methods(cfg: TrainConfig, method_specs: list[str], data: data_mod.DataSet | None = None
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train ``cfg`` once per method (same seed, same data order): (records with a
    ``method`` column, one summary row per method)."""
    data = data if data is not None else load_data(cfg)
    records, summaries = [], []
    for spec in tqdm(method_specs, desc="methods", disable=not cfg.progress):
        result = train(dataclasses.replace(cfg, method=spec), data=data)
        records.append(result.records.assign(method=spec))
        summaries.append(result.summary())
    return pd.concat(records, ignore_index=True), pd.DataFrame(summaries)
