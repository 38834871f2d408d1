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
import os
import signal
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
from .stopwatch import Stopwatch


# The failure tests make a stage fail with this variable in the stage processes' environment:
# MODE@STAGE:MICROBATCH, MODE one of raise, kill (SIGKILL) or hang.
TEST_FAULT_ENV = "PAPER_REPRO_TEST_FAULT"


def maybe_fail(rank: int, index: int) -> None:
    """The failure tests' hook: raise, SIGKILL or hang this stage at micro-batch ``index``."""
    fault = os.environ.get(TEST_FAULT_ENV)
    if not fault:
        return
    mode, where = fault.split("@")
    if [int(v) for v in where.split(":")] != [rank, index]:
        return
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "hang":
        time.sleep(10 ** 6)
    raise RuntimeError(f"injected fault at micro-batch {index} ({TEST_FAULT_ENV}={fault})")


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


class StageLosses(nn.Module):
    """The modules ``mods`` of a learner as one module for DDP: ``(x, y)`` -> (sum of their
    losses, the last module's loss, the output of block ``send_block`` or None)."""

    def __init__(self, learner, mods: list[int], send_block: int | None):
        super().__init__()
        self.learner, self.mods, self.send_block = learner, mods, send_block

    def forward(self, x, y):
        total, out = 0.0, None
        for run in self.learner.run_modules(x, y, self.mods[0], self.mods[-1] + 1):
            total = total + run.loss
            out = run.outputs.get(self.send_block, out)
        return total, run.loss, (out.detach() if out is not None else None)


def run_local(ctx: comm.Context, cfg: PipelineConfig, learner, plan, infos, spec, batches,
              where: Placement) -> dict:
    s, S = where.stage, plan.stages
    mods = plan.modules[s]
    params = list({id(p): p for m in mods for p in learner.module_parameters(m)}.values())
    opt = make_optimizer(cfg, params)
    total = cfg.total_micro_batches
    B = cfg.micro_batch
    lshape, ldtype = label_info(spec)

    receiver = None
    if s > 0:
        info = infos[plan.send_blocks[s - 1]]
        receiver = comm.Receiver(where.rank_of(s - 1), {"activations": ((B, *info.shape), info.dtype),
                                         "labels": ((B, *lshape), ldtype)}, ctx.device, total,
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
    busy, losses = [], []
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

    for i in range(total):
        maybe_fail(ctx.rank, i)
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
                    total_loss, loss, out = ddp(x, y)
                    if sender is not None:
                        mark = send(out, y, mark)
                    (total_loss * scale if cfg.update_every > 1 else total_loss).backward()
            else:
                for run in learner.run_modules(x, y, mods[0], mods[-1] + 1):
                    loss = run.loss
                    if sender is not None and send_block in run.outputs:
                        mark = send(run.outputs[send_block], y, mark)
                    (loss * scale if cfg.update_every > 1 else loss).backward()
        losses.append(loss.detach())
        watch.stop("forward_backward", mark)
        if stepping:
            with watch.phase("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
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


class Window:
    """The timed window of a stage's loop: :meth:`mark` ends every iteration, the first ``warm``
    iterations are left out. :meth:`stats`: busy seconds (computing, not waiting for messages)
    over the window."""

    def __init__(self, warm: int):
        self.warm = warm
        self.marks = [time.perf_counter()]

    def mark(self) -> None:
        self.marks.append(time.perf_counter())

    def stats(self, busy: list[float]) -> dict:
        t0, t1 = self.marks[self.warm], self.marks[-1]
        window, busy_s = t1 - t0, sum(busy[self.warm:])
        return {"window_s": window, "busy_s": busy_s, "busy_fraction": busy_s / window if window > 0 else None}
