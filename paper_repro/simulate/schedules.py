"""Which compute actions each processor runs, in which order, under every simulated schedule.

The pipelined-backprop orders are **not re-derived here**; they come from
``torch.distributed.pipelining`` itself, on mock stages, without processes:

* GPipe and 1F1B (one stage per processor) run their own loop (``_step_microbatches``), not
  their ``pipeline_order`` table (which, for 1F1B in torch 2.14, starts one forward later than
  the loop and skips micro-batch 0 on the last rank). So the loop itself is run on a mock
  stage whose ``forward_one_chunk`` / ``backward_one_chunk`` record the order they are called in.
* The interleaved, zero-bubble and V schedules execute their ``pipeline_order``, read the way
  torch's schedule visualizer reads it (``get_schedule_ops``).

Each action is ``(stage, kind, micro_batch)`` with ``kind`` one of

* ``F``: forward of one micro-batch through one stage,
* ``B``: its whole backward (input gradient and weight gradient),
* ``I``: the input-gradient half of the backward (zero-bubble schedules),
* ``W``: the weight-gradient half, which may run later,

and ``stage`` a *virtual* stage: interleaved and V-shaped schedules give each processor several
pieces of the net (``stages_per_rank``), so the net is cut into ``ranks x stages_per_rank``
pieces. ``DualPipeV``'s overlapped forward+backward pairs are split into the two actions, run
one after the other.

The local schedule is not a torch schedule: every stage runs forward and backward of its own
modules on each micro-batch as soon as the micro-batch arrives (see :mod:`.engine`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe
from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops
from torch.distributed.pipelining.schedules import _ComputationType

from ..names import LOCAL_SCHEDULES, RECOMPUTE, schedule_name
from ..names import SIMULATED_SCHEDULES as SCHEDULES

# simulated schedule -> torch.distributed.pipelining schedule class name
TORCH_SCHEDULES = {
    "gpipe": "GPipe",
    "1f1b": "1F1B",
    "interleaved-1f1b": "Interleaved1F1B",
    "interleaved-zb": "InterleavedZeroBubble",
    "zbv": "ZBVZeroBubble",
    "dualpipev": "DualPipeV",
}

_KINDS = {_ComputationType.FORWARD: "F", _ComputationType.FULL_BACKWARD: "B",
          _ComputationType.BACKWARD_INPUT: "I", _ComputationType.BACKWARD_WEIGHT: "W"}


@dataclass(frozen=True)
class Action:
    stage: int          # virtual stage (piece of the net)
    kind: str           # F | B | I | W
    micro_batch: int


@dataclass
class Order:
    """The action list of every processor for one step, and which processor holds each piece."""
    schedule: str
    ranks: int
    micro_batches: int
    actions: list[list[Action]]     # actions[rank], in execution order
    stage_rank: list[int]           # stage_rank[virtual stage] = processor

    @property
    def num_stages(self) -> int:
        return len(self.stage_rank)

    @property
    def stages_per_rank(self) -> int:
        return self.num_stages // self.ranks


def check_schedule(name: str) -> str:
    """``name`` if it is a simulated schedule (a former spelling: its current name, with a
    warning), else ValueError naming the valid ones."""
    return schedule_name(name, SCHEDULES)


def base_schedule(name: str) -> tuple[str, bool]:
    """(schedule without the recomputation suffix, whether it recomputes)."""
    name = check_schedule(name)
    if name.endswith(RECOMPUTE):
        return name[: -len(RECOMPUTE)], True
    return name, False


def stages_per_rank(name: str) -> int:
    """Pieces of the net per processor: 1 for GPipe, 1F1B and local, 2 for interleaved and V schedules."""
    base, _ = base_schedule(name)
    return 1 if base in (*LOCAL_SCHEDULES, "gpipe", "1f1b") else 2


@functools.lru_cache(maxsize=256)
def torch_order(name: str, ranks: int, micro_batches: int) -> Order:
    """The per-rank action lists torch.distributed.pipelining generates for ``name`` (cached:
    treat the result as read-only)."""
    base, _ = base_schedule(name)
    if base in LOCAL_SCHEDULES:
        raise ValueError(f"schedule {name!r} is not a torch.distributed.pipelining schedule")
    if ranks < 2:
        raise ValueError(f"schedule {name!r} needs at least 2 stages, got stages={ranks}")
    if base in _LOOP_SCHEDULES:
        if base == "1f1b" and micro_batches < ranks:
            raise ValueError(f"schedule {name!r} needs micro_batches >= stages, got micro_batches="
                             f"{micro_batches} < stages={ranks}")
        actions = [_record_loop(_LOOP_SCHEDULES[base], r, ranks, micro_batches) for r in range(ranks)]
        return Order(name, ranks, micro_batches, actions, list(range(ranks)))
    per_rank = stages_per_rank(name)
    try:
        raw = get_schedule_ops(TORCH_SCHEDULES[base], ranks, micro_batches,
                               num_stages_per_rank=per_rank)
    except (ValueError, AssertionError, RuntimeError) as err:
        raise ValueError(f"torch.distributed.pipelining refuses schedule {name!r} with stages={ranks}, "
                         f"micro_batches={micro_batches}: {err}") from None
    actions: list[list[Action]] = []
    stage_rank = [-1] * (ranks * per_rank)
    for rank, ops in enumerate(raw):
        mine = []
        for op in ops:
            for sub in (op.sub_actions or (op,)) if op is not None else ():
                kind = _KINDS.get(sub.computation_type)
                if kind is None:        # REDUCE_GRAD and the like: no compute of their own here
                    continue
                mine.append(Action(sub.stage_index, kind, sub.microbatch_index))
                stage_rank[sub.stage_index] = rank
        actions.append(mine)
    if -1 in stage_rank:
        raise RuntimeError(f"schedule {name!r}: stage {stage_rank.index(-1)} has no actions")
    return Order(name, ranks, micro_batches, actions, stage_rank)


_LOOP_SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


class _RecordingStage:
    """Stands in for a ``PipelineStage``: records the compute calls, sends and receives nothing,
    and answers every other call with ``None``."""

    def __init__(self, rank: int, ranks: int):
        self.group_rank, self.group_size, self.submod = rank, ranks, None
        self.num_stages, self.stage_index = ranks, rank
        self.is_first, self.is_last = rank == 0, rank == ranks - 1
        self.log: list[Action] = []

    def forward_one_chunk(self, i, *args, **kwargs):
        self.log.append(Action(self.stage_index, "F", i))

    def backward_one_chunk(self, i, *args, **kwargs):
        self.log.append(Action(self.stage_index, "B", i))

    def get_fwd_recv_ops(self, *args):
        return []

    get_fwd_send_ops = get_bwd_recv_ops = get_bwd_send_ops = get_fwd_recv_ops

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def _record_loop(schedule_cls, rank: int, ranks: int, micro_batches: int) -> list[Action]:
    """The compute calls torch's own ``_step_microbatches`` makes on ``rank``, in order: its loop
    runs on a stand-in stage that records them (no tensors, no messages)."""
    stage = _RecordingStage(rank, ranks)
    schedule = schedule_cls(stage, micro_batches, loss_fn=lambda out, target: 0)
    schedule._initialize_stage = lambda *args, **kwargs: None     # shape inference needs real tensors
    last = rank == ranks - 1
    schedule._step_microbatches([()] * micro_batches, [{}] * micro_batches,
                                [None] * micro_batches if last else None, [] if last else None)
    return stage.log


def in_flight_rank_peak(order: Order, stage_bytes: list[float]) -> list[float]:
    """Per rank: the most bytes held at one moment when a micro-batch in flight on virtual stage
    ``v`` holds ``stage_bytes[v]`` (the sum over the rank's pieces, moment by moment)."""
    result = []
    for ops in order.actions:
        held: set = set()
        current = peak = 0.0
        for a in ops:
            key = (a.stage, a.micro_batch)
            if a.kind == "F" and key not in held:
                held.add(key)
                current += stage_bytes[a.stage]
                peak = max(peak, current)
            elif a.kind in ("B", "W") and key in held:
                held.discard(key)
                current -= stage_bytes[a.stage]
        result.append(peak)
    return result
