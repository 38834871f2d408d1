"""How a learner is cut into stages, and what crosses each cut.

A *stage* is a contiguous run of local modules ``[m0, m1)`` of a :class:`~paper_repro.methods.Learner`
(with their heads); it receives the output of block ``learner.input_block(m0)`` and sends the
output of block ``learner.input_block(m1)``. The pipelined-backprop baselines put the *same
blocks* on the same stages (only the last stage has a head, the net's own), so every schedule
moves the same boundary tensors; local parallelism sends them forward only, pipelined backprop
also sends their gradients back.

Everything here runs in one process: :func:`plan_stages` and :func:`boundary_info` are what
``--comm-only`` uses for models too large to train on the machine at hand.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode

from .. import methods
from ..names import MULTI_STAGE
from .config import PipelineConfig


@dataclass
class BlockInfo:
    """Per-sample facts of one block's output (batch dimension removed)."""
    shape: tuple
    dtype: torch.dtype
    flops: int              # forward FLOPs per sample of the block
    head_flops: int = 0     # forward FLOPs per sample of an auxiliary head on this block

    @property
    def bytes(self) -> int:
        return math.prod(self.shape) * itemsize(self.dtype)


def itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@torch.no_grad()
def boundary_info(learner: methods.Learner, spec, dtype: torch.dtype = torch.float32) -> list[BlockInfo]:
    """Output shape, dtype and forward FLOPs of every block for one sample (eval mode, no state
    changes), plus the FLOPs of the learner's head on that block where it has one."""
    net = learner.net
    was_training = net.training
    net.eval()
    if spec.kind == "text":
        h = torch.zeros(1, spec.seq_len, dtype=torch.long)
    else:
        h = torch.zeros(1, *spec.input_shape, dtype=dtype)
    head_of = {blocks[-1]: learner.heads[m] for m, blocks in enumerate(learner.module_blocks)}
    infos = []
    try:
        for b, block in enumerate(net.blocks):
            with FlopCounterMode(display=False) as fc:
                h = block(h)
            head_flops = 0
            if b in head_of:
                with FlopCounterMode(display=False) as fh:
                    head_of[b](h)
                head_flops = fh.get_total_flops()
            infos.append(BlockInfo(tuple(h.shape[1:]), h.dtype, fc.get_total_flops(), head_flops))
    finally:
        net.train(was_training)
    return infos


@dataclass
class StagePlan:
    """Which local modules and blocks each stage holds, and which block's output it sends."""
    modules: list[list[int]]
    blocks: list[list[int]]
    send_blocks: list[int]          # stage s sends the output of block send_blocks[s] (s < S-1)

    @property
    def stages(self) -> int:
        return len(self.modules)

    def to_dict(self) -> dict:
        return {"modules": self.modules, "blocks": self.blocks, "send_blocks": self.send_blocks}


def balanced_cut(costs: list[float], stages: int, send: list[float] | None = None,
                   first: list[float] | None = None) -> list[int]:
    """First item of stages 1..S-1 of the contiguous partition of ``costs`` with the smallest
    maximum stage cost (dynamic programming; ties go to the earliest cut).

    ``send[i]`` (optional) is added to a stage whose last item is ``i`` and that is not the
    last stage: what handing item ``i``'s output to the next stage costs. ``first[i]``
    (optional, may be negative) is added to a stage whose first item is ``i``: e.g. the input
    gradient that the first block of a local module does not compute."""
    n = len(costs)
    if not 1 <= stages <= n:
        raise ValueError(f"cannot cut {n} items into stages={stages}; use 1..{n} stages")
    for name, extra in (("send", send), ("first", first)):
        if extra is not None and len(extra) != n:
            raise ValueError(f"{name} must have one cost per item ({n}), got {len(extra)}")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for s in range(1, stages + 1):
        for i in range(s, n + 1):
            out = send[i - 1] if send is not None and s < stages else 0.0
            for j in range(s - 1, i):
                head = first[j] if first is not None else 0.0
                value = max(best[s - 1][j], prefix[i] - prefix[j] + out + head)
                if value < best[s][i]:
                    best[s][i], cut[s][i] = value, j
    starts, i = [], n
    for s in range(stages, 0, -1):
        i = cut[s][i]
        starts.append(i)
    return sorted(starts)[1:]


def plan_stages(learner: methods.Learner, stages: int, cut_at: list[int] | None = None,
                infos: list[BlockInfo] | None = None) -> StagePlan:
    """Cut the learner's local modules into ``stages`` contiguous groups.

    ``cut_at`` gives the first module of stages 1..S-1; without it the cut balances forward
    FLOPs (blocks + heads, from ``infos``; the measured-time cut is :func:`.timing.time_cut`). A block shared by two stages (overlapping windows
    across a cut) would need a gradient message back across the cut: refused with ValueError.
    """
    n = learner.num_modules
    if stages > n:
        raise ValueError(f"stages={stages} is more than the {n} local modules of method "
                         f"{learner.spec!r}; use at most {n} stages or a method with more modules")
    if cut_at is None:
        if infos is None:
            starts = [round(s * n / stages) for s in range(1, stages)]
        else:
            costs = [sum(infos[b].flops for b in blocks) + infos[blocks[-1]].head_flops
                     for blocks in learner.module_blocks]
            starts = balanced_cut(costs, stages)
    else:
        starts = [int(v) for v in cut_at]
        if len(starts) != stages - 1 or starts != sorted(set(starts)) or (starts and not 0 < starts[0]) \
                or (starts and starts[-1] >= n):
            raise ValueError(f"cut_at must list {stages - 1} increasing module indices in 1..{n - 1} "
                             f"(the first local module of stages 1..{stages - 1}), got {cut_at!r}")
    bounds = [0, *starts, n]
    modules = [list(range(bounds[s], bounds[s + 1])) for s in range(stages)]
    blocks = [sorted({b for m in mods for b in learner.module_blocks[m]}) for mods in modules]
    for s in range(stages - 1):
        shared = set(blocks[s]) & set(blocks[s + 1])
        if shared:
            b = min(shared)
            raise ValueError(
                f"method {learner.spec!r} shares block {b} between local module {modules[s][-1]} "
                f"(stage {s}) and local module {modules[s + 1][0]} (stage {s + 1}): the window that "
                f"crosses this stage boundary would need a gradient message sent back across it, "
                f"which this pipeline does not support. Use greedy or chunked-K, or run "
                f"{learner.spec!r} in one process (stages=1).")
    send_blocks = [learner.input_block(modules[s + 1][0]) for s in range(stages - 1)]
    return StagePlan(modules, blocks, send_blocks)


def stage_indices(schedule: str, stage: int, stages: int) -> list[int]:
    """The pipeline stages process ``stage`` of ``stages`` holds under ``schedule``."""
    if schedule not in MULTI_STAGE:
        return [stage]
    if schedule.startswith("interleaved"):
        return [stage, stage + stages]
    return [stage, 2 * stages - 1 - stage]


def stage_blocks(cfg: PipelineConfig, plan, num_blocks: int) -> list[list[int]]:
    """Blocks of every pipeline stage: the local pipeline's cut (``plan``) with one stage per
    process, ``cfg.cut_at_blocks`` with two."""
    if cfg.schedule not in MULTI_STAGE:
        return plan.blocks
    bounds = [0, *cfg.cut_at_blocks, num_blocks]
    return [list(range(bounds[v], bounds[v + 1])) for v in range(len(bounds) - 1)]


def stage_boundaries(cfg: PipelineConfig, plan: StagePlan, num_blocks: int) -> list[int]:
    """The blocks whose outputs cross from one process to another under ``cfg.schedule``, in
    pipeline order (with two stages per process, a boundary between two stages of the same
    process moves nothing)."""
    if cfg.schedule not in MULTI_STAGE:
        return list(plan.send_blocks)
    S = cfg.stages
    rank_of = {v: r for r in range(S) for v in stage_indices(cfg.schedule, r, S)}
    blocks = stage_blocks(cfg, plan, num_blocks)
    return [blocks[v][-1] for v in range(2 * S - 1) if rank_of[v] != rank_of[v + 1]]


def boundary_records(plan: StagePlan, infos: list[BlockInfo], micro_batch: int,
                     blocks: list[int] | None = None) -> list[dict]:
    """The tensors at the stage boundaries (``plan.send_blocks``, or the outputs of ``blocks``),
    for one micro-batch: block, shape, dtype, bytes."""
    return [{"after_block": b, "shape": [micro_batch, *infos[b].shape],
             "dtype": str(infos[b].dtype).replace("torch.", ""), "bytes": micro_batch * infos[b].bytes}
            for b in (plan.send_blocks if blocks is None else blocks)]
