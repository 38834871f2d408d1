"""Per-stage costs measured in each schedule's own order: every stage process at once, compute only.

The per-block calibration (:mod:`.calibrate`) times each block alone, over and over, in one
process: its weights, gradients and activations stay in the cache, and nothing else runs. In a
real pipeline a stage's actions come in the schedule's order, and that order changes what they
cost on a CPU:

* a backward that adds to existing gradients (pipelined backprop, ``local/M``) reads and
  writes every weight gradient once more than one that writes them fresh (``local``);
* GPipe runs all forwards before any backward, so each backward finds its activations evicted;
  a local stage runs the backward of a micro-batch right after its forward;
* the stages share the caches and the memory bus: on this project's 2-core machine one stage of
  the 8x1024 MLP streams about 80 MB of weights, gradients and Adam state per micro-batch.

A *replay* runs, in ``S`` processes at once, each stage's compute actions of a real run in its
schedule's order (the action lists come from :mod:`.schedules`, i.e. from
``torch.distributed.pipelining``; the local schedule alternates forward and backward), with the
run's stage modules, optimizer, update rule, threads and glibc malloc settings, and the
saved-tensor meter ``bench pipeline`` runs on CPU. Nothing is communicated: the inputs are
fixed tensors of the right shape, and the gradient arriving at a stage's output is a fixed
random tensor. Each action is timed; the mean forward, backward and optimizer step per stage
are the costs the engine then schedules, adding the waits and the link. A *coupled* replay also
makes every action wait for the neighbouring stage's action it depends on, as the real pipeline
does, so the stages keep the schedule's timing relative to each other.

What a replay cannot give: costs for a machine or a number of stages one cannot run (there the
per-block calibration is what there is), and the pipeline runtime's own work between actions.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass

import torch
import torch.multiprocessing as mp

from paper_repro.build import make_optimizer
from paper_repro.distributed.config import PipelineConfig
from paper_repro.distributed.inputs import build_learner, data_spec, synthetic_batches
from paper_repro.distributed.baselines import StageModule
from paper_repro.distributed.memory import SavedTensorMeter
from paper_repro.distributed.timing import synchronize
from paper_repro.simulate.engine import Costs
from paper_repro.simulate.schedules import LOCAL_SCHEDULES, base_schedule, torch_order

# glibc malloc settings that keep freed memory in a CPU stage process, as jemalloc or tcmalloc do
# (which ``torch.backends.xeon.run_cpu`` preloads for the same reason): mmap only above 32 MiB
# (glibc's maximum), never trim, grow the heap 512 MiB at a time. By default glibc hands large
# freed blocks back to the operating system and page-faults them in again later. glibc reads
# them from the environment, so a stage process started with them set runs with them.
CPU_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "17179869184",
                  "MALLOC_TOP_PAD_": "536870912"}

BARRIER_TIMEOUT = 600.0     # seconds a stage process waits for the others between replays


@dataclass(frozen=True)
class Job:
    """One replay: ``cfg`` (model, micro-batch size, micro-batches, steps, optimizer, threads,
    method of the local run), a schedule that ``bench pipeline`` runs (``local``, ``local/M``,
    ``gpipe``, ``1f1b``, each torch schedule also ``-recompute``) and the blocks of every stage."""
    cfg: PipelineConfig
    schedule: str
    cut: tuple[tuple[int, ...], ...]

    def key(self) -> tuple:
        return (self.cfg.micro_batch, self.schedule, self.cut)


@dataclass
class StageTimes:
    """Mean seconds of one stage's forward (loss included on the last stage or under local
    learning), whole backward (with the re-forward under recomputation) and optimizer step."""
    forward: float
    backward: float
    optimizer: float
    data: float | None = None       # per micro-batch, on the first stage; None: the calibrated one


def replay(jobs: list[Job], rounds: int = 3, malloc_env: dict | None = None,
           coupled: bool = False) -> dict[tuple, list[StageTimes]]:
    """Replay every job ``rounds`` times, interleaved (round k of every job before round k + 1 of
    any), in one process per stage; per job (:meth:`Job.key`) and stage, the median over rounds.
    All jobs must have the same model and number of stages. ``malloc_env``: glibc malloc variables
    for the stage processes (those of :data:`CPU_MALLOC_ENV` not given are unset; ``None``: as here).

    ``coupled``: every action also waits, as in the real pipeline, for the action it depends on in
    the neighbouring stage (a forward for the previous stage's forward of the micro-batch, a
    pipelined backprop backward for the next stage's backward), blocking on a shared condition
    variable; still nothing is sent. Without it, each stage runs its actions back to back."""
    if not jobs:
        return {}
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive integer, got {rounds!r}")
    S = len(jobs[0].cut)
    for job in jobs:
        base, recompute = base_schedule(job.schedule)
        if base not in (*LOCAL_SCHEDULES, "gpipe", "1f1b") or (recompute and base in LOCAL_SCHEDULES):
            raise ValueError(f"cannot replay schedule {job.schedule!r}; replayable: local, local/M, "
                             "gpipe, 1f1b, gpipe-recompute, 1f1b-recompute")
        if len(job.cut) != S or (job.cfg.model, job.cfg.model_kwargs) != (jobs[0].cfg.model, jobs[0].cfg.model_kwargs):
            raise ValueError("replay jobs must share the model and the number of stages")
    order = [job for _ in range(rounds) for job in jobs]
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(S)
    # per stage: forwards and backwards done so far in the current replay (when coupled)
    sync = (ctx.Condition(), ctx.Array("q", 2 * S, lock=False)) if coupled else None
    with tempfile.TemporaryDirectory() as tmp, _env(malloc_env):
        out = os.path.join(tmp, "times")
        mp.start_processes(_stage, args=(order, barrier, out, sync), nprocs=S, start_method="spawn")
        per_rank = []
        for rank in range(S):
            with open(f"{out}.{rank}") as f:
                per_rank.append(json.load(f))
    result: dict[tuple, list[StageTimes]] = {}
    for job in jobs:
        stages = []
        for rank in range(S):
            samples = [t for j, t in zip(order, per_rank[rank]) if j.key() == job.key()]
            stages.append(StageTimes(*(statistics.median(s[k] for s in samples) for k in range(3))))
        result[job.key()] = stages
    return result


def replay_costs(stage_times: list[StageTimes], calibrated: Costs, recompute: bool = False) -> Costs:
    """``calibrated`` (the per-block calibration's costs of the same cut) with the replayed
    forward, backward and optimizer times of every stage. The backward keeps the calibrated
    split between its input-gradient and weight-gradient halves; under recomputation the
    re-forward comes out of the backward, since the engine adds the forward itself."""
    if len(stage_times) != calibrated.pieces:
        raise ValueError(f"{len(stage_times)} replayed stages for {calibrated.pieces} pieces")
    inp, wgt = [], []
    for v, t in enumerate(stage_times):
        whole = max(t.backward - (t.forward if recompute else 0.0), 0.0)
        cal = calibrated.backward(v)
        share = calibrated.backward_input[v] / cal if cal > 0 else 0.0
        inp.append(whole * share)
        wgt.append(whole - whole * share)
    data = stage_times[0].data
    return Costs([t.forward for t in stage_times], inp, wgt, [t.optimizer for t in stage_times],
                 list(calibrated.send_bytes), data=calibrated.data if data is None else data)


@contextlib.contextmanager
def _env(malloc_env: dict | None):
    """Set the glibc malloc variables for processes started inside (unset those not given)."""
    if malloc_env is None:
        yield
        return
    saved = {k: os.environ.get(k) for k in CPU_MALLOC_ENV}
    try:
        for k in CPU_MALLOC_ENV:
            os.environ.pop(k, None)
        os.environ.update({k: str(v) for k, v in malloc_env.items()})
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _stage(rank: int, order: list[Job], barrier, out_path: str, sync) -> None:
    times = []
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    offset = 0          # the shared counters only grow: earlier replays' micro-batches come first
    for job in order:
        torch.set_num_threads(job.cfg.threads or max(1, cores // len(job.cut)))
        barrier.wait(timeout=BARRIER_TIMEOUT)       # every stage starts a replay together
        times.append(_replay_one(rank, job, sync, offset))
        offset += job.cfg.total_micro_batches
    with open(f"{out_path}.{rank}", "w") as f:
        json.dump(times, f)


def _actions(job: Job, rank: int) -> list[tuple[str, int]]:
    """This stage's compute actions of one step, in order: (``F`` | ``B``, micro-batch)."""
    M = job.cfg.micro_batches
    base, _ = base_schedule(job.schedule)
    if base in LOCAL_SCHEDULES:
        return [(kind, mb) for mb in range(M) for kind in ("F", "B")]
    return [(a.kind, a.micro_batch) for a in torch_order(base, len(job.cut), M).actions[rank]]


def _replay_one(rank: int, job: Job, sync=None, offset: int = 0) -> list[float]:
    """Mean seconds of this stage's forward, backward and optimizer step over the timed steps
    (``sync``: the shared condition and counters of a coupled replay, at ``offset`` micro-batches
    from earlier replays)."""
    cfg = job.cfg
    S = len(job.cut)
    base, recompute = base_schedule(job.schedule)
    local = base in LOCAL_SCHEDULES
    every = (cfg.update_every if base == "local" else cfg.micro_batches) if local else None
    # one GPU per stage where there are enough; stages share them round-robin where not
    device = torch.device("cuda", rank % torch.cuda.device_count()) if cfg.device == "cuda" else torch.device("cpu")
    _, spec = data_spec(cfg)
    learner = build_learner(dataclasses.replace(cfg, method=cfg.local_method if local else "backprop"), spec)
    learner.to(device)
    net = learner.net.train()
    blocks = job.cut[rank]
    x, y = next(synthetic_batches(cfg, spec, torch.Generator().manual_seed(cfg.seed)))
    x, y = x.to(device), y.to(device)
    with torch.no_grad():
        h = x
        for b in range(blocks[0]):
            h = net.blocks[b](h)
    last = rank == S - 1
    if local:
        params = learner.module_parameters(rank)
        stage = None
    else:
        stage = StageModule([net.blocks[b] for b in blocks], net.head if last else None, recompute=recompute)
        params = list(stage.parameters())
    opt = make_optimizer(cfg, params)
    grad_out = None
    if not local and not last:
        with torch.no_grad():
            grad_out = torch.randn_like(stage(h))
    meter = SavedTensorMeter(exclude=params) if cfg.device == "cpu" else contextlib.nullcontext()
    actions = _actions(job, rank)
    sums = [0.0, 0.0, 0.0]
    counts = [0, 0, 0]
    stash: dict[int, torch.Tensor] = {}
    n = 0                               # micro-batches done (local: the update rule counts them)
    for step in range(cfg.warmup_steps + cfg.steps):
        timed = step >= cfg.warmup_steps
        with meter:
            for kind, mb in actions:
                if sync is not None:
                    _wait_for_neighbour(sync, rank, S, kind, offset + step * cfg.micro_batches + mb, local)
                t0 = time.perf_counter()
                if kind == "F":
                    inp = h.detach().requires_grad_(rank > 0 and not local) if h.is_floating_point() else h
                    if local:
                        stash[mb] = learner.module_loss(rank, inp, y)[1] * (1.0 / every if every > 1 else 1.0)
                    else:
                        out = stage(inp)
                        stash[mb] = net.loss(out, y) if last else out
                else:
                    out = stash.pop(mb)
                    out.backward(grad_out if out.dim() else None)
                synchronize(device)
                dt = time.perf_counter() - t0
                k = 0 if kind == "F" else 1
                if timed:
                    sums[k] += dt
                    counts[k] += 1
                if sync is not None:
                    with sync[0]:
                        sync[1][2 * rank + k] += 1
                        sync[0].notify_all()
                if local and kind == "B":
                    n += 1
                    if n % every == 0:
                        _timed_step(opt, device, sums, counts, timed)
        if not local:
            _timed_step(opt, device, sums, counts, timed)
    return [s / c if c else 0.0 for s, c in zip(sums, counts)]


def _wait_for_neighbour(sync, rank: int, S: int, kind: str, g: int, local: bool) -> None:
    """Block until the neighbour's action this one depends on is done: micro-batch ``g``'s
    forward on the previous stage, or (pipelined backprop) its backward on the next stage."""
    cond, done = sync
    if kind == "F" and rank > 0:
        slot = 2 * (rank - 1)
    elif kind == "B" and not local and rank < S - 1:
        slot = 2 * (rank + 1) + 1
    else:
        return
    with cond:
        if not cond.wait_for(lambda: done[slot] > g, timeout=BARRIER_TIMEOUT):
            raise TimeoutError(f"stage {rank} waited {BARRIER_TIMEOUT:.0f} s for stage {slot // 2}'s "
                               f"{'forward' if slot % 2 == 0 else 'backward'} of micro-batch {g}")


def _timed_step(opt, device: torch.device, sums: list[float], counts: list[int], timed: bool) -> None:
    t0 = time.perf_counter()
    opt.step()
    opt.zero_grad(set_to_none=True)
    synchronize(device)
    if timed:
        sums[2] += time.perf_counter() - t0
        counts[2] += 1
