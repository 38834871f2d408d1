"""Pipelined backprop on the same devices, with PyTorch's own engine ``torch.distributed.pipelining``.

One stage per process (``ScheduleGPipe``, ``Schedule1F1B``): a ``PipelineStage`` holding the
same blocks as the local pipeline's stage (the last stage also the net's own head). Two stages
per process (``ScheduleInterleaved1F1B`` and ``ScheduleInterleavedZeroBubble``: stages ``r``
and ``r + S`` on process ``r``; ``ScheduleZBVZeroBubble`` and ``ScheduleDualPipeV``: stages
``r`` and ``2S - 1 - r``): the blocks cut into ``2S`` stages by measured time
(:func:`.timing.block_split`). The zero-bubble schedules split each backward into its input
part and its weight part and fill the pipeline's bubbles with the latter. With
``-recompute`` every stage module runs under ``torch.utils.checkpoint(use_reentrant=False)``.
One optimizer step per step of ``micro_batches`` micro-batches (gradients averaged); with
``dp > 1`` the replicas of a stage then average their gradients (:mod:`.replicas`).

Bytes are counted where the sends are issued: :class:`CountingStage` adds up the tensors of
the ``P2POp`` lists returned by ``get_fwd_send_ops`` (activations forward) and
``get_bwd_send_ops`` (gradients back), which are exactly the ops the schedules hand to
``batch_isend_irecv``. The one-off shape/metadata exchange on the first step is not counted.
The labels go from stage 0 to the last stage once per step (counted as forward bytes).
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn as nn
from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleDualPipeV, ScheduleGPipe,
                                          ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble,
                                          ScheduleZBVZeroBubble)
from torch.utils.checkpoint import checkpoint

from ..build import make_optimizer, optimizer_impl
from . import comm
from .config import DTYPES, MULTI_STAGE, PipelineConfig
from .inputs import label_info, to_device
from .memory import SavedTensorMeter, peak_memory, saved_bytes_of, state_bytes
from .replicas import Placement, average_gradients
from .split import stage_blocks, stage_indices
from .stopwatch import Stopwatch, Window

LABEL_TAG = 100  # labels travel on their own tag, apart from the pipelining engine's messages
SCHEDULE_CLASSES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B, "interleaved-1f1b": ScheduleInterleaved1F1B,
                    "interleaved-zb": ScheduleInterleavedZeroBubble, "zbv": ScheduleZBVZeroBubble,
                    "dualpipev": ScheduleDualPipeV}


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
    """A ``PipelineStage`` that counts the bytes it sends and times its compute on ``watch``
    (phases ``forward`` and ``backward``; the weight-gradient halves, and the re-forward of
    recomputation, which runs inside the backward, are backward time)."""

    def __init__(self, *args, watch: Stopwatch, **kwargs):
        super().__init__(*args, **kwargs)
        self.sent = {"activations": 0, "gradients": 0}
        self.watch = watch

    def get_fwd_send_ops(self, fwd_chunk_id):
        ops = super().get_fwd_send_ops(fwd_chunk_id)
        self.sent["activations"] += sum(comm.nbytes(op.tensor) for op in ops)
        return ops

    def get_bwd_send_ops(self, bwd_chunk_id):
        ops = super().get_bwd_send_ops(bwd_chunk_id)
        self.sent["gradients"] += sum(comm.nbytes(op.tensor) for op in ops)
        return ops

    def forward_one_chunk(self, *args, **kwargs):
        with self.watch.phase("forward"):
            return super().forward_one_chunk(*args, **kwargs)

    def backward_one_chunk(self, *args, **kwargs):
        with self.watch.phase("backward"):
            return super().backward_one_chunk(*args, **kwargs)

    def backward_weight_one_chunk(self, *args, **kwargs):
        with self.watch.phase("backward"):
            return super().backward_weight_one_chunk(*args, **kwargs)


def _step_batches(cfg: PipelineConfig, batches, device, count: int):
    xs, ys = zip(*(next(batches) for _ in range(count)))
    return to_device((torch.cat(xs), torch.cat(ys)), device)


def _recompute_saved_bytes(cfg, module: StageModule, first: bool, info, spec, device, params) -> int:
    """Bytes one micro-batch's recomputation keeps alive inside ``module`` (checkpoint hides
    them from outer hooks, so they are measured once here)."""
    B = cfg.micro_batch
    if first:
        dtype = torch.long if spec.kind == "text" else DTYPES[cfg.dtype]
        example = torch.zeros(B, *spec.input_shape, dtype=dtype, device=device)
    else:
        example = torch.zeros(B, *info.shape, dtype=info.dtype, device=device, requires_grad=True)
    # the input itself is excluded: the checkpoint keeps it, so the outer hooks already count it
    return saved_bytes_of(StageModule(list(module.blocks), module.head), example, exclude=[*params, example])


def run_pipelined_backprop(ctx: comm.Context, cfg: PipelineConfig, learner, plan, infos, spec, batches,
                           where: Placement, session=None) -> dict:
    """Run this process's stage(s) of a ``torch.distributed.pipelining`` schedule. In a training
    run ``session`` (:class:`.training.Session`) takes every step's loss (the last stage's
    mean over the micro-batches) and may stop the run after any step."""
    s, S = where.stage, plan.stages
    B, M = cfg.micro_batch, cfg.micro_batches
    net = learner.net
    blocks = stage_blocks(cfg, plan, len(net.blocks))
    total = len(blocks)
    mine = stage_indices(cfg.schedule, s, S)
    recompute = cfg.schedule.endswith("-recompute")
    modules = [StageModule([net.blocks[b] for b in blocks[v]], net.head if v == total - 1 else None,
                           recompute=recompute).to(ctx.device) for v in mine]
    params = [p for m in modules for p in m.parameters()]
    opt = make_optimizer(cfg, params)
    first = session.begin(learner, opt) // M if session is not None else 0
    watch = Stopwatch(ctx.device)
    stages = [CountingStage(m, v, total, ctx.device, group=where.pipeline_group, watch=watch)
              for m, v in zip(modules, mine)]

    def loss_fn(logits, y):
        with watch.phase("loss"):
            return net.loss(logits, y)

    name = cfg.schedule.removesuffix("-recompute")
    schedule = SCHEDULE_CLASSES[name](stages if cfg.schedule in MULTI_STAGE else stages[0], M, loss_fn=loss_fn)
    has_first, has_last = 0 in mine, total - 1 in mine
    last_rank = next(r for r in range(S) if total - 1 in stage_indices(cfg.schedule, r, S))
    lshape, ldtype = label_info(spec)
    labels_out = labels_in = None
    if has_first and not has_last:
        labels_out = comm.Sender(where.rank_of(last_rank), 2, tag_base=LABEL_TAG, poll_timeout=ctx.poll_timeout)
    if has_last and not has_first:
        labels_in = comm.Receiver(where.rank_of(0), {"labels": ((M * B, *lshape), ldtype)}, ctx.device,
                                  cfg.warmup_steps + cfg.steps - first, tag_base=LABEL_TAG, prepost=False,
                                  poll_timeout=ctx.poll_timeout)

    on_cpu = ctx.device.type == "cpu"
    extra_saved = 0
    if recompute and on_cpu:
        for m, v in zip(modules, mine):
            info = infos[blocks[v - 1][-1]] if v > 0 else None
            extra_saved += _recompute_saved_bytes(cfg, m, v == 0, info, spec, ctx.device, params)
    meter = SavedTensorMeter(exclude=params) if on_cpu else contextlib.nullcontext()

    phases = dict.fromkeys(("data", "forward_backward", "optimizer", "gradient_allreduce"), 0.0)
    split = {"forward": 0.0, "backward": 0.0}      # forward_backward's two parts (loss: forward)
    busy = []
    allreduce_bytes = 0
    window = Window(cfg.warmup_steps)
    for step in range(first, cfg.warmup_steps + cfg.steps):
        with meter:
            args, kwargs = [], {}
            if has_first:
                with watch.phase("data"):
                    x, y = _step_batches(cfg, batches, ctx.device, M)
                if labels_out is not None:
                    labels_out.send({"labels": y})
                args = [x]
            if has_last:
                kwargs = {"target": y if has_first else labels_in.recv()["labels"], "losses": []}
            schedule.step(*args, **kwargs)
        with watch.phase("gradient_allreduce"):
            allreduce_bytes += average_gradients(params, where)
        with watch.phase("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        comm.settle(ctx.device)                    # on a GPU, the step's work has finished
        w = watch.read("data", "forward", "backward", "loss", "optimizer", "gradient_allreduce")
        t = {"data": w["data"], "forward_backward": w["forward"] + w["backward"] + w["loss"],
             "optimizer": w["optimizer"], "gradient_allreduce": w["gradient_allreduce"]}
        busy.append(t["data"] + t["forward_backward"] + t["optimizer"])
        window.mark()
        if step >= cfg.warmup_steps:
            for k, v in t.items():
                phases[k] += v
            split["forward"] += w["forward"] + w["loss"]
            split["backward"] += w["backward"]
        ctx.progress(M)
        if session is not None:
            step_loss = torch.stack(kwargs["losses"]).mean().reshape(1) if has_last else None
            if session.after_update(step_loss):
                break
    if labels_out is not None:
        labels_out.flush()

    stats = window.stats(busy)
    sent = {k: sum(st.sent[k] for st in stages) for k in ("activations", "gradients")}
    if labels_out is not None:
        sent["labels"] = labels_out.bytes["labels"]
    stats.update({
        "samples_timed": cfg.steps * M * B,
        "phases_s": phases,
        "phase_clock": watch.clock,
        "compute_split_s": split,
        "sent_bytes": sent,
        "received_bytes": dict(labels_in.bytes) if labels_in else {},
        "stage_indices": mine,
        "stage_blocks": [blocks[v] for v in mine],
        "memory": peak_memory(ctx.device, getattr(meter, "peak", 0), extra_saved, state_bytes(params, opt)),
        "recompute_saved_bytes": extra_saved,
        "replica_allreduce_bytes": allreduce_bytes,
        "optimizer_impl": optimizer_impl(opt),
    })
    return stats
