"""The local-parallel pipeline: one process per stage, activations forward only.

Stage ``s`` holds local modules ``plan.modules[s]`` with their heads and its own optimizer.
For every micro-batch it takes ``(h, y)`` (stage 0 from the data, the others from stage
``s-1``), runs its modules one after the other -- each module's forward, then at once its
backward, since a module's input is detached -- sends the boundary activation and the labels
to stage ``s+1`` as soon as the forward has produced them (non-blocking, at most
``max_in_flight`` outstanding), and steps its optimizer. No gradient ever comes back, there is
no flush, and a stage never waits for anything downstream except back-pressure.

Because a local module depends on nothing downstream, micro-batch ``i`` on stage ``s`` sees
exactly the parameters and inputs that step ``i`` of the single-process learner sees (batch
size = ``micro_batch``), so after N micro-batches every parameter is the single-process one.

Update rules: with ``update_every = 1`` a stage steps after every micro-batch (``local``);
with ``update_every = M`` it accumulates the gradients of M micro-batches (each loss scaled by
1/M) and steps once (``local/M``): the optimizer semantics of GPipe / 1F1B with M
micro-batches per step, and exactly the single-process learner with gradient accumulation.

With ``dp > 1`` the stage's modules run inside ``DistributedDataParallel`` over the stage's
process group (:mod:`.replicas`): its forward returns the sum of the stage's module losses
(their inputs are detached, so the sum's backward gives each module its own gradient) and the
boundary activation to send; DDP averages the gradients over the replicas during the
backward (``no_sync`` on micro-batches without an optimizer step).
"""
from __future__ import annotations

import contextlib
import time

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from ..build import make_optimizer, optimizer_impl
from . import comm
from .messages import Receiver, Sender
from .config import PipelineConfig
from .inputs import label_info, to_device
from .memory import SavedTensorMeter, peak_memory, state_bytes
from .replicas import Placement, count_allreduce
from .stopwatch import Stopwatch, Window


class StageLosses(nn.Module):
    """The modules ``mods`` of a learner as one module for DDP: ``(x, y)`` -> (sum of their
    losses, their losses detached as one tensor, the output of block ``send_block`` or None)."""

    def __init__(self, learner, mods: list[int], send_block: int | None):
        super().__init__()
        self.learner, self.mods, self.send_block = learner, mods, send_block

    def forward(self, x, y):
        total, out, each = 0.0, None, []
        for run in self.learner.run_modules(x, y, self.mods[0], self.mods[-1] + 1):
            total = total + run.loss
            each.append(run.loss.detach())
            out = run.outputs.get(self.send_block, out)
        return total, torch.stack(each), (out.detach() if out is not None else None)


class LocalStage:
    """This process's stage of the local pipeline: its modules and their optimizer, its messages
    (from stage ``s-1``, to stage ``s+1``) and its clocks. :func:`run_local` drives it."""

    def __init__(self, ctx: comm.Context, cfg: PipelineConfig, learner, plan, infos, spec, where: Placement):
        self.ctx, self.cfg, self.learner, self.infos, self.where = ctx, cfg, learner, infos, where
        s, S = where.stage, plan.stages
        self.stage, self.last = s, s == S - 1
        self.mods = plan.modules[s]
        self.params = list({id(p): p for m in self.mods for p in learner.module_parameters(m)}.values())
        self.opt = make_optimizer(cfg, self.params)
        self.labels = label_info(spec)
        self.in_info = infos[plan.send_blocks[s - 1]] if s > 0 else None
        self.send_block = plan.send_blocks[s] if not self.last else None
        self.receiver = self.sender = None
        self.ddp, self.allreduce = None, {"bytes": 0}
        if cfg.dp > 1:
            self.ddp = DistributedDataParallel(
                StageLosses(learner, self.mods, self.send_block), process_group=where.stage_group,
                device_ids=[ctx.local_rank] if ctx.device.type == "cuda" else None, broadcast_buffers=False,
                gradient_as_bucket_view=True)
            self.allreduce = count_allreduce(self.ddp, where.stage_group)
        self.meter = SavedTensorMeter(exclude=self.params) if ctx.device.type == "cpu" else contextlib.nullcontext()
        self.warm = cfg.warmup_steps * cfg.micro_batches
        self.phases = dict.fromkeys(("data", "forward_backward", "optimizer", "send_blocked", "recv_wait"), 0.0)
        self.waits = dict.fromkeys(("send_blocked", "recv_wait"), 0.0)      # this step's, on the host
        self.busy = []
        self.scale = 1.0 / cfg.update_every
        self.window = Window(cfg.warmup_steps)
        self.watch = Stopwatch(ctx.device)

    def connect(self, first: int) -> None:
        """Post the receives of micro-batches ``first`` to the last; open the sends."""
        cfg, B, (lshape, ldtype) = self.cfg, self.cfg.micro_batch, self.labels
        if self.in_info is not None:
            specs = {"activations": ((B, *self.in_info.shape), self.in_info.dtype), "labels": ((B, *lshape), ldtype)}
            self.receiver = Receiver(self.where.rank_of(self.stage - 1), specs, self.ctx.device,
                                          cfg.total_micro_batches - first, poll_timeout=self.ctx.poll_timeout)
        if not self.last:
            self.sender = Sender(self.where.rank_of(self.stage + 1), cfg.max_in_flight,
                                      poll_timeout=self.ctx.poll_timeout)

    def take(self, batches) -> tuple:
        """The next micro-batch: from the data (stage 0) or from the previous stage."""
        if self.receiver is None:
            with self.watch.phase("data"):
                return to_device(next(batches), self.ctx.device)
        t0 = time.perf_counter()
        msg = self.receiver.recv()
        self.waits["recv_wait"] += time.perf_counter() - t0
        return msg["activations"], msg["labels"]

    def _send(self, out, y, mark):
        """Send; the forward's span pauses while the host waits for room (that is not compute)."""
        self.watch.stop("forward_backward", mark)
        waited = self.sender.wait_time
        self.sender.make_room()
        self.waits["send_blocked"] += self.sender.wait_time - waited
        mark = self.watch.start()
        self.sender.send({"activations": out, "labels": y})
        return mark

    def forward_backward(self, x, y, stepping: bool) -> torch.Tensor:
        """Each module's forward, its output sent on as soon as it exists, and its backward; the
        modules' losses (detached, one tensor)."""
        scaled = self.cfg.update_every > 1
        mark = self.watch.start()
        with self.meter:
            if self.ddp is not None:
                with contextlib.nullcontext() if stepping else self.ddp.no_sync():
                    total_loss, each, out = self.ddp(x, y)
                    if self.sender is not None:
                        mark = self._send(out, y, mark)
                    (total_loss * self.scale if scaled else total_loss).backward()
            else:
                each = []
                for run in self.learner.run_modules(x, y, self.mods[0], self.mods[-1] + 1):
                    each.append(run.loss.detach())
                    if self.sender is not None and self.send_block in run.outputs:
                        mark = self._send(run.outputs[self.send_block], y, mark)
                    (run.loss * self.scale if scaled else run.loss).backward()
                each = torch.stack(each)
        self.watch.stop("forward_backward", mark)
        return each

    def step_optimizer(self) -> None:
        with self.watch.phase("optimizer"):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)

    def end_step(self, i: int) -> None:
        """A step ends at micro-batch ``i``: on a GPU once its work has finished; its phases are
        added up (after the warm-up) and the launcher's progress moves."""
        comm.settle(self.ctx.device)
        t = {**self.watch.read("data", "forward_backward", "optimizer"), **self.waits}
        self.busy.append(t["data"] + t["forward_backward"] + t["optimizer"])
        self.window.mark()
        if i >= self.warm:
            for k, v in t.items():
                self.phases[k] += v
        self.waits.update(dict.fromkeys(self.waits, 0.0))
        self.ctx.progress(self.cfg.micro_batches)

    def flush(self) -> None:
        if self.sender is not None:
            self.sender.flush()

    def drain(self) -> None:
        """A run that stops before its last micro-batch: the next stage has posted the receive of a
        micro-batch that will not come, so it gets one (zeros) to take; this stage takes the one
        it has posted itself."""
        if self.sender is not None:
            B, (lshape, ldtype), info = self.cfg.micro_batch, self.labels, self.infos[self.send_block]
            device = self.ctx.device
            self.sender.send({"activations": torch.zeros((B, *info.shape), dtype=info.dtype, device=device),
                              "labels": torch.zeros((B, *lshape), dtype=ldtype, device=device)})
        if self.receiver is not None:
            self.receiver.drain()

    def stats(self, last_loss: torch.Tensor) -> dict:
        stats = self.window.stats(self.busy)
        stats.update({
            "samples_timed": (self.cfg.total_micro_batches - self.warm) * self.cfg.micro_batch,
            "phases_s": self.phases,
            "phase_clock": self.watch.clock,
            "sent_bytes": dict(self.sender.bytes) if self.sender else {},
            "received_bytes": dict(self.receiver.bytes) if self.receiver else {},
            "replica_allreduce_bytes": self.allreduce["bytes"],     # DDP's, overlapped with the backward
            "memory": peak_memory(self.ctx.device, getattr(self.meter, "peak", 0), 0,
                                  state_bytes(self.params, self.opt)),
            "last_loss": float(last_loss),
            "optimizer_impl": optimizer_impl(self.opt),
        })
        return stats


def run_local(ctx: comm.Context, cfg: PipelineConfig, learner, plan, infos, spec, batches,
              where: Placement, session=None) -> dict:
    """Run the local pipeline's stage of this process; its measurements. In a training run
    ``session`` (:class:`.training.Session`) takes every update's losses (their means over the
    update's micro-batches) and may stop the run early: every stage then stops after the same
    micro-batch."""
    stage = LocalStage(ctx, cfg, learner, plan, infos, spec, where)
    first = session.begin(learner, stage.opt) if session is not None else 0
    stage.connect(first)
    total = cfg.total_micro_batches
    last, update, stopped = None, [], None   # update: this update's module losses, a tensor per micro-batch
    for i in range(first, total):
        x, y = stage.take(batches)
        stepping = (i + 1) % cfg.update_every == 0
        each = stage.forward_backward(x, y, stepping)
        last = each[-1]
        update.append(each)
        if stepping:
            stage.step_optimizer()
            mean = update[0] if len(update) == 1 else torch.stack(update).mean(0)
            if session is not None and session.after_update(mean, stage.flush):
                stopped = i
            update = []
        if (i + 1) % cfg.micro_batches == 0:
            stage.end_step(i)
        if stopped is not None:
            break
    if stopped is not None and stopped < total - 1:
        stage.drain()
    stage.flush()
    return stage.stats(last)
