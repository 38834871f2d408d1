"""Measured and predicted costs of a stage cut: what each local module costs a stage per
micro-batch (for the time-balanced cut) and the bytes each schedule sends across the cuts."""
from __future__ import annotations

import copy
import dataclasses
import math
import os
import socket
import threading
import time

import torch

from .. import methods
from ..blocknet import grad_input
from ..build import make_optimizer
from ..names import PIPELINED_BACKPROP
from .config import DTYPES, PipelineConfig
from .inputs import build_learner, label_info, synthetic_batches
from .cut import BlockInfo, StagePlan, balanced_cut, boundary_info, itemsize, stage_boundaries


def stage_threads(cfg: PipelineConfig) -> int:
    """Torch threads of one CPU stage process (as :mod:`.run` sets them)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cfg.threads or max(1, cores // (cfg.stages * cfg.dp))


def send_seconds(t: torch.Tensor, reps: int = 3) -> float:
    """Seconds to push ``t``'s bytes through a local socket pair (best of ``reps``): the cost a
    CPU stage pays to hand a boundary tensor to the transport. 0 for tensors off the CPU."""
    if t.device.type != "cpu":
        return 0.0
    data = memoryview(t.detach().contiguous().view(torch.uint8).reshape(-1).numpy())
    best = float("inf")
    for _ in range(reps):
        a, b = socket.socketpair()
        sink = bytearray(1 << 20)

        def drain(n=len(data)):
            while n > 0:
                n -= b.recv_into(sink, min(n, len(sink)))

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        t0 = time.perf_counter()
        a.sendall(data)
        reader.join(timeout=60)
        best = min(best, time.perf_counter() - t0)
        a.close()
        b.close()
    return best


def timing_device(cfg: PipelineConfig) -> torch.device:
    """Where a measured cut is timed: the run's device (a GPU run is cut by times on its first GPU)."""
    return torch.device("cuda", 0) if cfg.device == "cuda" else torch.device("cpu")


def synchronize(device: torch.device) -> None:
    """Wait for all the work queued on ``device`` (every stream; nothing on a CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def clock(device: torch.device):
    """``time.perf_counter``, read once the work queued on ``device`` has finished."""
    if device.type != "cuda":
        return time.perf_counter

    def now() -> float:
        synchronize(device)
        return time.perf_counter()
    return now


def best_of_rounds(tasks: list, reps: int) -> list[tuple[float, ...]]:
    """Run every task (a callable returning a tuple of seconds) once per round, a warm-up round
    and then ``reps`` more, and keep each task's smallest value of each component. Going over
    the tasks in turn spreads each task's samples over the whole measurement, so a burst of
    other load hits one sample of every task rather than every sample of one."""
    best: list = [None] * len(tasks)
    for r in range(reps + 1):
        for i, task in enumerate(tasks):
            values = task()
            if r:
                best[i] = values if best[i] is None else tuple(map(min, best[i], values))
    return best


def module_times(learner: methods.Learner, spec, cfg: PipelineConfig, reps: int = 5) -> dict[str, list[float]]:
    """What each local module costs its stage per micro-batch, measured on a copy of the learner
    (nothing of it changes) on the run's device (:func:`timing_device`) with the stage processes'
    thread count, best of ``reps`` rounds after
    a warm-up round (:func:`best_of_rounds`):

    ``compute``: forward + backward of the module's blocks and head, plus its optimizer step
    (``cfg.optimizer``, the implementation :func:`paper_repro.build.make_optimizer` picks)
    divided by ``cfg.update_every`` (a stage steps once per that many micro-batches);
    ``send``: pushing the module's output (and the labels) to the next process, paid only by
    a module that ends a stage; ``head``: the part of ``compute`` spent in the module's head
    and loss (forward + backward); ``input_grad``: what the module's backward costs more when
    its input needs a gradient (as a block inside a chunk does; the first block of a local
    module, whose input is detached, does not pay it)."""
    device = timing_device(cfg)
    now = clock(device)
    work = copy.deepcopy(learner).to(device)
    x, y = (t.to(device) for t in next(synthetic_batches(cfg, spec, torch.Generator().manual_seed(cfg.seed))))
    with torch.no_grad():
        runs = list(work.run_modules(x, y))
    outs = [runs[m].outputs[work.module_blocks[m][-1]] for m in range(work.num_modules)]
    opts = [make_optimizer(cfg, work.module_parameters(m)) for m in range(work.num_modules)]

    def task(m: int):
        def measure() -> tuple[float, float, float, float]:
            h = outs[m].detach().requires_grad_(True)
            t0 = now()
            work.net.loss(work.heads[m](h), y).backward()      # the head alone
            t1 = now()
            _, loss = work.module_loss(m, runs[m].h_in, y)     # the whole module
            loss.backward()
            t2 = now()
            opts[m].step()
            opts[m].zero_grad(set_to_none=True)
            t3 = now()
            h_in = runs[m].h_in.detach()                        # token ids take no gradient
            _, loss = work.module_loss(m, h_in.requires_grad_(True) if h_in.is_floating_point() else h_in, y)
            loss.backward()                                    # the same, with the input gradient
            opts[m].zero_grad(set_to_none=True)
            return t1 - t0, t2 - t1, t3 - t2, now() - t3
        return measure

    threads = torch.get_num_threads()
    torch.set_num_threads(stage_threads(cfg))
    try:
        best = best_of_rounds([task(m) for m in range(work.num_modules)], reps)
        send = [send_seconds(outs[m]) + send_seconds(y) if m < work.num_modules - 1 else 0.0
                for m in range(work.num_modules)]
    finally:
        torch.set_num_threads(threads)
    return {"compute": [fb + opt / cfg.update_every for _, fb, opt, _ in best], "send": send,
            "head": [head for head, _, _, _ in best],
            "input_grad": [max(fb_in - fb, 0.0) for _, fb, _, fb_in in best]}


def time_cut(learner: methods.Learner, spec, cfg: PipelineConfig) -> list[int]:
    """The cut that makes the slowest stage fastest by measured time (see :func:`module_times`)."""
    if cfg.stages > learner.num_modules:
        raise ValueError(f"stages={cfg.stages} is more than the {learner.num_modules} local modules of "
                         f"method {learner.spec!r}")
    times = module_times(learner, spec, cfg)
    return balanced_cut(times["compute"], cfg.stages, times["send"])


def predicted_comm(cfg: PipelineConfig, plan: StagePlan, infos: list[BlockInfo], spec,
                   param_bytes: int = 0) -> dict:
    """Bytes per sample that cross stage boundaries under ``cfg.schedule``, from shapes and dtypes.

    local:   every boundary activation forward, with the labels (every stage has a loss).
    pipelined backprop: every boundary activation forward and its gradient (same shape and
             dtype) back; the labels go once, from stage 0 to the last stage (with two stages
             per process the boundaries are those of :func:`.cut.stage_boundaries`, and
             ZBV / DualPipeV hold the first and the last stage on process 0: no labels move).
    ddp:     no activations; each step all-reduces every gradient: a ring all-reduce sends
             2(S-1)/S x the gradient bytes per process, S processes, per step of
             micro_batch x micro_batches samples (``param_bytes`` = gradient bytes of the net).
    """
    lshape, ldtype = label_info(spec)
    label = math.prod(lshape) * itemsize(ldtype)
    acts = [infos[b].bytes for b in stage_boundaries(cfg, plan, len(infos))]
    S = plan.stages
    per_boundary = []
    if cfg.schedule == "local":
        per_boundary = [{"forward": a + label, "backward": 0} for a in acts]
        fwd_labels = label * len(acts)
    elif cfg.schedule in PIPELINED_BACKPROP:
        per_boundary = [{"forward": a, "backward": a} for a in acts]
        v_shape = cfg.schedule.startswith(("zbv", "dualpipev"))
        fwd_labels = 0 if v_shape else label
    else:
        samples = cfg.micro_batch * cfg.micro_batches
        return {"forward": 0, "backward": 2 * (S - 1) * param_bytes / samples, "forward_activations": 0,
                "forward_labels": 0, "per_boundary": []}
    return {"forward": sum(acts) + fwd_labels, "backward": sum(p["backward"] for p in per_boundary),
            "forward_activations": sum(acts), "forward_labels": fwd_labels, "per_boundary": per_boundary}


def chunk_cut(cfg: PipelineConfig, spec, learner: methods.Learner | None = None) -> list[int]:
    """First blocks of chunks 1..S-1 for the local pipeline's default method: ``cfg.stages``
    chunks (one per stage) cut so that the slowest stage is fastest by measured time.

    Each block is timed as a greedy module (block + auxiliary head + optimizer step, and the
    send of its output), with and without the gradient of its input; a chunk pays for its
    blocks, the input gradient of every block but its first (whose input is detached), the
    head on its last block (the net's own head for the last chunk) and, unless it is the last,
    the send of its output."""
    greedy = learner if learner is not None else build_learner(dataclasses.replace(cfg, method="greedy"), spec)
    if greedy.spec != "greedy":
        raise ValueError(f"chunk_cut times a greedy learner, got method {greedy.spec!r}")
    times = module_times(greedy, spec, cfg)
    n = greedy.num_modules
    if cfg.stages > n:
        raise ValueError(f"stages={cfg.stages} is more than the {n} blocks of model {cfg.model!r}")
    blocks = [times["compute"][i] - (times["head"][i] if i < n - 1 else 0.0) + times["input_grad"][i]
              for i in range(n)]
    ends = [times["head"][i] + times["send"][i] for i in range(n)]
    return balanced_cut(blocks, cfg.stages, ends, first=[-g for g in times["input_grad"]])


def flops_chunk_cut(cfg: PipelineConfig, spec) -> list[int]:
    """First blocks of chunks 1..S-1 for the local pipeline's default method cut by forward
    FLOPs (``cut="flops"``): a chunk pays for its blocks and for the head on its last block
    (the net's own head for the last chunk)."""
    greedy = build_learner(dataclasses.replace(cfg, method="greedy"), spec)
    infos = boundary_info(greedy, spec, DTYPES[cfg.dtype])
    n = len(infos)
    if cfg.stages > n:
        raise ValueError(f"stages={cfg.stages} is more than the {n} blocks of model {cfg.model!r}")
    costs = [info.flops + (info.head_flops if b == n - 1 else 0) for b, info in enumerate(infos)]
    return balanced_cut(costs, cfg.stages, [info.head_flops for info in infos])


def block_times(learner: methods.Learner, spec, cfg: PipelineConfig, reps: int = 5) -> dict[str, list[float]]:
    """What each block of the net costs a pipelined-backprop stage per micro-batch, measured
    like :func:`module_times`: ``compute`` = forward + backward of the block (the last one with
    the net's head and loss) plus its share of the optimizer step (one per ``micro_batches``);
    ``send`` = its output forward and that output's gradient back."""
    device = timing_device(cfg)
    now = clock(device)
    net = copy.deepcopy(learner.net).to(device)
    x, y = (t.to(device) for t in next(synthetic_batches(cfg, spec, torch.Generator().manual_seed(cfg.seed))))
    with torch.no_grad():
        inputs, outs, h = [], [], x
        for block in net.blocks:
            inputs.append(h)
            h = block(h)
            outs.append(h)
    last = len(net.blocks) - 1

    def task(b: int):
        params = list(net.blocks[b].parameters()) + (list(net.head.parameters()) if b == last else [])
        opt = make_optimizer(cfg, params) if params else None

        def measure() -> tuple[float, float]:
            _, h_in = grad_input(inputs[b])  # a copy in the graph: the block may write its input
            t0 = now()
            out = net.blocks[b](h_in)
            if b == last:
                net.loss(net.head(out), y).backward()
            else:
                out.backward(torch.ones_like(out))
            t1 = now()
            if opt is not None:
                opt.step()
                opt.zero_grad(set_to_none=True)
            return t1 - t0, now() - t1
        return measure

    threads = torch.get_num_threads()
    torch.set_num_threads(stage_threads(cfg))
    try:
        best = best_of_rounds([task(b) for b in range(len(net.blocks))], reps)
        send = [2 * send_seconds(outs[b]) if b < last else 0.0 for b in range(len(net.blocks))]
    finally:
        torch.set_num_threads(threads)
    return {"compute": [fb + opt / cfg.micro_batches for fb, opt in best], "send": send}


def block_cut(learner: methods.Learner, spec, cfg: PipelineConfig, pieces: int) -> list[int]:
    """First block of pieces 1..``pieces``-1 of the cut of the net's blocks that makes the slowest
    piece fastest by measured time (see :func:`block_times`)."""
    n = len(learner.net.blocks)
    if pieces > n:
        raise ValueError(f"cannot cut the {n} blocks of model {cfg.model!r} into {pieces} pipeline stages; "
                         f"schedule {cfg.schedule!r} with stages={cfg.stages} needs at least {pieces} blocks")
    times = block_times(learner, spec, cfg)
    return balanced_cut(times["compute"], pieces, times["send"])
