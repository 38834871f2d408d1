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

from ..build import make_optimizer, optimizer_impl  # noqa: F401  (make_optimizer: re-exported)
from . import comm
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


def run_local(ctx: comm.Context, cfg: PipelineConfig, learner, plan, infos, spec, batches,
              where: Placement, session=None) -> dict:
    """Run the local pipeline's stage of this process. In a training run ``session``
    (:class:`.training.Session`) takes every update's losses and may stop the run early;
    every stage then stops after the same micro-batch."""
    s, S = where.stage, plan.stages
    mods = plan.modules[s]
    params = list({id(p): p for m in mods for p in learner.module_parameters(m)}.values())
    opt = make_optimizer(cfg, params)
    first = session.begin(learner, opt) if session is not None else 0
    total = cfg.total_micro_batches
    B = cfg.micro_batch
    lshape, ldtype = label_info(spec)

    receiver = None
    if s > 0:
        info = infos[plan.send_blocks[s - 1]]
        receiver = comm.Receiver(where.rank_of(s - 1), {"activations": ((B, *info.shape), info.dtype),
                                         "labels": ((B, *lshape), ldtype)}, ctx.device, total - first,
                                 poll_timeout=ctx.poll_timeout)
    sender = (comm.Sender(where.rank_of(s + 1), cfg.max_in_flight, poll_timeout=ctx.poll_timeout)
              if s < S - 1 else None)
    send_block = plan.send_blocks[s] if s < S - 1 else None
    ddp, allreduce = None, {"bytes": 0}
    if cfg.dp > 1:
        ddp = DistributedDataParallel(StageLosses(learner, mods, send_block), process_group=where.stage_group,
                                      device_ids=[ctx.local_rank] if ctx.device.type == "cuda" else None,
                                      broadcast_buffers=False, gradient_as_bucket_view=True)
        allreduce = count_allreduce(ddp, where.stage_group)
    meter = SavedTensorMeter(exclude=params) if ctx.device.type == "cpu" else contextlib.nullcontext()

    warm = cfg.warmup_steps * cfg.micro_batches
    phases = dict.fromkeys(("data", "forward_backward", "optimizer", "send_blocked", "recv_wait"), 0.0)
    waits = dict.fromkeys(("send_blocked", "recv_wait"), 0.0)      # this step's, on the host
    busy, losses, update = [], [], []   # update: this update's module losses, one tensor per micro-batch
    scale = 1.0 / cfg.update_every
    window = Window(cfg.warmup_steps)
    watch = Stopwatch(ctx.device)

    def send(out, y, mark):
        """Send; the forward's span pauses while the host waits for room (that is not compute)."""
        watch.stop("forward_backward", mark)
        waited = sender.wait_time
        sender.make_room()
        waits["send_blocked"] += sender.wait_time - waited
        mark = watch.start()
        sender.send({"activations": out, "labels": y})
        return mark

    stopped = None
    for i in range(first, total):
        if receiver is None:
            with watch.phase("data"):
                x, y = to_device(next(batches), ctx.device)
        else:
            t0 = time.perf_counter()
            msg = receiver.recv()
            x, y = msg["activations"], msg["labels"]
            waits["recv_wait"] += time.perf_counter() - t0
        stepping = (i + 1) % cfg.update_every == 0
        mark = watch.start()
        with meter:
            if ddp is not None:
                with contextlib.nullcontext() if stepping else ddp.no_sync():
                    total_loss, each, out = ddp(x, y)
                    if sender is not None:
                        mark = send(out, y, mark)
                    (total_loss * scale if cfg.update_every > 1 else total_loss).backward()
            else:
                each = []
                for run in learner.run_modules(x, y, mods[0], mods[-1] + 1):
                    each.append(run.loss.detach())
                    if sender is not None and send_block in run.outputs:
                        mark = send(run.outputs[send_block], y, mark)
                    (run.loss * scale if cfg.update_every > 1 else run.loss).backward()
                each = torch.stack(each)
        losses.append(each[-1])
        update.append(each)
        watch.stop("forward_backward", mark)
        if stepping:
            with watch.phase("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
            if session is not None:
                mean = update[0] if len(update) == 1 else torch.stack(update).mean(0)
                if session.after_update(mean, sender.flush if sender is not None else None):
                    stopped = i
            update = []
        if (i + 1) % cfg.micro_batches == 0:     # a step ends: on a GPU, once its work has finished
            comm.settle(ctx.device)
            t = {**watch.read("data", "forward_backward", "optimizer"), **waits}
            busy.append(t["data"] + t["forward_backward"] + t["optimizer"])
            window.mark()
            if i >= warm:
                for k, v in t.items():
                    phases[k] += v
            waits.update(dict.fromkeys(waits, 0.0))
            ctx.progress(cfg.micro_batches)
        if stopped is not None:
            break
    if stopped is not None and stopped < total - 1:
        # the next stage has posted the receive of a micro-batch that will not come: send it one
        # (zeros) to take, and take the one this stage has posted
        if sender is not None:
            out_info = infos[send_block]
            sender.send({"activations": torch.zeros((B, *out_info.shape), dtype=out_info.dtype, device=ctx.device),
                         "labels": torch.zeros((B, *lshape), dtype=ldtype, device=ctx.device)})
        if receiver is not None:
            receiver.drain()
    if sender is not None:
        sender.flush()

    stats = window.stats(busy)
    stats.update({
        "samples_timed": (total - warm) * B,
        "phases_s": phases,
        "phase_clock": watch.clock,
        "sent_bytes": dict(sender.bytes) if sender else {},
        "received_bytes": dict(receiver.bytes) if receiver else {},
        "replica_allreduce_bytes": allreduce["bytes"],     # DDP's, overlapped with the backward
        "memory": peak_memory(ctx.device, getattr(meter, "peak", 0), 0, state_bytes(params, opt)),
        "last_loss": float(losses[-1]),
        "optimizer_impl": optimizer_impl(opt),
    })
    return stats
