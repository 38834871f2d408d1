"""Pipelined backprop on the same devices, with PyTorch's own engine ``torch.distributed.pipelining``.

One stage per process (``ScheduleGPipe``, ``Schedule1F1B``): a ``PipelineStage`` holding the
same blocks as the local pipeline's stage (the last stage also the net's own head). Two stages
per process (``ScheduleInterleaved1F1B`` and ``ScheduleInterleavedZeroBubble``: stages ``r``
and ``r + S`` on process ``r``; ``ScheduleZBVZeroBubble`` and ``ScheduleDualPipeV``: stages
``r`` and ``2S - 1 - r``): the blocks cut into ``2S`` stages by measured time
(:func:`.timing.block_cut`). The zero-bubble schedules split each backward into its input
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
from .messages import Receiver, Sender, nbytes
from ..names import MULTI_STAGE
from .config import DTYPES, PipelineConfig
from .inputs import label_info, to_device
from .memory import SavedTensorMeter, peak_memory, saved_bytes_of, state_bytes
from .replicas import Placement, average_gradients
from .cut import stage_blocks, stage_indices
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
        self.sent["activations"] += sum(nbytes(op.tensor) for op in ops)
        return ops

    def get_bwd_send_ops(self, bwd_chunk_id):
        ops = super().get_bwd_send_ops(bwd_chunk_id)
        self.sent["gradients"] += sum(nbytes(op.tensor) for op in ops)
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


class PipelinedStage:
    """This process's stage(s) of a ``torch.distributed.pipelining`` schedule: its blocks (the last
    stage also the net's head) as pipelining stages, their optimizer, the labels' own messages
    from the first stage to the last, and the clocks. :func:`run_pipelined_backprop` drives it."""

    def __init__(self, ctx: comm.Context, cfg: PipelineConfig, learner, plan, infos, spec, where: Placement):
        self.ctx, self.cfg, self.where = ctx, cfg, where
        s, S, M = where.stage, plan.stages, cfg.micro_batches
        net = self.net = learner.net
        self.blocks = stage_blocks(cfg, plan, len(net.blocks))
        total = len(self.blocks)
        self.mine = stage_indices(cfg.schedule, s, S)
        recompute = cfg.schedule.endswith("-recompute")
        self.modules = [StageModule([net.blocks[b] for b in self.blocks[v]], net.head if v == total - 1 else None,
                                    recompute=recompute).to(ctx.device) for v in self.mine]
        self.params = [p for m in self.modules for p in m.parameters()]
        self.opt = make_optimizer(cfg, self.params)
        self.watch = Stopwatch(ctx.device)
        self.stages = [CountingStage(m, v, total, ctx.device, group=where.pipeline_group, watch=self.watch)
                       for m, v in zip(self.modules, self.mine)]
        name = cfg.schedule.removesuffix("-recompute")
        self.schedule = SCHEDULE_CLASSES[name](self.stages if cfg.schedule in MULTI_STAGE else self.stages[0], M,
                                               loss_fn=self._loss)
        self.has_first, self.has_last = 0 in self.mine, total - 1 in self.mine
        self.last_rank = next(r for r in range(S) if total - 1 in stage_indices(cfg.schedule, r, S))
        self.labels = label_info(spec)
        self.labels_out = self.labels_in = None
        self.extra_saved = 0
        if recompute and ctx.device.type == "cpu":
            for m, v in zip(self.modules, self.mine):
                info = infos[self.blocks[v - 1][-1]] if v > 0 else None
                self.extra_saved += _recompute_saved_bytes(cfg, m, v == 0, info, spec, ctx.device, self.params)
        self.meter = (SavedTensorMeter(exclude=self.params) if ctx.device.type == "cpu"
                      else contextlib.nullcontext())
        self.phases = dict.fromkeys(("data", "forward_backward", "optimizer", "gradient_allreduce"), 0.0)
        self.split = {"forward": 0.0, "backward": 0.0}      # forward_backward's two parts (loss: forward)
        self.busy, self.allreduce_bytes = [], 0
        self.window = Window(cfg.warmup_steps)

    def _loss(self, logits, y):
        with self.watch.phase("loss"):
            return self.net.loss(logits, y)

    def connect(self, first: int) -> None:
        """The labels' messages from the first stage to the last, for steps ``first`` onwards."""
        cfg, ctx, (lshape, ldtype) = self.cfg, self.ctx, self.labels
        if self.has_first and not self.has_last:
            self.labels_out = Sender(self.where.rank_of(self.last_rank), 2, tag_base=LABEL_TAG,
                                          poll_timeout=ctx.poll_timeout)
        if self.has_last and not self.has_first:
            specs = {"labels": ((cfg.micro_batches * cfg.micro_batch, *lshape), ldtype)}
            self.labels_in = Receiver(self.where.rank_of(0), specs, ctx.device,
                                           cfg.warmup_steps + cfg.steps - first, tag_base=LABEL_TAG,
                                           prepost=False, poll_timeout=ctx.poll_timeout)

    def step(self, batches, counted: bool) -> list | None:
        """One step of the schedule, the replicas' gradients averaged and the optimizer stepped;
        the last stage's micro-batch losses (None elsewhere). ``counted``: past the warm-up."""
        cfg, watch, M = self.cfg, self.watch, self.cfg.micro_batches
        with self.meter:
            args, kwargs = [], {}
            if self.has_first:
                with watch.phase("data"):
                    x, y = _step_batches(cfg, batches, self.ctx.device, M)
                if self.labels_out is not None:
                    self.labels_out.send({"labels": y})
                args = [x]
            if self.has_last:
                kwargs = {"target": y if self.has_first else self.labels_in.recv()["labels"], "losses": []}
            self.schedule.step(*args, **kwargs)
        with watch.phase("gradient_allreduce"):
            self.allreduce_bytes += average_gradients(self.params, self.where)
        with watch.phase("optimizer"):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        comm.settle(self.ctx.device)                    # on a GPU, the step's work has finished
        w = watch.read("data", "forward", "backward", "loss", "optimizer", "gradient_allreduce")
        t = {"data": w["data"], "forward_backward": w["forward"] + w["backward"] + w["loss"],
             "optimizer": w["optimizer"], "gradient_allreduce": w["gradient_allreduce"]}
        self.busy.append(t["data"] + t["forward_backward"] + t["optimizer"])
        self.window.mark()
        if counted:
            for k, v in t.items():
                self.phases[k] += v
            self.split["forward"] += w["forward"] + w["loss"]
            self.split["backward"] += w["backward"]
        self.ctx.progress(M)
        return kwargs.get("losses")

    def stats(self) -> dict:
        if self.labels_out is not None:
            self.labels_out.flush()
        cfg = self.cfg
        stats = self.window.stats(self.busy)
        sent = {k: sum(st.sent[k] for st in self.stages) for k in ("activations", "gradients")}
        if self.labels_out is not None:
            sent["labels"] = self.labels_out.bytes["labels"]
        stats.update({
            "samples_timed": cfg.steps * cfg.micro_batches * cfg.micro_batch,
            "phases_s": self.phases,
            "phase_clock": self.watch.clock,
            "compute_split_s": self.split,
            "sent_bytes": sent,
            "received_bytes": dict(self.labels_in.bytes) if self.labels_in else {},
            "stage_indices": self.mine,
            "stage_blocks": [self.blocks[v] for v in self.mine],
            "memory": peak_memory(self.ctx.device, getattr(self.meter, "peak", 0), self.extra_saved,
                                  state_bytes(self.params, self.opt)),
            "recompute_saved_bytes": self.extra_saved,
            "replica_allreduce_bytes": self.allreduce_bytes,
            "optimizer_impl": optimizer_impl(self.opt),
        })
        return stats


def run_pipelined_backprop(ctx: comm.Context, cfg: PipelineConfig, learner, plan, infos, spec, batches,
                           where: Placement, session=None) -> dict:
    """Run this process's stage(s) of a ``torch.distributed.pipelining`` schedule; its measurements.
    In a training run ``session`` (:class:`.training.Session`) takes every step's loss (the last
    stage's mean over the micro-batches) and may stop the run after any step."""
    stage = PipelinedStage(ctx, cfg, learner, plan, infos, spec, where)
    first = session.begin(learner, stage.opt) // cfg.micro_batches if session is not None else 0
    stage.connect(first)
    for step in range(first, cfg.warmup_steps + cfg.steps):
        losses = stage.step(batches, counted=step >= cfg.warmup_steps)
        if session is not None:
            step_loss = torch.stack(losses).mean().reshape(1) if losses is not None else None
            if session.after_update(step_loss):
                break
    return stage.stats()
