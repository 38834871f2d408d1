"""Planning a pipeline run: which local method, which cut, which blocks each process holds.

:func:`prepare` turns a :class:`.config.PipelineConfig` into a :class:`Plan` (the same in every
process) without changing the config: the measured or computed cut is in the plan, and
:attr:`Plan.config` is the config with that cut written in (``method``, ``cut_at_blocks``), which
is what the stage loops and a re-launch read. The benchmark and the trainer plan through here;
:func:`keep_only` frees what a process does not hold, :func:`write_json` writes records atomically.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import methods
from . import comm
from ..names import MULTI_STAGE
from .config import DTYPES, PipelineConfig
from .inputs import build_learner, data_spec
from .cut import StagePlan, balanced_cut, boundary_info, plan_stages
from .timing import block_cut, chunk_cut, flops_chunk_cut, time_cut


@dataclass
class Plan:
    """A run's plan: ``config`` with its cut resolved, the data (None: synthetic) and its spec,
    the whole learner (every process builds it, then keeps its own part), the boundary infos of
    its blocks and the stage plan (each stage's local modules, blocks and sent block)."""
    config: PipelineConfig
    data: object
    spec: object
    learner: methods.Learner
    infos: list
    stages: StagePlan

    @property
    def method(self) -> str:
        """The local method the cut gives (``chunked@...`` for a measured one-chunk-per-stage cut)."""
        return self.config.local_method

    @property
    def cut_at(self) -> list[int]:
        """First local module of stages 1..S-1."""
        return [mods[0] for mods in self.stages.modules[1:]]

    @property
    def cut_at_blocks(self) -> list[int] | None:
        """First block of stages 1..2S-1 of a two-stages-per-process schedule (else None)."""
        return self.config.cut_at_blocks


def timed_update_every(cfg: PipelineConfig) -> int:
    """The optimizer steps per micro-batch a measured cut assumes: the local schedule's own;
    every other schedule steps once per step, so it is cut like ``local/M``."""
    return cfg.update_every if cfg.schedule == "local" else cfg.micro_batches


def _measured(ctx: comm.Context | None, key: str, measure):
    """``measure()`` here (one process), or on rank 0 shared through the store under ``key``,
    so that every process uses the same measured cut."""
    if ctx is None or ctx.rank == 0:
        value = measure()
        if ctx is not None:
            ctx.store.set(key, json.dumps(value))
        return value
    return json.loads(ctx.store.get(key))


def prepare(cfg: PipelineConfig, ctx: comm.Context | None = None, key: str = "cut") -> Plan:
    """The plan of ``cfg``: the same in every process; ``cfg`` itself is left as it is.

    With ``cut="flops"`` and no method, the local method is ``chunked@...`` cut by forward
    FLOPs (:func:`.timing.flops_chunk_cut`); with ``cut="blocks"`` it is ``chunked-S``
    and the two-stages-per-process cut is ``chunked-2S``'s blocks.
    With ``cut="time"`` and no explicit ``cut_at``, the cut comes from timing: without a
    ``method``, the local method becomes ``chunked@...``, one chunk per stage cut by measured
    time (:func:`.timing.chunk_cut`); a method with more modules than stages is cut by timing
    its modules (:func:`.timing.time_cut`). The pipelined-backprop schedules get the cut of
    ``local/M`` (one optimizer step per step, as they take). A two-stages-per-process schedule
    without ``cut_at_blocks`` also times the blocks (:func:`.timing.block_cut`). In a pipeline
    (``ctx`` given) rank 0 measures and shares the result through the store under ``key``, so
    every process plans the same cut."""
    ds, spec = data_spec(cfg)
    timed = dataclasses.replace(cfg, update_every=timed_update_every(cfg))
    method, blocks = cfg.method, cfg.cut_at_blocks
    if method is None and cfg.cut_at is None and cfg.cut == "time" and cfg.stages > 1:
        starts = _measured(ctx, key + "/chunks", lambda: chunk_cut(timed, spec))
        method = "chunked@" + ",".join(str(b) for b in starts)
    elif method is None and cfg.cut_at is None and cfg.cut == "flops" and cfg.stages > 1:
        method = "chunked@" + ",".join(str(b) for b in flops_chunk_cut(cfg, spec))
    resolved = dataclasses.replace(cfg, method=method)
    learner = build_learner(resolved, spec)
    infos = boundary_info(learner, spec, DTYPES[cfg.dtype])
    cut_at = cfg.cut_at
    if cut_at is None and cfg.cut == "time" and cfg.stages < learner.num_modules:
        cut_at = _measured(ctx, key, lambda: time_cut(learner, spec, timed))
    if cfg.schedule in MULTI_STAGE and blocks is None:
        if cfg.cut == "time":
            blocks = _measured(ctx, key + "/blocks", lambda: block_cut(learner, spec, resolved, 2 * cfg.stages))
        elif cfg.cut == "blocks":
            blocks = [b[0] for b in methods.module_blocks(f"chunked-{2 * cfg.stages}", len(infos))[1:]]
        else:
            flops = [info.flops for info in infos]
            flops[-1] += infos[-1].head_flops  # the net's own head
            blocks = balanced_cut(flops, 2 * cfg.stages)
    stage_plan = plan_stages(learner, cfg.stages, cut_at, None if cfg.cut == "blocks" else infos)
    resolved = dataclasses.replace(resolved, cut_at_blocks=blocks)
    return Plan(resolved, ds, spec, learner, infos, stage_plan)


def keep_only(learner, blocks: list[int], modules: list[int]) -> None:
    """Free every block and head that is not this stage's (shapes were planned beforehand)."""
    keep_heads = set(modules)
    for b in range(len(learner.net.blocks)):
        if b not in blocks:
            learner.net.blocks[b] = torch.nn.Identity()
    for m in range(len(learner.heads)):
        if m not in keep_heads:
            learner.heads[m] = torch.nn.Identity()
    if len(learner.module_blocks) - 1 not in keep_heads:
        learner.net.head = torch.nn.Identity()


def write_json(records, path: str | Path) -> None:
    """``records`` as JSON at ``path``, written to a temporary file and renamed (whole or absent)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(records, indent=1, default=str))
    tmp.replace(out)
