"""What one pipeline run is: :class:`PipelineConfig`, its checks, and the fault-injection syntax.

The model, data and optimizer fields are the shared parts of :mod:`paper_repro.config`
(``dataset`` defaults to ``"synthetic"`` here: random inputs of the configured shape);
everything else is about stages, micro-batches, schedules and time-outs.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from .. import methods
from ..config import OPTIMIZERS, DataParts, ModelParts, OptimParts, check_positive_int  # noqa: F401

SCHEDULES = ("local", "gpipe", "1f1b", "1f1b-recompute", "ddp")
PIPELINED_BACKPROP = ("gpipe", "1f1b", "1f1b-recompute")
DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16}
DEVICES = ("cpu", "cuda")
FAULT_MODES = ("raise", "kill", "hang")
BALANCES = ("flops", "time")


@dataclass
class PipelineConfig(ModelParts, DataParts, OptimParts):
    """One benchmark run: a model cut into ``stages`` processes, trained with ``schedule``.

    ``method`` is the local-learning method of the ``local`` schedule (default
    ``chunked-{stages}``: one local module per stage, as in the paper); the other schedules
    train with backprop but use the stage cut that ``method`` and ``split`` give. ``split``
    lists the first local module of stages 1..S-1; without it the cut balances ``balance``:
    ``"flops"`` (forward FLOPs of blocks and heads) or ``"time"`` (forward+backward time of each
    local module on one micro-batch, measured once before the run; :func:`time_split`).
    A step is ``micro_batches`` micro-batches of ``micro_batch`` samples; the first
    ``warmup_steps`` steps are not timed. ``fault`` injects a failure for tests:
    ``"raise@STAGE:MICROBATCH"``, ``"kill@STAGE:MICROBATCH"`` (SIGKILL) or ``"hang@STAGE:MICROBATCH"``.
    ``update_every``: the local pipeline's stages step their optimizers every this many
    micro-batches (gradients averaged over them); 1 = after every micro-batch, the paper's
    local updates; ``micro_batches`` = as often as the baselines, which step once per step.
    ``timeout`` bounds every message, ``init_timeout`` the start-up (reaching the rendezvous
    store and waiting for every stage to join), ``heartbeat_timeout`` a silent peer.
    Model, data and optimizer fields: :mod:`paper_repro.config`.
    """
    schedule: str = "local"
    method: str | None = None
    stages: int = 2
    split: list[int] | None = None
    balance: str = "flops"
    micro_batch: int = 8
    micro_batches: int = 16
    steps: int = 3
    warmup_steps: int = 1
    dataset: str = "synthetic"      # a data set of paper_repro.data, or synthetic inputs:
    image_size: int = 32            # synthetic images: image_size x image_size,
    channels: int = 3               # with this many channels,
    num_classes: int = 10           # and classes (the vocabulary size for the Transformer)
    seq_len: int = 64               # synthetic token windows
    seed: int = 0
    dtype: str = "float32"
    device: str = "cpu"
    threads: int | None = None
    max_in_flight: int = 2
    update_every: int = 1
    timeout: float = 300.0
    heartbeat_timeout: float = 30.0
    init_timeout: float = 300.0
    save_params: str | None = None
    fault: str | None = None

    @property
    def local_method(self) -> str:
        return self.method or f"chunked-{self.stages}"

    @property
    def total_micro_batches(self) -> int:
        return (self.warmup_steps + self.steps) * self.micro_batches

    def validate(self) -> "PipelineConfig":
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}; valid: {', '.join(SCHEDULES)}")
        if self.model is None:
            raise ValueError("model must be named for a pipeline run, got None")
        self.validate_model()
        self.validate_data(extra=("synthetic",))
        self.validate_model_fits_data(self.model)
        self.validate_optim()
        if self.method is not None:
            methods.parse_spec(self.method)
        for key in ("stages", "micro_batch", "micro_batches", "steps", "image_size", "channels",
                    "num_classes", "seq_len", "max_in_flight", "update_every"):
            check_positive_int(key, getattr(self, key))
        if self.micro_batches % self.update_every:
            raise ValueError(f"update_every={self.update_every} must divide micro_batches={self.micro_batches} "
                             "(the local pipeline's optimizer steps must fall on step boundaries)")
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be a non-negative integer, got {self.warmup_steps!r}")
        if self.schedule in PIPELINED_BACKPROP and self.stages < 2:
            raise ValueError(f"schedule {self.schedule!r} needs at least 2 stages, got stages={self.stages}")
        if self.schedule in ("1f1b", "1f1b-recompute") and self.micro_batches < self.stages:
            raise ValueError(f"schedule {self.schedule!r} needs micro_batches >= stages, got "
                             f"micro_batches={self.micro_batches} < stages={self.stages}")
        if self.schedule == "ddp" and self.micro_batches % self.stages:
            raise ValueError(f"schedule 'ddp' splits the micro_batches of a step over the {self.stages} "
                             f"processes: micro_batches={self.micro_batches} must be a multiple of stages")
        if self.balance not in BALANCES:
            raise ValueError(f"unknown balance {self.balance!r}; valid: {', '.join(BALANCES)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; valid: {', '.join(DTYPES)}")
        if self.device not in DEVICES:
            raise ValueError(f"unknown device {self.device!r}; valid: {', '.join(DEVICES)} "
                             "(each process uses cuda:LOCAL_RANK)")
        for key in ("timeout", "heartbeat_timeout", "init_timeout"):
            if not getattr(self, key) > 0:
                raise ValueError(f"{key} must be a positive number of seconds, got {getattr(self, key)!r}")
        if self.threads is not None:
            check_positive_int("threads", self.threads)
        parse_fault(self.fault)
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def parse_fault(fault: str | None) -> tuple[str, int, int] | None:
    """``"raise@1:5"`` -> ("raise", stage 1, micro-batch 5); None -> None."""
    if fault is None:
        return None
    try:
        mode, where = fault.split("@")
        stage, at = (int(v) for v in where.split(":"))
    except ValueError:
        raise ValueError(f"fault must look like MODE@STAGE:MICROBATCH with MODE in "
                         f"{', '.join(FAULT_MODES)}, got {fault!r}") from None
    if mode not in FAULT_MODES:
        raise ValueError(f"unknown fault mode {mode!r}; valid: {', '.join(FAULT_MODES)}")
    return mode, stage, at
