"""Where a process sits when every pipeline stage runs as ``dp`` replicas.

``stages * dp`` processes; rank ``replica * stages + stage``. The processes of one replica
form a *pipeline group* (they pass activations along, like a ``dp = 1`` run); the replicas
of one stage form a *stage group*, over which they average their gradients before every
optimizer step (``DistributedDataParallel`` with ``process_group`` = the stage group, or
:func:`average_gradients` where the stage is driven by ``torch.distributed.pipelining``).
Under torchrun on several nodes the ranks come from its rendezvous, so the replicas of a
stage may sit on different machines.
"""
from __future__ import annotations

import datetime
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from .messages import nbytes


@dataclass
class Placement:
    """This process's stage and replica, and the groups it belongs to (None when ``dp = 1``)."""
    stage: int
    replica: int
    stages: int
    dp: int
    pipeline_group: dist.ProcessGroup | None = None
    stage_group: dist.ProcessGroup | None = None

    def rank_of(self, stage: int) -> int:
        """Global rank of ``stage`` in this process's replica."""
        return self.replica * self.stages + stage


def place(rank: int, world: int, stages: int, dp: int, timeout: float) -> Placement:
    """This process's placement; creates every group, each collective on it bounded by
    ``timeout`` seconds (every process must call this, in the same order, once per launch)."""
    if stages * dp != world:
        raise ValueError(f"stages={stages} x dp={dp} = {stages * dp} processes, but {world} were started")
    where = Placement(rank % stages, rank // stages, stages, dp)
    if dp == 1:
        return where
    td = datetime.timedelta(seconds=timeout)
    for d in range(dp):
        group = dist.new_group([d * stages + s for s in range(stages)], timeout=td)
        if d == where.replica:
            where.pipeline_group = group
    for s in range(stages):
        group = dist.new_group([d * stages + s for d in range(dp)], timeout=td)
        if s == where.stage:
            where.stage_group = group
    if dist.get_backend() == "nccl":   # NCCL builds a group's communicator at its first use by every
        for group in (where.pipeline_group, where.stage_group):   # member: build them now, all in one order
            dist.barrier(group=group, device_ids=[torch.cuda.current_device()])
    return where


def average_gradients(params: list[torch.Tensor], where: Placement) -> int:
    """Average the gradients of ``params`` over the replicas of this stage (one flat
    all-reduce); returns the bytes handed to it (0 when ``dp = 1``)."""
    if where.dp == 1:
        return 0
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=where.stage_group)
    flat /= where.dp
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
    return flat.numel() * flat.element_size()


def count_allreduce(ddp, group) -> dict:
    """Make ``ddp`` (a ``DistributedDataParallel``) average its gradient buckets over ``group``
    as it does by default, counting the bytes it hands to the all-reduce in the returned
    ``{"bytes": ...}``."""
    payload = {"bytes": 0}

    def counting_allreduce(state, bucket):
        state["bytes"] += nbytes(bucket.buffer())
        return default_hooks.allreduce_hook(group, bucket)

    ddp.register_comm_hook(payload, counting_allreduce)
    return payload
