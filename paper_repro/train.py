"""The single-process training loop: any model x method x data set -> per-step records.

``train(TrainConfig(...))`` returns a :class:`TrainResult` whose ``records`` is a tidy
pandas DataFrame with one row per step: ``step``, ``examples`` (seen so far),
``loss_0..loss_{M-1}`` (each local module's loss), ``final_loss`` (the net's own head,
i.e. the last module's loss), ``eval_loss`` / ``eval_acc`` (every ``eval_every`` steps
and at the end, NaN elsewhere), ``train_eval_loss`` (see below) and ``wall_time``
(seconds since the start). A NaN or inf loss ends the run with ``status == "diverged"``
instead of raising. Ctrl-C raises :class:`TrainInterrupted` carrying the records of the
finished steps.

On the CPU the losses are read every step. On an accelerator they stay on the device and are
read every ``LOSS_READ_EVERY`` steps, before every evaluation and at the end, so that the
device never waits for the host: the records are the same (a run that diverges keeps the
rows up to its first non-finite loss; the steps it ran past it until the next read are
dropped), except that ``wall_time`` between two reads is when a step was queued, not done.

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
* ``stop_overshoot`` (default 0; needs ``stop_loss``). Go on past that evaluation until the
  examples seen are ``1 + stop_overshoot`` times those seen when it happened, so that rules
  which smooth the training loss over a window of examples can also be read at ``stop_loss``.

Besides :func:`train` and :class:`TrainConfig`, a training script needs the data, the optimizer
and the device check of a configuration: ``train.load_data(cfg)``, ``train.make_optimizer(cfg,
params)`` and ``train.check_device(device)`` are part of this module's API (defined in
:mod:`paper_repro.build` and :mod:`paper_repro.config`).
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass
from typing import Callable

import pandas as pd
import torch
from tqdm.auto import tqdm

from . import checkpoint as checkpoint_mod
from . import data as data_mod
from . import build, methods, models
# load_data, make_optimizer and check_device are part of this module's API (see its docstring)
from .build import load_data, make_optimizer, optimizer_impl
from .config import DataParts, ModelParts, OptimParts, check_device, check_positive_int
from .fields import TrainFields
from .names import METHODS


@dataclass
class TrainConfig(TrainFields, ModelParts, DataParts, OptimParts):
    """One training run: the fields of :class:`paper_repro.fields.TrainFields` (their defaults are
    what ``paper-repro train`` shows), with :meth:`validate`. Model, data and optimizer fields come
    from :mod:`paper_repro.config` (``model``, ``model_kwargs``; ``dataset``, ``data_dir``,
    ``data_kwargs``; ``optimizer``, ``lr``, ``momentum``, ``weight_decay``), all passed as flat
    keyword arguments.

    ``model`` and ``method`` may be None when a learner is handed to :func:`train`: they
    are then taken from it. A named ``model`` / ``method`` must match the learner's."""

    def validate(self) -> None:
        for key in ("steps", "batch_size", "micro_batches"):
            check_positive_int(key, getattr(self, key))
        if self.batch_size % self.micro_batches:
            raise ValueError(f"micro_batches={self.micro_batches} must divide batch_size={self.batch_size}")
        if self.threads is not None:
            check_positive_int("threads", self.threads)
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
        if (not isinstance(self.stop_overshoot, (int, float)) or isinstance(self.stop_overshoot, bool)
                or not self.stop_overshoot >= 0 or math.isinf(self.stop_overshoot)):
            raise ValueError(f"stop_overshoot must be a finite number >= 0, got {self.stop_overshoot!r}")
        if self.stop_overshoot and self.stop_loss is None:
            raise ValueError(f"stop_overshoot={self.stop_overshoot!r} needs stop_loss (it counts examples past it)")
        if self.method is not None:
            methods.parse_spec(self.method)  # syntax only: the K bound is checked on the net
        check_device(self.device)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class TrainResult:
    config: TrainConfig
    records: pd.DataFrame
    status: str                     # "finished" | "diverged" | "interrupted" (TrainInterrupted.result)
    learner: methods.Learner
    data: data_mod.DataSet
    optimizer_impl: str = "default"  # fused | foreach | default (see build.make_optimizer)
    eval_time: float = 0.0          # seconds spent in evaluations (included in wall_time)

    def summary(self) -> dict:
        return {"model": self.config.model, "method": self.config.method, "dataset": self.config.dataset,
                "status": self.status, **records_summary(self.records, self.optimizer_impl)}


def records_summary(records: pd.DataFrame, optimizer_impl: str) -> dict:
    """What a run's records end with: ``steps``, ``final_loss``, the last ``eval_loss`` /
    ``eval_acc`` / ``train_eval_loss`` (NaN if none), ``optimizer_impl``, then ``wall_time_s``
    (zeros and NaN for no records)."""
    def latest(column):
        values = records[column].dropna() if len(records) else []
        return float(values.iloc[-1]) if len(values) else math.nan
    last = records.iloc[-1] if len(records) else {"step": 0, "final_loss": math.nan, "wall_time": 0.0}
    return {"steps": int(last["step"]), "final_loss": float(last["final_loss"]), "eval_loss": latest("eval_loss"),
            "eval_acc": latest("eval_acc"), "train_eval_loss": latest("train_eval_loss"),
            "optimizer_impl": optimizer_impl, "wall_time_s": float(last["wall_time"])}


class TrainInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, see :mod:`paper_repro.signals`) during :func:`train`. ``result``
    holds the records of the steps that finished (status ``"interrupted"``); the step that
    was running is not among them. Raised from the original interrupt."""

    def __init__(self, result: "TrainResult"):
        super().__init__(f"interrupted after {len(result.records)} finished steps")
        self.result = result


def check_batch_fits(batch_size: int, data: data_mod.DataSet, option: str = "batch_size") -> None:
    """A batch larger than the training split would repeat examples within a step: a ValueError
    naming ``option`` (the CLI says ``--batch-size``), both numbers and the data set."""
    n = data.num_examples("train")
    if batch_size > n:
        unit = "window start positions" if data.kind == "text" else "examples"
        raise ValueError(f"{option} {batch_size} is larger than the training split of {data.name!r} "
                         f"({n:,} {unit}); use at most {n}")


def check_fits(learner: methods.Learner, data: data_mod.DataSet, cfg: TrainConfig) -> None:
    """Run two training examples through every local module (eval mode, no gradients, no
    state change): a model that does not fit the data fails here, before any training, with
    a ValueError naming the shape the model expects and the shape the data set gives, or, when
    its head predicts fewer classes than the data set has, both numbers of classes."""
    x, y = data.batch("train", torch.arange(min(2, data.num_examples("train"))))
    was_training = learner.training
    learner.eval()
    try:
        with torch.no_grad():
            x, y = x.to(cfg.device), y.to(cfg.device)
            _check_classes(learner, data, x)
            learner.losses(x, y)
    except torch.OutOfMemoryError:
        raise
    except (RuntimeError, IndexError) as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ValueError(f"model {learner.net.name} expects "
                         f"{learner.net.expects or 'other input'}, but data set {data.name!r} gives "
                         f"examples of shape {tuple(data.input_shape)} (a batch: {tuple(x.shape)}, "
                         f"{str(x.dtype).replace('torch.', '')}): {reason}") from err
    finally:
        learner.train(was_training)


def _check_classes(learner: methods.Learner, data: data_mod.DataSet, x: torch.Tensor) -> None:
    """ValueError when the net's head gives fewer logits than ``data`` has classes (tokens).
    A forward that fails is left to the caller, which reports the shapes."""
    try:
        logits = learner.net(x)
    except (RuntimeError, IndexError):
        return
    if logits.dim() >= 2 and logits.shape[-1] < data.num_classes:
        what = "tokens (its vocabulary size)" if data.kind == "text" else "classes: labels 0.." + str(data.num_classes - 1)
        raise ValueError(f"the labels of data set {data.name!r} exceed num_classes: model {learner.net.name} "
                         f"predicts {logits.shape[-1]} classes, but the data set has {data.num_classes} {what}; "
                         f"build the model with num_classes={data.num_classes}")


def build_learner(cfg: TrainConfig, data: data_mod.DataSet) -> methods.Learner:
    """The learner of ``cfg`` for ``data``, seeded with ``cfg.seed``; checked to fit the data."""
    cfg.validate()
    if cfg.method is None:
        raise ValueError("method is None (meaning: the method of a learner handed over), so there is no "
                         f"learner to build; name one of {', '.join(METHODS)}")
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


LOSS_READ_EVERY = 50  # off the CPU: steps between reads of the losses to the host


def _loss_read_every(device) -> int:
    """Steps between reads of the training losses to the host. On the CPU every step (a read
    costs nothing there); on an accelerator every ``LOSS_READ_EVERY`` steps, since each read
    waits for all the queued work and would otherwise stall the device once per step."""
    return 1 if torch.device(device).type == "cpu" else LOSS_READ_EVERY


def _read_losses(pending: list, rows: list) -> dict | None:
    """Write the losses of ``pending`` (row, its losses still on the device) into their rows,
    with one read from the device for all of them, and empty ``pending``. Returns the first
    row with a NaN or inf loss, after dropping the ``rows`` that follow it, or None."""
    values = torch.stack([losses for _, losses in pending]).tolist()
    bad = None
    for (row, _), losses in zip(pending, values):
        row.update({f"loss_{m}": v for m, v in enumerate(losses)}, final_loss=losses[-1])
        if bad is None and not all(math.isfinite(v) for v in losses):
            bad = row
    pending.clear()
    for j, row in enumerate(rows):
        if row is bad:
            del rows[j + 1:]
            break
    return bad


def _losses(learner: methods.Learner, x: torch.Tensor, y: torch.Tensor, parts: int):
    """(each local module's loss on the batch, detached; the backward that leaves the update in
    the ``.grad``). With ``parts > 1`` the batch is taken in ``parts`` equal micro-batches, each
    loss scaled by 1/parts and its backward run at once (gradient accumulation: the update of the
    local pipeline's ``local/M``); the losses are then their means over the micro-batches."""
    if parts == 1:
        losses = learner.losses(x, y)
        return torch.stack([v.detach() for v in losses]), lambda: sum(losses).backward()
    each = []
    for xc, yc in zip(x.chunk(parts), y.chunk(parts)):
        losses = learner.losses(xc, yc)
        (sum(losses) * (1.0 / parts)).backward()
        each.append(torch.stack([v.detach() for v in losses]))
    return torch.stack(each).mean(0), lambda: None


def crosses(step: int, batch_size: int, every: int) -> bool:
    """True when the examples seen pass a multiple of ``every`` during step ``step``."""
    return every > 0 and (step * batch_size) // every > ((step - 1) * batch_size) // every


def _prepare(cfg: TrainConfig, data: data_mod.DataSet | None, learner: methods.Learner | None
             ) -> tuple[TrainConfig, data_mod.DataSet, methods.Learner]:
    """A run's configuration (checked, its names resolved), data and learner (:func:`train`)."""
    if data is not None:  # the records name the data trained on, whatever cfg.dataset says
        named = dataclasses.replace(cfg, dataset=data.name)
        (named if data.name in data_mod.DATASETS else cfg).validate()  # a name of the user's own passes
        cfg = named
    else:
        cfg.validate()
        data = load_data(cfg)
    check_batch_fits(cfg.batch_size, data)
    if learner is None:
        learner = build_learner(cfg, data)
    else:
        check_fits(learner, data, cfg)
    return resolve_names(cfg, learner), data, learner


def _resume(state: dict, learner: methods.Learner, opt: torch.optim.Optimizer, batches) -> tuple[list, float, int, float]:
    """Load a checkpoint's ``state`` into ``learner`` and ``opt`` and move ``batches`` to where
    it stopped: (its rows, its stop_at, the next step, its elapsed seconds)."""
    learner.load_state_dict(state["learner"])
    opt.load_state_dict(state["optimizer"])
    for _ in range(state["step"]):  # the sampler's position: replayed from the seed
        next(batches)
    torch.set_rng_state(state["rng"])
    return state["rows"], state["stop_at"], state["step"] + 1, state["elapsed"]


def _empty_row(step: int, examples: int, n_losses: int) -> dict:
    """A step's record before its losses are read and its evaluations made (NaN: not yet, or none)."""
    return {"step": step, "examples": examples, **{f"loss_{m}": math.nan for m in range(n_losses)},
            "final_loss": math.nan, "eval_loss": math.nan, "eval_acc": math.nan, "train_eval_loss": math.nan}


def _evaluate(row: dict, net: torch.nn.Module, data: data_mod.DataSet, cfg: TrainConfig, test: bool,
              train_idx: torch.Tensor | None) -> float:
    """Fill ``row``'s test evaluation (if ``test``) and training-subset one (on ``train_idx``, if
    given); returns the seconds they took."""
    t0 = time.perf_counter()
    if test:
        row["eval_loss"], row["eval_acc"] = evaluate(net, data, "test", cfg.eval_examples, cfg.device)
    if train_idx is not None:
        row["train_eval_loss"] = evaluate_indices(net, data, "train", train_idx, cfg.device)
    return time.perf_counter() - t0


def train(cfg: TrainConfig, data: data_mod.DataSet | None = None,
          callback: Callable[[int, methods.Learner, torch.Tensor, torch.Tensor], None] | None = None,
          learner: methods.Learner | None = None, checkpoint: str | os.PathLike | None = None,
          checkpoint_every_s: float = 60.0) -> TrainResult:
    """Train ``cfg`` for ``cfg.steps`` steps; ``callback(step, learner, x, y)`` runs before each update.

    With ``checkpoint`` (a file path) the run saves its state there every ``checkpoint_every_s``
    seconds, and a run started with a checkpoint of the same configuration there resumes from
    it, with the records of an uninterrupted run (:mod:`paper_repro.checkpoint`). The caller
    deletes the file once it has kept the result.

    With ``data`` given, the records name its data set (``data.name``), whatever ``cfg.dataset``
    says. A ``cfg.batch_size`` larger than the training split is a ValueError naming both.
    With ``learner`` given, that learner is trained (and checked to fit ``data`` first); the
    records then name its model and method, and ``cfg.model`` / ``cfg.method`` must be
    None or agree with it (ValueError naming both otherwise). ``result.config`` is ``cfg``
    with those two names filled in."""
    # One function for the loop: the order of its reads, evaluations, stops and checkpoints
    # within a step is what makes a resumed run equal an uninterrupted one, so it stays in view.
    cfg, data, learner = _prepare(cfg, data, learner)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    learner.train()
    opt = make_optimizer(cfg, learner.parameters())
    gen = torch.Generator().manual_seed(cfg.seed)
    batches = data.sampler("train", cfg.batch_size, gen)
    train_idx = train_eval_indices(data, cfg.train_eval_examples) if cfg.eval_every_examples else None
    rows, status, start, first = [], "finished", time.perf_counter(), 1
    pending, read_every = [], _loss_read_every(cfg.device)  # losses not yet read to the host
    stop_at = math.inf  # examples after which the run stops, once stop_loss is reached
    eval_time = 0.0
    if checkpoint is not None and (state := checkpoint_mod.load(checkpoint, cfg.to_dict(), cfg.device)):
        rows, stop_at, first, elapsed = _resume(state, learner, opt, batches)
        start -= elapsed
    saved = time.perf_counter()
    bar = tqdm(range(first, cfg.steps + 1), desc=f"{cfg.model}/{cfg.method}", disable=not cfg.progress,
               leave=False, mininterval=1.0, initial=first - 1, total=cfg.steps)
    try:
        for step in bar:
            x, y = next(batches)
            x, y = x.to(cfg.device), y.to(cfg.device)
            if callback is not None:
                callback(step, learner, x, y)
            opt.zero_grad(set_to_none=True)
            losses, backward = _losses(learner, x, y, cfg.micro_batches)
            row = _empty_row(step, step * cfg.batch_size, len(losses))
            pending.append((row, losses))
            test_eval = step == cfg.steps or (cfg.eval_every and step % cfg.eval_every == 0)
            train_eval = train_idx is not None and (step == cfg.steps or crosses(step, cfg.batch_size,
                                                                                 cfg.eval_every_examples))
            # the losses are read before every evaluation, so none is made after a non-finite loss
            if (step % read_every == 0 or test_eval or train_eval) and (bad := _read_losses(pending, rows)):
                status = "diverged"
                if bad is row:  # this step's loss: recorded, no update made
                    row["wall_time"] = time.perf_counter() - start
                    rows.append(row)
                break
            backward()
            opt.step()
            eval_time += _evaluate(row, learner.net, data, cfg, test_eval, train_idx if train_eval else None)
            row["wall_time"] = time.perf_counter() - start
            rows.append(row)
            if cfg.stop_loss is not None and row["train_eval_loss"] <= cfg.stop_loss and stop_at == math.inf:
                stop_at = row["examples"] * (1 + cfg.stop_overshoot)
            if row["examples"] >= stop_at:
                break
            if (checkpoint is not None and step < cfg.steps and not pending
                    and time.perf_counter() - saved >= checkpoint_every_s):
                checkpoint_mod.save(checkpoint, cfg.to_dict(), step=step, learner=learner, optimizer=opt, rows=rows,
                                    stop_at=stop_at, elapsed=row["wall_time"])
                saved = time.perf_counter()
            if step % 10 == 0 and not pending:
                bar.set_postfix(loss=f"{row['final_loss']:.3f}")
        if pending and _read_losses(pending, rows):  # stopped by stop_loss between two reads
            status = "diverged"
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM inside signals.sigterm_as_interrupt
        if pending:  # the finished steps' losses (the interrupted step's row is not in rows)
            _read_losses(pending, rows)
        partial = TrainResult(cfg, pd.DataFrame(rows), "interrupted", learner, data, optimizer_impl(opt))
        raise TrainInterrupted(partial) from stop
    finally:
        bar.close()
    return TrainResult(cfg, pd.DataFrame(rows), status, learner, data, optimizer_impl(opt), eval_time)


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
