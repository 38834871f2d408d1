"""The race: every strategy trains the same model to the same targets on the same processes.

A strategy is one way to use the processes (:class:`~paper_repro.settings.types.RaceStrategy`):
one process with backprop (the reference), DDP replicas, pipelined backprop on
``torch.distributed.pipelining`` (GPipe, 1F1B, ...), or the local pipeline (``local``: each stage
steps after every micro-batch; ``local/M``: once per step). For every repeat (seed) and batch,
the one-process run and then one launch of every multi-process strategy (its processes started
once, the strategies one after another, in an order that turns with the repeat) train until the
training-subset loss reaches the lowest target or ``max_examples`` examples. Each run is kept in
the store as it finishes (``runs/<run id>.csv``: the records; ``.json``: what ran, its status,
seconds spent evaluating and starting the processes, hardware), so a stopped race resumes with
the same command. :mod:`paper_repro.analysis.race` reads the store.

The learning rate is the settings' own, or each method's best in a committed compute study at
the batch its optimizer steps on (:func:`race_lr`): no tuning for the race.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from . import build, train
from .distributed import PipelineConfig
from .distributed.fields import TrainingFields
from .distributed.trainer import train_many
from .hardware import hardware_label
from .settings.types import RaceSettings, RaceStrategy
from .simulate.calibrate import BlockCosts, measure

RESULTS = Path(__file__).resolve().parent.parent / "results"


@dataclass(frozen=True)
class RaceRun:
    """One run of the race: a strategy at a batch, from seed ``repeat``, at learning rate ``lr``
    (of ``method``, stepping on ``update_batch`` examples)."""
    strategy: RaceStrategy
    batch: int
    repeat: int
    lr: float
    update_batch: int

    @property
    def run_id(self) -> str:
        slug = self.strategy.name.replace(" ", "_").replace("/", "_")
        return f"{slug}-b{self.batch}-r{self.repeat}"

    @property
    def method(self) -> str:
        return self.strategy.method or "backprop"


def update_batch(settings: RaceSettings, strategy: RaceStrategy, batch: int) -> int:
    """Examples per optimizer update: the micro-batch for ``local``, the whole batch otherwise."""
    return batch // settings.micro_batches if strategy.schedule == "local" else batch


def race_lr(settings: RaceSettings, method: str, batch: int, results: str | os.PathLike = RESULTS) -> float:
    """The learning rate ``method`` races with when its optimizer steps on ``batch`` examples:
    ``settings.lr``, or the best learning rate of ``method`` at loss ``settings.lr_target`` in the
    committed study's ``steps_vs_batch.csv`` at the studied batch nearest to ``batch`` (in log
    scale; halfway between two studied batches, the smaller one's)."""
    if settings.lr is not None:
        return settings.lr
    path = Path(results) / settings.lr_store / "steps_vs_batch.csv"
    if not path.is_file():
        raise ValueError(f"the race takes its learning rates from {path}, which is missing; run notebook 01 "
                         f"on the committed store {settings.lr_store!r} first")
    table = pd.read_csv(path)
    rows = table[(table["method"] == method) & (table["target"].round(6) == round(settings.lr_target, 6))]
    if rows.empty:
        raise ValueError(f"{path} has no best learning rate of {method!r} at loss {settings.lr_target}")
    distance = (rows["batch_size"].map(math.log2) - math.log2(batch)).abs().round(9)
    nearest = rows[distance == distance.min()].sort_values("batch_size")
    return float(nearest["lr"].iloc[0])


def race_runs(settings: RaceSettings, results: str | os.PathLike = RESULTS) -> list[RaceRun]:
    """Every run in the order they are made: per repeat and batch the one-process run first, then
    the multi-process strategies (one launch), their order turned by one place each repeat."""
    runs = []
    for repeat in range(settings.repeats):
        for batch in settings.batches:
            single = [s for s in settings.strategies if s.schedule == "single"]
            multi = [s for s in settings.strategies if s.schedule != "single"]
            k = repeat % len(multi) if multi else 0
            for s in single + multi[k:] + multi[:k]:
                ub = update_batch(settings, s, batch)
                runs.append(RaceRun(s, batch, repeat, race_lr(settings, s.method or "backprop", ub, results), ub))
    return runs


def check_settings(settings: RaceSettings) -> None:
    """ValueError naming the bad value of a race's settings."""
    for b in settings.batches:
        if b % (settings.micro_batches * settings.processes):
            raise ValueError(f"batch {b} must be a multiple of micro_batches x processes = "
                             f"{settings.micro_batches * settings.processes}")
    if settings.repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {settings.repeats}")
    if not settings.targets:
        raise ValueError("a race needs at least one target")


# ------------------------------------------------------------------------------ running
def _steps(settings: RaceSettings, batch: int) -> int:
    return max(1, settings.max_examples // batch)


def _single(settings: RaceSettings, run: RaceRun, data, threads: int) -> tuple[pd.DataFrame, dict]:
    cfg = train.TrainConfig(model=settings.model, model_kwargs=settings.model_kwargs, method="backprop",
                            dataset=settings.dataset, batch_size=run.batch, steps=_steps(settings, run.batch),
                            lr=run.lr, seed=run.repeat, eval_every=0, eval_examples=None,
                            eval_every_examples=settings.eval_every_examples,
                            train_eval_examples=settings.train_eval_examples, stop_loss=min(settings.targets),
                            threads=threads, device=settings.device, progress=False)
    t0 = time.perf_counter()
    result = train.train(cfg, data=data)
    total = time.perf_counter() - t0
    return result.records, {"status": result.status, "eval_time": result.eval_time, "processes": 1,
                            "startup_time": total - float(result.records["wall_time"].iloc[-1])}


def _stage_config(settings: RaceSettings, run: RaceRun, data_dir, threads: int):
    s = run.strategy
    schedule, every = ("local", settings.micro_batches) if s.schedule == "local/M" else (s.schedule, 1)
    return PipelineConfig(model=settings.model, model_kwargs=settings.model_kwargs, method=s.method,
                          schedule=schedule, update_every=every, stages=settings.processes,
                          micro_batch=run.batch // settings.micro_batches, micro_batches=settings.micro_batches,
                          steps=_steps(settings, run.batch), warmup_steps=0, dataset=settings.dataset,
                          data_dir=data_dir, data_kwargs=settings.data_kwargs, lr=run.lr, seed=run.repeat,
                          threads=threads, device=settings.device)


def _launch(settings: RaceSettings, runs: list[RaceRun], data_dir, threads: int) -> list[tuple[pd.DataFrame, dict]]:
    training = TrainingFields(eval_every=0, eval_examples=None, eval_every_examples=settings.eval_every_examples,
                              train_eval_examples=settings.train_eval_examples, stop_loss=min(settings.targets))
    t0 = time.perf_counter()
    results = train_many([_stage_config(settings, r, data_dir, threads) for r in runs], training, progress=False)
    total = time.perf_counter() - t0
    trained = sum(float(r.records["wall_time"].iloc[-1]) for r in results)
    startup = (total - trained) / len(results)    # process start and planning, shared by the launch's runs
    return [(r.records, {"status": r.status, "eval_time": r.eval_time, "processes": r.config.processes,
                         "startup_time": startup, "method_run": r.config.local_method
                         if r.config.schedule == "local" else "backprop"}) for r in results]


def _save(store: Path, settings: RaceSettings, run: RaceRun, records: pd.DataFrame, meta: dict) -> None:
    runs = store / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    csv, info = runs / f"{run.run_id}.csv", runs / f"{run.run_id}.json"
    tmp = csv.with_name(f".{csv.name}.tmp")
    records.to_csv(tmp, index=False)
    os.replace(tmp, csv)
    meta = {"run_id": run.run_id, "strategy": run.strategy.name, "schedule": run.strategy.schedule,
            "method": run.method, "batch": run.batch, "repeat": run.repeat, "seed": run.repeat, "lr": run.lr,
            "update_batch": run.update_batch, **meta, "hardware": hardware_label(settings.device),
            "torch": torch.__version__}
    tmp = info.with_name(f".{info.name}.tmp")
    tmp.write_text(json.dumps(meta, indent=1))
    os.replace(tmp, info)                            # the .json is written last: a run is done once it exists


def done_runs(store: str | os.PathLike) -> set[str]:
    """Run ids whose records and description are both in ``store``."""
    runs = Path(store) / "runs"
    return {p.stem for p in runs.glob("*.json") if (runs / f"{p.stem}.csv").is_file()} if runs.is_dir() else set()


def run_race(settings: RaceSettings, results: str | os.PathLike = RESULTS, data_dir=None, threads: int = 1,
             progress: bool = True) -> Path:
    """Make every run of ``settings`` not yet in the store ``results/<settings.name>``; returns the
    store. Each process uses ``threads`` torch threads."""
    check_settings(settings)
    store = Path(results) / settings.name
    store.mkdir(parents=True, exist_ok=True)
    (store / "settings.json").write_text(json.dumps(dataclasses.asdict(settings), indent=1, default=str))
    runs = race_runs(settings, results)
    done = done_runs(store)
    todo = [r for r in runs if r.run_id not in done]
    data = build.load_data(train.TrainConfig(model=settings.model, dataset=settings.dataset, data_dir=data_dir,
                                             data_kwargs=settings.data_kwargs)).to(settings.device) if todo else None
    bar = tqdm(total=len(runs), initial=len(runs) - len(todo), desc="race", disable=not progress)
    groups: dict[tuple[int, int], list[RaceRun]] = {}
    for r in todo:
        groups.setdefault((r.repeat, r.batch), []).append(r)
    for group in groups.values():
        for run in [r for r in group if r.strategy.schedule == "single"]:
            records, meta = _single(settings, run, data, threads)
            _save(store, settings, run, records, meta)
            bar.update()
        multi = [r for r in group if r.strategy.schedule != "single"]
        if multi:
            for run, (records, meta) in zip(multi, _launch(settings, multi, data_dir, threads)):
                _save(store, settings, run, records, meta)
                bar.update()
    bar.close()
    return store


def prediction_costs(settings: RaceSettings, store: str | os.PathLike, threads: int = 1) -> dict:
    """``{depth: per-block costs}`` of the net each predicted device count trains (the settings'
    model at that depth), calibrated on this machine with ``threads`` torch threads at
    ``settings.calibration_micro_batch`` and kept in the store (``calibration_depth<D>.json``), so a
    later run reads them instead of measuring again."""
    out = {}
    for depth in sorted(set(settings.predict_devices.values())):
        path = Path(store) / f"calibration_depth{depth}.json"
        if path.is_file():
            out[depth] = BlockCosts.load(path)
            continue
        cfg = PipelineConfig(model=settings.model, model_kwargs={**settings.model_kwargs, "depth": depth},
                             image_size=settings.data_kwargs.get("image_size", 32), stages=1,
                             micro_batch=settings.calibration_micro_batch, threads=threads, device=settings.device)
        out[depth] = measure(cfg, reps=3, threads=threads)
        out[depth].save(path)
    return out

