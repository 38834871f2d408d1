"""Measured and predicted costs of a stage cut: forward+backward time of each local module
(for the time-balanced cut) and the bytes each schedule sends across the cuts."""
from __future__ import annotations

import copy
import math
import os
import time

import torch

from .. import methods
from .config import PIPELINED_BACKPROP, PipelineConfig
from .inputs import label_info, synthetic_batches
from .split import BlockInfo, StagePlan, balanced_split, itemsize


def module_times(learner: methods.Learner, spec, cfg: PipelineConfig, reps: int = 3) -> list[float]:
    """Seconds of forward+backward of each local module on one micro-batch (best of ``reps`` after
    a warm-up run), measured on a copy of the learner so nothing of it changes."""
    work = copy.deepcopy(learner)
    x, y = next(synthetic_batches(cfg, spec, torch.Generator().manual_seed(cfg.seed)))
    with torch.no_grad():
        inputs = [run.h_in for run in work.run_modules(x, y)]
    times = []
    threads = torch.get_num_threads()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    torch.set_num_threads(cfg.threads or max(1, cores // cfg.stages))  # as a CPU stage process will
    try:
        for m in range(work.num_modules):
            best = float("inf")
            for r in range(reps + 1):
                t0 = time.perf_counter()
                _, loss = work.module_loss(m, inputs[m], y)
                loss.backward()
                if r:
                    best = min(best, time.perf_counter() - t0)
            times.append(best)
    finally:
        torch.set_num_threads(threads)
    return times


def time_split(learner: methods.Learner, spec, cfg: PipelineConfig) -> list[int]:
    """The cut that balances measured forward+backward time (see :func:`module_times`)."""
    if cfg.stages > learner.num_modules:
        raise ValueError(f"stages={cfg.stages} is more than the {learner.num_modules} local modules of "
                         f"method {learner.spec!r}")
    return balanced_split(module_times(learner, spec, cfg), cfg.stages)


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
