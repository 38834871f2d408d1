"""Measured and predicted costs of a stage cut: what each local module costs a stage per
micro-batch (for the time-balanced cut) and the bytes each schedule sends across the cuts."""
from __future__ import annotations

import copy
import math
import os
import socket
import threading
import time

import torch

from .. import methods
from ..build import make_optimizer
from .config import PIPELINED_BACKPROP, PipelineConfig
from .inputs import label_info, synthetic_batches
from .split import BlockInfo, StagePlan, balanced_split, itemsize


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


def module_times(learner: methods.Learner, spec, cfg: PipelineConfig, reps: int = 3) -> dict[str, list[float]]:
    """What each local module costs its stage per micro-batch, measured on a copy of the learner
    (nothing of it changes) with the stage processes' thread count, best of ``reps`` after a
    warm-up run:

    ``compute``: forward + backward of the module's blocks and head, plus its optimizer step
    (``cfg.optimizer``, the implementation :func:`paper_repro.build.make_optimizer` picks)
    divided by ``cfg.update_every`` (a stage steps once per that many micro-batches);
    ``send``: pushing the module's output (and the labels) to the next process, paid only by
    a module that ends a stage."""
    work = copy.deepcopy(learner)
    x, y = next(synthetic_batches(cfg, spec, torch.Generator().manual_seed(cfg.seed)))
    with torch.no_grad():
        runs = list(work.run_modules(x, y))
    threads = torch.get_num_threads()
    torch.set_num_threads(stage_threads(cfg))
    compute, send = [], []
    try:
        for m in range(work.num_modules):
            opt = make_optimizer(cfg, work.module_parameters(m))
            best_fb = best_opt = float("inf")
            for r in range(reps + 1):
                t0 = time.perf_counter()
                _, loss = work.module_loss(m, runs[m].h_in, y)
                loss.backward()
                t1 = time.perf_counter()
                opt.step()
                opt.zero_grad(set_to_none=True)
                t2 = time.perf_counter()
                if r:
                    best_fb, best_opt = min(best_fb, t1 - t0), min(best_opt, t2 - t1)
            compute.append(best_fb + best_opt / cfg.update_every)
            out = runs[m].outputs[work.module_blocks[m][-1]]
            send.append(send_seconds(out) + send_seconds(y) if m < work.num_modules - 1 else 0.0)
    finally:
        torch.set_num_threads(threads)
    return {"compute": compute, "send": send}


def time_split(learner: methods.Learner, spec, cfg: PipelineConfig) -> list[int]:
    """The cut that makes the slowest stage fastest by measured time (see :func:`module_times`)."""
    if cfg.stages > learner.num_modules:
        raise ValueError(f"stages={cfg.stages} is more than the {learner.num_modules} local modules of "
                         f"method {learner.spec!r}")
    times = module_times(learner, spec, cfg)
    return balanced_split(times["compute"], cfg.stages, times["send"])


def predicted_comm(cfg: PipelineConfig, plan: StagePlan, infos: list[BlockInfo], spec,
                   param_bytes: int = 0) -> dict:
    """Bytes per sample that cross stage boundaries under ``cfg.schedule``, from shapes and dtypes.

    local:   every boundary activation forward, with the labels (every stage has a loss).
    gpipe / 1f1b / 1f1b-recompute: every boundary activation forward and its gradient (same
             shape and dtype) back; the labels go once, from stage 0 to the last stage.
    ddp:     no activations; each step all-reduces every gradient: a ring all-reduce sends
             2(S-1)/S x the gradient bytes per process, S processes, per step of
             micro_batch x micro_batches samples (``param_bytes`` = gradient bytes of the net).
    """
    lshape, ldtype = label_info(spec)
    label = math.prod(lshape) * itemsize(ldtype)
    acts = [infos[b].bytes for b in plan.send_blocks]
    S = plan.stages
    per_boundary = []
    if cfg.schedule == "local":
        per_boundary = [{"forward": a + label, "backward": 0} for a in acts]
        fwd_labels = label * len(acts)
    elif cfg.schedule in PIPELINED_BACKPROP:
        per_boundary = [{"forward": a, "backward": a} for a in acts]
        fwd_labels = label
    else:
        samples = cfg.micro_batch * cfg.micro_batches
        return {"forward": 0, "backward": 2 * (S - 1) * param_bytes / samples, "forward_activations": 0,
                "forward_labels": 0, "per_boundary": []}
    return {"forward": sum(acts) + fwd_labels, "backward": sum(p["backward"] for p in per_boundary),
            "forward_activations": sum(acts), "forward_labels": fwd_labels, "per_boundary": per_boundary}


def block_times(learner: methods.Learner, spec, cfg: PipelineConfig, reps: int = 3) -> dict[str, list[float]]:
    """What each block of the net costs a pipelined-backprop stage per micro-batch, measured
    like :func:`module_times`: ``compute`` = forward + backward of the block (the last one with
    the net's head and loss) plus its share of the optimizer step (one per ``micro_batches``);
    ``send`` = its output forward and that output's gradient back."""
    work = copy.deepcopy(learner)
    net = work.net
    x, y = next(synthetic_batches(cfg, spec, torch.Generator().manual_seed(cfg.seed)))
    with torch.no_grad():
        inputs, h = [], x
        for block in net.blocks:
            inputs.append(h)
            h = block(h)
    threads = torch.get_num_threads()
    torch.set_num_threads(stage_threads(cfg))
    compute, send = [], []
    last = len(net.blocks) - 1
    try:
        for b, block in enumerate(net.blocks):
            params = list(block.parameters()) + (list(net.head.parameters()) if b == last else [])
            opt = make_optimizer(cfg, params) if params else None
            best_fb = best_opt = float("inf")
            for r in range(reps + 1):
                h_in = inputs[b].detach().requires_grad_(inputs[b].is_floating_point())
                t0 = time.perf_counter()
                out = block(h_in)
                if b == last:
                    net.loss(net.head(out), y).backward()
                else:
                    out.backward(torch.ones_like(out))
                t1 = time.perf_counter()
                if opt is not None:
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                t2 = time.perf_counter()
                if r:
                    best_fb, best_opt = min(best_fb, t1 - t0), min(best_opt, t2 - t1)
            compute.append(best_fb + best_opt / cfg.micro_batches)
            send.append(2 * send_seconds(out) if b < last else 0.0)
    finally:
        torch.set_num_threads(threads)
    return {"compute": compute, "send": send}


def block_split(learner: methods.Learner, spec, cfg: PipelineConfig, pieces: int) -> list[int]:
    """First block of pieces 1..``pieces``-1 of the cut of the net's blocks that makes the slowest
    piece fastest by measured time (see :func:`block_times`)."""
    n = len(learner.net.blocks)
    if pieces > n:
        raise ValueError(f"cannot cut the {n} blocks of model {cfg.model!r} into {pieces} pipeline stages; "
                         f"schedule {cfg.schedule!r} with stages={cfg.stages} needs at least {pieces} blocks")
    times = block_times(learner, spec, cfg)
    return balanced_split(times["compute"], pieces, times["send"])
