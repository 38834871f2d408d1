"""Training on several processes: what turns a pipeline run into a training run.

The stage loops (:mod:`.local`, :mod:`.baselines`, :mod:`.ddp`) are the benchmark's; in a
training run each process also holds a :class:`Session`, which the loop calls after every
optimizer update with that update's losses (its own local modules', or the net's). The session

* keeps this process's loss rows (read to the host every update on a CPU, every
  ``LOSS_READ_EVERY`` updates on a GPU);
* at *sync points* (an evaluation, a checkpoint, the end) meets every process on a gloo group of
  its own: rank 0 gathers the parameters each process holds into a whole copy of the learner,
  evaluates it as single-process training does (:func:`paper_repro.train.evaluate`) and tells
  every process whether to stop (``stop_loss``), so all stop after the same update;
* writes checkpoints: each process its own file ``step<U>/rank<R>.pt`` (its modules,
  optimizer, rows, random state), then rank 0 the manifest, atomically, last; a run resumed from
  it ends with the uninterrupted run's records and parameters;
* stops every process after the same step on Ctrl-C, SIGTERM or a non-finite loss: the process
  that sees it asks through the rendezvous store, rank 0 (stage 0, which every other stage
  follows) names the end of its next step, and every process checks the store once per step;
* at the end gathers every process's rows into the records of single-process ``train``
  (``step``, ``examples``, ``loss_<m>``, ``final_loss``, ``eval_loss``, ``eval_acc``,
  ``train_eval_loss``, ``wall_time``) and writes the whole trained learner (``save``).
"""
from __future__ import annotations

import copy
import datetime
import json
import math
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

from .. import methods
from ..checkpoint import save_learner
from ..hardware import hardware_label
from ..precheck import writable
from ..train import LOSS_READ_EVERY, crosses, evaluate, evaluate_indices, train_eval_indices
from . import comm
from .config import PipelineConfig
from .fields import TrainingFields, current_fields
from .planning import Plan, write_json

FORMAT = 1
STOP_REQUEST = "stop/request"              # Ctrl-C / SIGTERM: every run of the launch stops
MANIFEST = "manifest.json"
# fields that do not change what a run computes: a resumed run may change them
NOT_COMPARED = ("timeout", "heartbeat_timeout", "init_timeout", "threads", "prefetch", "save_params",
                "steps", "max_in_flight")


def trained_method(cfg: PipelineConfig) -> str:
    """The method the run trains: the local schedule's local method, else backprop."""
    return cfg.local_method if cfg.schedule == "local" else "backprop"


def updates_per_step(cfg: PipelineConfig) -> int:
    return cfg.micro_batches // cfg.update_every if cfg.schedule == "local" else 1


def examples_per_update(cfg: PipelineConfig) -> int:
    per_update = cfg.update_every if cfg.schedule == "local" else cfg.micro_batches
    return per_update * cfg.micro_batch * cfg.dp


def comparable(cfg: PipelineConfig) -> dict:
    """The config fields a checkpoint must share with the run resuming from it."""
    return json.loads(json.dumps({k: v for k, v in cfg.to_dict().items() if k not in NOT_COMPARED}, default=str))


def differing(saved: dict, mine: dict) -> list[str]:
    return sorted(k for k in set(saved) | set(mine) if saved.get(k) != mine.get(k))


def read_manifest(folder: str | os.PathLike) -> dict | None:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
    except ValueError as err:
        raise ValueError(f"cannot read the checkpoint manifest {path}: {err}") from None
    if isinstance(manifest.get("config"), dict):    # a checkpoint of an earlier release: current names
        manifest["config"] = current_fields(manifest["config"])
    return manifest


def check_resume(folder: str | os.PathLike, cfg: PipelineConfig) -> dict:
    """The manifest of the checkpoint in ``folder`` that ``cfg`` resumes from; a ValueError naming
    the field that differs, or the rank file that is missing."""
    manifest = read_manifest(folder)
    if manifest is None:
        raise ValueError(f"--resume: no checkpoint in {folder} (no {MANIFEST}); start without --resume")
    diff = differing(manifest["config"], comparable(cfg))
    if diff:
        field = diff[0]
        raise ValueError(f"--resume: the checkpoint in {folder} is of another run: {field} is "
                         f"{manifest['config'].get(field)!r} there, {comparable(cfg).get(field)!r} here")
    for r in range(manifest["world"]):
        path = Path(folder) / manifest["files"][r]
        if not path.is_file():
            raise ValueError(f"--resume: the checkpoint of rank {r} is missing: {path}")
    return manifest


def check_training(cfg: PipelineConfig, training: TrainingFields) -> None:
    """ValueError (one line naming the bad value) for settings a training run cannot take."""
    if cfg.dataset == "synthetic":
        raise ValueError("training on several processes needs a data set (--dataset), not synthetic inputs")
    for key in ("eval_every", "eval_every_examples", "checkpoint_every"):
        value = getattr(training, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{key} must be a non-negative integer, got {value!r}")
    if training.stop_loss is not None and not training.eval_every_examples:
        raise ValueError(f"stop_loss={training.stop_loss!r} needs eval_every_examples > 0 (the loss it is "
                         "compared with is the training-subset evaluation)")
    if (training.checkpoint_every or training.resume) and not training.checkpoint:
        raise ValueError("checkpoint_every and resume need a checkpoint folder (--checkpoint DIR)")
    if training.save:
        writable(training.save, "--save")


class StopSignals:
    """SIGINT and SIGTERM in a stage process set :attr:`received` (the signal number) instead of
    raising: the session stops every process at the end of a common step."""

    def __init__(self):
        self.received: int | None = None
        self.previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        self.received = signum

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        return False


class Session:
    """One process's part of a training run (see the module docstring)."""

    def __init__(self, ctx: comm.Context, cfg: PipelineConfig, training: TrainingFields, plan: Plan,
                 where, eval_learner: methods.Learner | None, signals: StopSignals | None = None,
                 index: int = 0):
        self.ctx, self.cfg, self.training, self.plan, self.where = ctx, cfg, training, plan, where
        self.eval_learner = eval_learner           # rank 0: a whole learner the gathered state goes into
        self.signals = signals
        self.data = plan.data
        if self.data is None:
            raise ValueError("a training run needs a data set (--dataset), not synthetic inputs")
        self.total = cfg.steps * updates_per_step(cfg)
        self.batch = examples_per_update(cfg)
        self.group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=cfg.timeout))
        self.rows: list[list[float]] = []          # this process's losses, one list per update
        self.times: list[float] = []               # seconds since the start at each update
        self.pending: list[tuple[int, torch.Tensor]] = []
        self.read_every = 1 if ctx.device.type == "cpu" else LOSS_READ_EVERY
        self.evals: dict[int, dict] = {}           # rank 0: update -> evaluation results
        self.train_idx = (train_eval_indices(self.data, training.train_eval_examples)
                          if training.eval_every_examples else None)
        # a resumed run starts after the manifest's update (its state is loaded by begin)
        self.update = read_manifest(training.checkpoint)["update"] if training.resume else 0
        self.status = "finished"
        self.stop_at: int | None = None            # the step after which every process stops
        self.asked = False
        self.diverged_key, self.stop_at_key = f"stop/{index}/diverged", f"stop/{index}/at"
        self.eval_time = 0.0                       # rank 0: seconds spent in evaluations
        self.elapsed0 = 0.0
        self.start = time.perf_counter()
        self.modules = self.optimizer = None

    # ------------------------------------------------------------------ start and resume
    def begin(self, holder: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
        """Register what this process trains; after a resume, load its state. Returns the number
        of micro-batches already done (the loop starts there)."""
        self.modules, self.optimizer = holder, optimizer
        if self.training.resume:
            manifest = read_manifest(self.training.checkpoint)
            path = Path(self.training.checkpoint) / manifest["files"][self.ctx.rank]
            state = torch.load(path, map_location="cpu", weights_only=True)   # the random state stays on the host
            holder.load_state_dict(state["modules"])
            optimizer.load_state_dict(state["optimizer"])
            self.rows, self.times, self.evals = state["rows"], state["times"], state["evals"]
            self.elapsed0 = state["elapsed"]
            torch.set_rng_state(state["rng"])
        self._meet()                               # every process starts its clock together
        self.start = time.perf_counter() - self.elapsed0
        return self.micro_batches_done

    @property
    def micro_batches_done(self) -> int:
        per_update = self.cfg.update_every if self.cfg.schedule == "local" else self.cfg.micro_batches
        return self.update * per_update

    def _meet(self) -> None:
        dist.barrier(group=self.group)

    # ------------------------------------------------------------------ every update
    def after_update(self, losses: torch.Tensor, flush=None) -> bool:
        """Record this update's ``losses`` (this process's modules', or the net's; None: none
        here); True when every process stops after it. ``flush`` waits for this process's sends."""
        self.update += 1
        u = self.update
        self.times.append(time.perf_counter() - self.start)
        self.rows.append([])
        if losses is not None:
            self.pending.append((u, losses.detach().reshape(-1)))
        if len(self.pending) >= self.read_every:
            self._read()
        stop = False
        if self._step_ends(u):
            stop = self._control(u)
        test_eval = u == self.total or (self.training.eval_every and u % self.training.eval_every == 0)
        train_eval = self.train_idx is not None and (u == self.total or crosses(u, self.batch,
                                                                                self.training.eval_every_examples))
        if test_eval or train_eval:
            if flush is not None:
                flush()
            stop = self._evaluate(u, test_eval, train_eval) or stop
        every = self.training.checkpoint_every
        if self.training.checkpoint and (stop and self.status == "interrupted" or every and u % every == 0
                                         and u < self.total):
            if flush is not None:
                flush()
            self.checkpoint()
        return stop

    def _step_ends(self, u: int) -> bool:
        return u % updates_per_step(self.cfg) == 0

    def _read(self) -> None:
        if not self.pending:
            return
        values = torch.stack([v for _, v in self.pending]).tolist()
        for (u, _), row in zip(self.pending, values):
            self.rows[u - 1] = row
            if not all(math.isfinite(v) for v in row) and not self.asked:
                self.ctx.store.compare_set(self.diverged_key, "", f"diverged at update {u} on rank {self.ctx.rank}")
                self.asked = True
        self.pending.clear()

    def _control(self, u: int) -> bool:
        """At the end of a step: ask for a stop on a signal; rank 0 names the step to stop after;
        True at that step."""
        step = u // updates_per_step(self.cfg)
        if self.signals is not None and self.signals.received and not self.asked:
            self.ctx.store.compare_set(STOP_REQUEST, "", f"signal {signal.Signals(self.signals.received).name}")
            self.asked = True
        store = self.ctx.store
        if self.stop_at is None:
            if store.check([self.stop_at_key]):
                self.stop_at = int(store.get(self.stop_at_key))
            elif self.ctx.rank == 0 and (store.check([STOP_REQUEST]) or store.check([self.diverged_key])):
                self.stop_at = step + 1
                store.set(self.stop_at_key, str(self.stop_at))
        if self.stop_at is not None and step >= self.stop_at:
            self.status = "interrupted" if store.check([STOP_REQUEST]) else "diverged"
            return True
        return False

    # ------------------------------------------------------------------ sync points
    def _held_state(self) -> dict:
        """The parameters and buffers this process holds (replica 0 of each stage), on the CPU."""
        if self.where.replica != 0 or (self.cfg.schedule == "ddp" and self.ctx.rank != 0):
            return {}                               # a replica of what another process sends
        learner = self.plan.learner
        return {k: v.detach().cpu() for k, v in learner.state_dict().items()}

    def _gather_learner(self) -> None:
        """Rank 0's whole learner takes every process's parameters."""
        gathered = [None] * self.ctx.world if self.ctx.rank == 0 else None
        dist.gather_object(self._held_state(), gathered, dst=0, group=self.group)
        if self.ctx.rank != 0:
            return
        merged = {k: v for part in gathered for k, v in part.items()}
        net_state = {k[len("net."):]: v for k, v in merged.items() if k.startswith("net.")}
        self.eval_learner.net.load_state_dict(net_state)
        if self.cfg.schedule == "local":
            self.eval_learner.heads.load_state_dict(
                {k[len("heads."):]: v for k, v in merged.items() if k.startswith("heads.")})

    def _evaluate(self, u: int, test_eval: bool, train_eval: bool) -> bool:
        t0 = time.perf_counter()
        self._gather_learner()
        decision = [None]
        if self.ctx.rank == 0:
            device, net = str(self.ctx.device), self.eval_learner.net
            result = {}
            if test_eval:
                result["eval_loss"], result["eval_acc"] = evaluate(net, self.data, "test",
                                                                   self.training.eval_examples, device)
            if train_eval:
                result["train_eval_loss"] = evaluate_indices(net, self.data, "train", self.train_idx, device)
            self.evals[u] = result
            stop_loss = self.training.stop_loss
            decision = [stop_loss is not None and result.get("train_eval_loss", math.inf) <= stop_loss]
        dist.broadcast_object_list(decision, src=0, group=self.group)
        self.eval_time += time.perf_counter() - t0
        return bool(decision[0])

    def checkpoint(self) -> Path:
        """Each process writes its file, then rank 0 the manifest (the checkpoint exists once it is
        written); older steps' files are removed after it."""
        self._read()
        folder = Path(self.training.checkpoint)
        name = f"step{self.update}/rank{self.ctx.rank}.pt"
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {"format": FORMAT, "update": self.update, "modules": self.modules.state_dict(),
                 "optimizer": self.optimizer.state_dict(), "rows": self.rows, "times": self.times,
                 "evals": self.evals, "elapsed": time.perf_counter() - self.start, "rng": torch.get_rng_state()}
        tmp = path.with_name(f".{path.name}.tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)
        self._meet()
        if self.ctx.rank == 0:
            manifest = {"format": FORMAT, "update": self.update, "world": self.ctx.world,
                        "config": comparable(self.cfg), "training": self.training.to_dict(),
                        "files": [f"step{self.update}/rank{r}.pt" for r in range(self.ctx.world)]}
            write_json(manifest, folder / MANIFEST)
            for old in folder.glob("step*"):
                if old.is_dir() and old.name != f"step{self.update}":
                    shutil.rmtree(old, ignore_errors=True)
        self._meet()
        return folder / MANIFEST

    # ------------------------------------------------------------------ the end
    def finish(self, optimizer_impl: str) -> dict | None:
        """Gather every process's rows into the records (rank 0 returns the result; the others None)
        and write the trained learner (``save``)."""
        self._read()
        mine = {"rank": self.ctx.rank, "stage": self.where.stage, "replica": self.where.replica,
                "rows": self.rows, "times": self.times}
        gathered = [None] * self.ctx.world if self.ctx.rank == 0 else None
        dist.gather_object(mine, gathered, dst=0, group=self.group)
        if self.training.save:
            self._gather_learner()
        if self.ctx.rank != 0:
            return None
        records = self._records(gathered)
        if self.training.save:
            save_learner(self.training.save, self.eval_learner, model=self.cfg.model,
                         model_kwargs=self.cfg.model_kwargs, dataset=self.cfg.dataset, seed=self.cfg.seed)
        return {"status": self.status, "records": records, "optimizer_impl": optimizer_impl,
                "eval_time": self.eval_time, "config": self.cfg.to_dict(),
                "method": trained_method(self.cfg), "schedule": self.cfg.schedule,
                "hardware": hardware_label(str(self.ctx.device)), "torch": torch.__version__}

    def _records(self, parts: list[dict]) -> list[dict]:
        """One row per update: each local module's loss from the processes that hold it (the mean
        over replicas, and over DDP's ranks), the evaluations, and the latest process's clock."""
        K = len(methods.module_blocks(trained_method(self.cfg), len(self.plan.learner.net.blocks)))
        rows = []
        for u in range(1, self.update + 1):
            losses: list[list[float]] = [[] for _ in range(K)]
            for part in parts:
                row = part["rows"][u - 1] if u - 1 < len(part["rows"]) else []
                if not row:
                    continue
                mods = self._modules_of(part["stage"], len(row))
                for m, v in zip(mods, row):
                    losses[m].append(v)
            values = [sum(v) / len(v) if len(v) > 1 else (v[0] if v else math.nan) for v in losses]
            wall = max(part["times"][u - 1] for part in parts if u - 1 < len(part["times"]))
            row = {"step": u, "examples": u * self.batch, **{f"loss_{m}": v for m, v in enumerate(values)},
                   "final_loss": values[-1], "eval_loss": math.nan, "eval_acc": math.nan,
                   "train_eval_loss": math.nan, **self.evals.get(u, {}), "wall_time": wall}
            rows.append(row)
            if not all(math.isfinite(v) for v in values):
                self.status = "diverged"
                break
        return rows

    def _modules_of(self, stage: int, count: int) -> list[int]:
        if self.cfg.schedule == "local":
            return self.plan.stages.modules[stage]
        return [0] * count                          # backprop: the net's loss only


def eval_copy(cfg: PipelineConfig, learner: methods.Learner) -> methods.Learner:
    """Rank 0's whole learner of the trained method (made before the process frees what it does
    not hold): the local learner itself, or backprop over the same net."""
    if cfg.schedule == "local":
        return copy.deepcopy(learner)
    return methods.build(copy.deepcopy(learner.net), "backprop")
