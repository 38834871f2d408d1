"""What one pipeline run is: :class:`PipelineConfig` and its checks.

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
from ..factory import check_factory, is_factory_name
from ..names import CUTS, DEFAULT_CUT, DEVICES, MULTI_STAGE, PIPELINED_BACKPROP, SINGLE_STAGE  # noqa: F401
from ..names import DTYPES as DTYPE_NAMES
from ..names import RUN_SCHEDULES as SCHEDULES

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}
BALANCES = CUTS
PREFETCH = ("auto", "on", "off")

@dataclass
class PipelineConfig(ModelParts, DataParts, OptimParts):
    """One benchmark run: a model cut into ``stages`` processes, trained with ``schedule``.

    ``method`` is the local-learning method of the ``local`` schedule (default
    ``chunked-{stages}``: one local module per stage, as in the paper); the other schedules
    train with backprop but use the stage cut that ``method`` and ``split`` give. ``split``
    lists the first local module of stages 1..S-1; without it the cut balances ``balance``:
    ``"time"`` (default: forward + backward + optimizer step of each local module on one
    micro-batch and the send of a stage's output, measured once before the run;
    :func:`.timing.time_split`), ``"flops"`` (forward FLOPs of blocks and heads) or ``"blocks"``
    (as many blocks per stage as ``chunked-{stages}`` gives). The schedules of ``MULTI_STAGE`` hold two stages per process (Interleaved 1F1B and
    interleaved zero bubble: stages ``r`` and ``r + S``; ZBV and DualPipeV: ``r`` and
    ``2S - 1 - r``); ``block_split`` lists the first block of their stages 1..2S-1 (without
    it, the ``balance`` cut of the net's blocks: :func:`.timing.block_split` for ``"time"``).
    A step is ``micro_batches`` micro-batches of ``micro_batch`` samples; the first
    ``warmup_steps`` steps are not timed.
    ``update_every``: the local pipeline's stages step their optimizers every this many
    micro-batches (gradients averaged over them); 1 = after every micro-batch (reported as
    ``local``), ``micro_batches`` = once per step, the pipelined-backprop schedules' optimizer
    semantics (reported as ``local/M``).
    ``dp``: each stage runs as ``dp`` replicas (``stages * dp`` processes, rank
    ``replica * stages + stage``), each reading its own micro-batches; the replicas of a stage
    average their gradients before every optimizer step (DDP over the stage's process group),
    so a step sees ``dp * micro_batch`` samples per micro-batch.
    ``timeout`` bounds every message, ``init_timeout`` the start-up (reaching the rendezvous
    store and waiting for every stage to join), ``heartbeat_timeout`` a silent peer.
    Model, data and optimizer fields: :mod:`paper_repro.config`.
    """
    schedule: str = "local"
    method: str | None = None
    stages: int = 2
    split: list[int] | None = None
    balance: str = DEFAULT_CUT
    block_split: list[int] | None = None
    dp: int = 1
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
    prefetch: str = "auto"          # draw stage 0's inputs ahead in a thread: auto = on GPUs only

    @property
    def prefetches(self) -> bool:
        """Whether stage 0 draws its inputs ahead in a background thread, as a data loader's
        workers would (``auto``: on a GPU, where drawing on the host is as long as a stage's
        compute; not on a CPU, whose cores the stages use)."""
        return self.prefetch == "on" or (self.prefetch == "auto" and self.device == "cuda")

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
        if is_factory_name(self.model):  # a user's model: package.module:function
            check_factory(self.model, self.model_kwargs)
        else:
            self.validate_model()
        self.validate_data(extra=("synthetic",))
        self.validate_model_fits_data(self.model)
        self.validate_optim()
        if self.method is not None:
            methods.parse_spec(self.method)
        for key in ("stages", "micro_batch", "micro_batches", "steps", "image_size", "channels",
                    "num_classes", "seq_len", "max_in_flight", "update_every", "dp"):
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
        if self.schedule in MULTI_STAGE:
            self.validate_multi_stage()
        if self.block_split is not None and (not isinstance(self.block_split, (list, tuple)) or any(
                not isinstance(b, int) or b < 1 for b in self.block_split)
                or list(self.block_split) != sorted(set(self.block_split))):
            raise ValueError(f"block_split must list increasing block indices >= 1, got {self.block_split!r}")
        if self.dp > 1 and self.schedule == "ddp":
            raise ValueError(f"dp={self.dp} replicates pipeline stages; schedule 'ddp' is already data "
                             "parallel over all processes: use dp=1 with it")
        if self.schedule == "ddp" and self.micro_batches % self.stages:
            raise ValueError(f"schedule 'ddp' splits the micro_batches of a step over the {self.stages} "
                             f"processes: micro_batches={self.micro_batches} must be a multiple of stages")
        if self.balance not in BALANCES:
            raise ValueError(f"unknown balance {self.balance!r}; valid: {', '.join(BALANCES)}")
        if self.prefetch not in PREFETCH:
            raise ValueError(f"unknown prefetch {self.prefetch!r}; valid: {', '.join(PREFETCH)}")
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
        return self

    def validate_multi_stage(self) -> None:
        """The micro-batch counts ``torch.distributed.pipelining`` accepts for two stages per process."""
        S, M = self.stages, self.micro_batches
        if S < 2:
            raise ValueError(f"schedule {self.schedule!r} needs at least 2 processes, got stages={S}")
        if self.schedule.startswith("interleaved") and M % max(1, M // S):
            raise ValueError(f"schedule {self.schedule!r} needs micro_batches to be a multiple of "
                             f"micro_batches // stages = {M // S}, got micro_batches={M}")
        if self.schedule.startswith(("zbv", "dualpipev")) and M < 2 * S:
            raise ValueError(f"schedule {self.schedule!r} needs micro_batches >= 2 * stages = {2 * S}, "
                             f"got micro_batches={M}")

    @property
    def processes(self) -> int:
        return self.stages * self.dp

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
