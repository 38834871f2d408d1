"""Train a model on several processes: ``paper-repro train --stages S`` and its Python API.

    from paper_repro.distributed import PipelineConfig
    from paper_repro.distributed.fields import TrainingFields
    from paper_repro.distributed.trainer import train_stages
    result = train_stages(PipelineConfig(model="mlp", dataset="digits", stages=2, schedule="local",
                                         micro_batch=16, micro_batches=4, steps=100),
                          TrainingFields(eval_every_examples=2048, stop_loss=0.3))
    result.records      # one row per optimizer update, the columns of single-process training

The cut is planned here once (measured by time, as the benchmark's), then the stages are
launched on this machine (:func:`.launch.launch`; ``torchrun -m paper_repro.distributed.run
--training FILE`` runs the same worker across nodes). A resumed run takes its cut from the
checkpoint's manifest, so it trains exactly what the interrupted run trained.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pandas as pd

from ..train import records_summary
from .bench import measured_cut
from .config import PipelineConfig
from .fields import TrainingFields
from .launch import launch
from .training import check_resume, check_training, read_manifest, trained_method


@dataclass
class StagesResult:
    """A multi-process training run: its resolved config, records and status."""
    config: PipelineConfig
    training: TrainingFields
    records: pd.DataFrame
    status: str                     # finished | diverged | interrupted
    optimizer_impl: str
    hardware: str
    eval_time: float = 0.0          # seconds rank 0 spent in evaluations (the pipeline paused)

    @property
    def method(self) -> str:
        return trained_method(self.config)

    def summary(self) -> dict:
        """The summary of single-process training, with the schedule and the processes."""
        local_m = self.config.schedule == "local" and self.config.update_every > 1
        return {"model": self.config.model, "method": self.method, "dataset": self.config.dataset,
                "schedule": "local/M" if local_m else self.config.schedule, "processes": self.config.processes,
                "status": self.status, **records_summary(self.records, self.optimizer_impl)}


def resolve(cfg: PipelineConfig, training: TrainingFields) -> PipelineConfig:
    """``cfg`` (no warm-up: every step trains) with its cut fixed: measured here, or, resuming,
    the checkpoint's where ``cfg`` leaves it to the plan (a cut given differently is named as
    the field that differs)."""
    cfg = dataclasses.replace(cfg, warmup_steps=0).validate()
    check_training(cfg, training)
    if training.resume:
        manifest = read_manifest(training.checkpoint)
        if manifest is None:
            raise ValueError(f"--resume: no checkpoint in {training.checkpoint}; start without --resume")
        cut = {k: manifest["config"].get(k) if getattr(cfg, k) is None else getattr(cfg, k)
               for k in ("method", "cut_at", "cut_at_blocks")}
        cfg = dataclasses.replace(cfg, **cut)
        check_resume(training.checkpoint, cfg)
        return cfg
    method, cut_at, blocks = measured_cut(cfg)
    return dataclasses.replace(cfg, method=method, cut_at=cut_at, cut_at_blocks=blocks)


def train_many(configs: list[PipelineConfig], training: TrainingFields | None = None, *,
               progress: bool = True, timeout: float | None = None) -> list[StagesResult]:
    """Train each of ``configs`` (the same processes: ``stages``, ``dp`` and ``device`` alike) in
    turn in one launch, so the processes start once; one result each. No checkpoints here."""
    training = training or TrainingFields()
    if training.checkpoint or training.resume or training.save:
        raise ValueError("train_many keeps no checkpoint and saves no model: use train_stages for that")
    resolved = [resolve(c, training) for c in configs]
    try:
        out = launch(resolved, training=training, progress=progress, timeout=timeout)
    except KeyboardInterrupt as stop:
        partial = getattr(stop, "partial_records", None) or []
        stop.results = [_result(c, training, r) for c, r in zip(resolved, partial)]
        raise
    return [_result(c, training, r) for c, r in zip(resolved, out)]


def train_stages(cfg: PipelineConfig, training: TrainingFields | None = None, *, progress: bool = True,
                 timeout: float | None = None) -> StagesResult:
    """Train ``cfg`` on ``cfg.processes`` local processes; the records of every update.

    Ctrl-C or SIGTERM stops every process after a common step (and writes a checkpoint where
    ``training.checkpoint`` is set); the ``KeyboardInterrupt`` then carries ``result``, the
    :class:`StagesResult` of the finished updates. A failed process raises
    :class:`.launch.PipelineError` naming it."""
    training = training or TrainingFields()
    resolved = resolve(cfg, training)
    try:
        out = launch([resolved], training=training, progress=progress, timeout=timeout)
    except KeyboardInterrupt as stop:
        partial = getattr(stop, "partial_records", None) or []
        stop.result = _result(resolved, training, partial[0]) if partial else None
        raise
    return _result(resolved, training, out[0])


def _result(cfg: PipelineConfig, training: TrainingFields, record: dict) -> StagesResult:
    return StagesResult(cfg, training, pd.DataFrame(record["records"]), record["status"],
                        record["optimizer_impl"], record["hardware"], record["eval_time"])
