"""Data parallelism over the same processes: the baseline that needs no pipeline.

``DistributedDataParallel`` over every process, each holding the whole net, the
``micro_batches`` of a step split between them (gradient accumulation with ``no_sync``). A
DDP communication hook counts the gradient bytes handed to all-reduce.
"""
from __future__ import annotations

import contextlib
import inspect
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..build import make_optimizer, optimizer_impl
from . import comm
from .config import PipelineConfig
from .inputs import to_device
from .memory import SavedTensorMeter, peak_memory, state_bytes
from .replicas import count_allreduce
from .stopwatch import Window


def no_buffer_sync() -> dict:
    """DDP's keyword for "do not broadcast buffers in forward" (its name changed across torch
    versions): that traffic would not be counted, and it would change BatchNorm statistics."""
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}


def run_ddp(ctx: comm.Context, cfg: PipelineConfig, learner, plan, infos, spec, batches, session=None) -> dict:
    """Run this process's replica. In a training run ``session`` (:class:`.training.Session`)
    takes every step's loss (this replica's mean over its micro-batches) and may stop the run."""
    B, M, S = cfg.micro_batch, cfg.micro_batches, ctx.world
    per_rank = M // S
    net = learner.net.to(ctx.device)
    params = list(net.parameters())
    ddp = DistributedDataParallel(net, device_ids=[ctx.local_rank] if ctx.device.type == "cuda" else None,
                                  gradient_as_bucket_view=True, **no_buffer_sync())
    payload = count_allreduce(ddp, dist.group.WORLD)
    opt = make_optimizer(cfg, params)
    first = session.begin(learner, opt) // M if session is not None else 0
    on_cpu = ctx.device.type == "cpu"
    meter = SavedTensorMeter(exclude=params) if on_cpu else contextlib.nullcontext()
    busy = []
    window = Window(cfg.warmup_steps)
    for step in range(first, cfg.warmup_steps + cfg.steps):
        t0 = time.perf_counter()
        step_losses = []
        for j in range(per_rank):
            x, y = to_device(next(batches), ctx.device)
            sync = contextlib.nullcontext() if j == per_rank - 1 else ddp.no_sync()
            with sync, meter:
                loss = net.loss(ddp(x), y)
                step_losses.append(loss.detach())
                (loss / per_rank).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        comm.settle(ctx.device)
        t1 = time.perf_counter()
        busy.append(t1 - t0)
        window.mark()
        ctx.progress(M)
        if session is not None and session.after_update(torch.stack(step_losses).mean().reshape(1)):
            break
    stats = window.stats(busy)
    stats.update({
        "samples_timed": cfg.steps * M * B,
        "allreduce_payload_bytes": payload["bytes"],
        "sent_bytes": {"allreduce_ring_estimate": payload["bytes"] * 2 * (S - 1) / S},
        "received_bytes": {},
        "memory": peak_memory(ctx.device, getattr(meter, "peak", 0), 0, state_bytes(params, opt)),
        "optimizer_impl": optimizer_impl(opt),
    })
    return stats
