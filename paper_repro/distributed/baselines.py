"""The baselines on the same stages and devices: pipelined backprop and data parallelism.

Pipelined backprop uses PyTorch's own engine, ``torch.distributed.pipelining``: a
``PipelineStage`` per process holding the same blocks as the local pipeline's stage (the last
stage also the net's own head), driven by ``ScheduleGPipe`` or ``Schedule1F1B``; with
recomputation the stage's module runs under ``torch.utils.checkpoint(use_reentrant=False)``.
One optimizer step per step of ``micro_batches`` micro-batches (gradients averaged).

Bytes are counted where the sends are issued: :class:`CountingStage` adds up the tensors of
the ``P2POp`` lists returned by ``get_fwd_send_ops`` (activations forward) and
``get_bwd_send_ops`` (gradients back), which are exactly the ops the schedules hand to
``batch_isend_irecv``. The one-off shape/metadata exchange on the first step is not counted.
The labels go from stage 0 to the last stage once per step (counted as forward bytes).

Data parallelism: ``DistributedDataParallel`` over the same processes, each holding the whole
net, the ``micro_batches`` of a step split between them (gradient accumulation with
``no_sync``). A DDP communication hook counts the gradient bytes handed to all-reduce.
"""
from __future__ import annotations

import contextlib
import inspect
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.nn.parallel import DistributedDataParallel
from torch.utils.checkpoint import checkpoint

from ..build import make_optimizer, optimizer_impl
from . import comm
from .config import DTYPES, PipelineConfig
from .inputs import label_info
from .local import maybe_fail, timing
from .memory import SavedTensorMeter, peak_memory, saved_bytes_of, state_bytes

LABEL_TAG = 100  # labels travel on their own tag, apart from the pipelining engine's messages


class StageModule(nn.Module):
    """Blocks of one stage, then (last stage) the net's head; optionally recomputed in backward."""

    def __init__(self, blocks: list[nn.Module], head: nn.Module | None = None, recompute: bool = False):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.head = head
        self.recompute = recompute

    def run(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x) if self.head is not None else x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute and torch.is_grad_enabled():
            return checkpoint(self.run, x, use_reentrant=False)
        return self.run(x)


class CountingStage(PipelineStage):
    """A ``PipelineStage`` that counts the bytes it sends and times its compute."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sent = {"activations": 0, "gradients": 0}
        self.compute_s = 0.0

    def get_fwd_send_ops(self, fwd_chunk_id):
        ops = super().get_fwd_send_ops(fwd_chunk_id)
        self.sent["activations"] += sum(comm.nbytes(op.tensor) for op in ops)
        return ops

    def get_bwd_send_ops(self, bwd_chunk_id):
        ops = super().get_bwd_send_ops(bwd_chunk_id)
        self.sent["gradients"] += sum(comm.nbytes(op.tensor) for op in ops)
        return ops

    def forward_one_chunk(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return super().forward_one_chunk(*args, **kwargs)
        finally:
            self.compute_s += time.perf_counter() - t0

    def backward_one_chunk(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return super().backward_one_chunk(*args, **kwargs)
        finally:
            self.compute_s += time.perf_counter() - t0


def _step_batches(cfg: PipelineConfig, batches, device, count: int):
    xs, ys = zip(*(next(batches) for _ in range(count)))
    return torch.cat(xs).to(device), torch.cat(ys).to(device)


def run_pipelined_backprop(ctx: comm.Context, cfg: PipelineConfig, learner, plan, infos, spec, batches) -> dict:
    s, S = ctx.rank, plan.stages
    B, M = cfg.micro_batch, cfg.micro_batches
    net = learner.net
    head = net.head if s == S - 1 else None
    module = StageModule([net.blocks[b] for b in plan.blocks[s]], head,
                         recompute=cfg.schedule == "1f1b-recompute").to(ctx.device)
    params = [p for p in module.parameters()]
    opt = make_optimizer(cfg, params)
    stage = CountingStage(module, s, S, ctx.device)
    timer = {"loss_s": 0.0}

    def loss_fn(logits, y):
        t0 = time.perf_counter()
        loss = net.loss(logits, y)
        timer["loss_s"] += time.perf_counter() - t0
        return loss

    schedule_cls = ScheduleGPipe if cfg.schedule == "gpipe" else Schedule1F1B
    schedule = schedule_cls(stage, M, loss_fn=loss_fn)
    lshape, ldtype = label_info(spec)
    labels_out = comm.Sender(S - 1, 2, tag_base=LABEL_TAG) if s == 0 else None
    labels_in = None
    if s == S - 1:
        labels_in = comm.Receiver(0, {"labels": ((M * B, *lshape), ldtype)}, ctx.device,
                                  cfg.warmup_steps + cfg.steps, tag_base=LABEL_TAG, prepost=False)

    extra_saved = 0
    on_cpu = ctx.device.type == "cpu"
    if cfg.schedule == "1f1b-recompute" and on_cpu:
        # checkpoint hides its recomputation from outer hooks: measure one micro-batch's saved bytes
        if s == 0:
            dtype = torch.long if spec.kind == "text" else DTYPES[cfg.dtype]
            example = torch.zeros(B, *spec.input_shape, dtype=dtype, device=ctx.device)
        else:
            info = infos[plan.send_blocks[s - 1]]
            example = torch.zeros(B, *info.shape, dtype=info.dtype, device=ctx.device, requires_grad=True)
        # the input itself is excluded: the checkpoint keeps it, so the hooks below already count it
        extra_saved = saved_bytes_of(StageModule(list(module.blocks), module.head), example,
                                     exclude=[*params, example])
    meter = SavedTensorMeter(exclude=params) if on_cpu else contextlib.nullcontext()

    phases = dict.fromkeys(("data", "forward_backward", "optimizer"), 0.0)
    busy, done_at = [], []
    loop_start = time.perf_counter()
    for step in range(cfg.warmup_steps + cfg.steps):
        maybe_fail(cfg, s, step * M)
        t0 = time.perf_counter()
        stage.compute_s, timer["loss_s"] = 0.0, 0.0
        data = 0.0
        with meter:
            if s == 0:
                x, y = _step_batches(cfg, batches, ctx.device, M)
                data = time.perf_counter() - t0
                labels_out.send({"labels": y})
                schedule.step(x)
            elif s == S - 1:
                y = labels_in.recv()["labels"]
                losses: list = []
                schedule.step(target=y, losses=losses)
            else:
                schedule.step()
        t1 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if ctx.device.type == "cuda":
            torch.cuda.synchronize(ctx.device)
        t2 = time.perf_counter()
        t = {"data": data, "forward_backward": stage.compute_s + timer["loss_s"], "optimizer": t2 - t1}
        busy.append(sum(t.values()))
        done_at.append(t2)
        if step >= cfg.warmup_steps:
            for k, v in t.items():
                phases[k] += v
        ctx.progress(M)
    if labels_out is not None:
        labels_out.flush()

    warm = cfg.warmup_steps
    stats = timing(busy[warm:], done_at[-1] - (done_at[warm - 1] if warm else loop_start))
    sent = dict(stage.sent)
    if labels_out is not None:
        sent["labels"] = labels_out.bytes["labels"]
    stats.update({
        "samples_timed": cfg.steps * M * B,
        "phases_s": phases,
        "sent_bytes": sent,
        "received_bytes": dict(labels_in.bytes) if labels_in else {},
        "memory": peak_memory(ctx.device, getattr(meter, "peak", 0), extra_saved, state_bytes(params, opt)),
        "recompute_saved_bytes": extra_saved,
        "optimizer_impl": optimizer_impl(opt),
    })
    return stats


def run_ddp(ctx: comm.Context, cfg: PipelineConfig, learner, plan, infos, spec, batches) -> dict:
    B, M, S = cfg.micro_batch, cfg.micro_batches, ctx.world
    per_rank = M // S
    net = learner.net.to(ctx.device)
    params = list(net.parameters())
    # no buffer broadcast in forward: it would be traffic the hook below does not count
    no_buffer_sync = ({"forward_sync_buffers": False}
                      if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
                      else {"broadcast_buffers": False})
    ddp = DistributedDataParallel(net, device_ids=[ctx.local_rank] if ctx.device.type == "cuda" else None,
                                  gradient_as_bucket_view=True, **no_buffer_sync)
    payload = {"bytes": 0}

    def counting_allreduce(state, bucket):
        state["bytes"] += comm.nbytes(bucket.buffer())
        return default_hooks.allreduce_hook(dist.group.WORLD, bucket)

    ddp.register_comm_hook(payload, counting_allreduce)
    opt = make_optimizer(cfg, params)
    on_cpu = ctx.device.type == "cpu"
    meter = SavedTensorMeter(exclude=params) if on_cpu else contextlib.nullcontext()
    busy, done_at = [], []
    loop_start = time.perf_counter()
    for step in range(cfg.warmup_steps + cfg.steps):
        maybe_fail(cfg, ctx.rank, step * M)
        t0 = time.perf_counter()
        for j in range(per_rank):
            x, y = next(batches)
            x, y = x.to(ctx.device), y.to(ctx.device)
            sync = contextlib.nullcontext() if j == per_rank - 1 else ddp.no_sync()
            with sync, meter:
                loss = net.loss(ddp(x), y) / per_rank
                loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if ctx.device.type == "cuda":
            torch.cuda.synchronize(ctx.device)
        t1 = time.perf_counter()
        busy.append(t1 - t0)
        done_at.append(t1)
        ctx.progress(M)
    warm = cfg.warmup_steps
    stats = timing(busy[warm:], done_at[-1] - (done_at[warm - 1] if warm else loop_start))
    stats.update({
        "samples_timed": cfg.steps * M * B,
        "allreduce_payload_bytes": payload["bytes"],
        "sent_bytes": {"allreduce_ring_estimate": payload["bytes"] * 2 * (S - 1) / S},
        "received_bytes": {},
        "memory": peak_memory(ctx.device, getattr(meter, "peak", 0), 0, state_bytes(params, opt)),
        "optimizer_impl": optimizer_impl(opt),
    })
    return stats
