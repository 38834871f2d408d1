"""What one pipeline run is: :class:`PipelineConfig` (the fields of
:class:`.fields.PipelineFields`) and its checks.

The model, data and optimizer fields are the shared parts of :mod:`paper_repro.config`
(``dataset`` defaults to ``"synthetic"`` here: random inputs of the configured shape);
everything else is about stages, micro-batches, schedules and time-outs.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import methods
from ..config import DataParts, ModelParts, OptimParts, check_positive_int
from ..factory import check_factory, is_factory_name
from ..names import CUTS, DEVICES, MULTI_STAGE, PIPELINED_BACKPROP, PREFETCH, check_cut
from ..names import DTYPES as DTYPE_NAMES
from ..names import RUN_SCHEDULES
from .fields import PipelineFields

# dtype name -> the torch dtype the stages compute in
DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}


@dataclass
class PipelineConfig(PipelineFields, ModelParts, DataParts, OptimParts):
    """One benchmark run (every field and its meaning: :class:`.fields.PipelineFields`), with
    :meth:`validate` checking them all."""

    def validate(self) -> "PipelineConfig":
        if self.schedule not in RUN_SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}; valid: {', '.join(RUN_SCHEDULES)}")
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
        if self.cut_at_blocks is not None and (not isinstance(self.cut_at_blocks, (list, tuple)) or any(
                not isinstance(b, int) or b < 1 for b in self.cut_at_blocks)
                or list(self.cut_at_blocks) != sorted(set(self.cut_at_blocks))):
            raise ValueError(f"cut_at_blocks must list increasing block indices >= 1, got {self.cut_at_blocks!r}")
        if self.dp > 1 and self.schedule == "ddp":
            raise ValueError(f"dp={self.dp} replicates pipeline stages; schedule 'ddp' is already data "
                             "parallel over all processes: use dp=1 with it")
        if self.schedule == "ddp" and self.micro_batches % self.stages:
            raise ValueError(f"schedule 'ddp' splits the micro_batches of a step over the {self.stages} "
                             f"processes: micro_batches={self.micro_batches} must be a multiple of stages")
        check_cut(self.cut, CUTS)
        if self.input not in (None, "image", "text"):
            raise ValueError(f"unknown input {self.input!r}; valid: image, text")
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
