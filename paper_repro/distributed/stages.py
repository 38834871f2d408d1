"""What one pipeline run is, how a learner is cut into stages, and what crosses each cut.

A *stage* is a contiguous run of local modules ``[m0, m1)`` of a :class:`~paper_repro.methods.Learner`
(with their heads); it receives the output of block ``learner.input_block(m0)`` and sends the
output of block ``learner.input_block(m1)``. The pipelined-backprop baselines put the *same
blocks* on the same stages (only the last stage has a head, the net's own), so every schedule
moves the same boundary tensors; local parallelism sends them forward only, pipelined backprop
also sends their gradients back.

Everything here runs in one process: :func:`plan_stages` and :func:`boundary_info` are what
``--comm-only`` uses for models too large to train on the machine at hand.
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
from torch.utils.flop_counter import FlopCounterMode

from .. import methods

SCHEDULES = ("local", "gpipe", "1f1b", "1f1b-recompute", "ddp")
PIPELINED_BACKPROP = ("gpipe", "1f1b", "1f1b-recompute")
DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16}
DEVICES = ("cpu", "cuda")
OPTIMIZERS = ("adam", "sgd")
FAULT_MODES = ("raise", "kill", "hang")
BALANCES = ("flops", "time")


@dataclass
class PipelineConfig:
    """One benchmark run: a model cut into ``stages`` processes, trained with ``schedule``.

    ``method`` is the local-learning method of the ``local`` schedule (default
    ``chunked-{stages}``: one local module per stage, as in the paper); the other schedules
    train with backprop but use the stage cut that ``method`` and ``split`` give. ``split``
    lists the first local module of stages 1..S-1; without it the cut balances ``balance``:
    ``"flops"`` (forward FLOPs of blocks and heads) or ``"time"`` (forward+backward time of each
    local module on one micro-batch, measured once before the run; :func:`time_split`).
    A step is ``micro_batches`` micro-batches of ``micro_batch`` samples; the first
    ``warmup_steps`` steps are not timed. ``fault`` injects a failure for tests:
    ``"raise@STAGE:MICROBATCH"``, ``"kill@STAGE:MICROBATCH"`` (SIGKILL) or ``"hang@STAGE:MICROBATCH"``.
    ``update_every``: the local pipeline's stages step their optimizers every this many
    micro-batches (gradients averaged over them); 1 = after every micro-batch, the paper's
    local updates; ``micro_batches`` = as often as the baselines, which step once per step.
    ``timeout`` bounds every message, ``init_timeout`` the start-up (reaching the rendezvous
    store and waiting for every stage to join), ``heartbeat_timeout`` a silent peer.
    """
    schedule: str = "local"
    model: str = "mlp"
    method: str | None = None
    stages: int = 2
    split: list[int] | None = None
    balance: str = "flops"
    micro_batch: int = 8
    micro_batches: int = 16
    steps: int = 3
    warmup_steps: int = 1
    dataset: str = "synthetic"
    data_dir: str | None = None
    data_kwargs: dict = field(default_factory=dict)
    image_size: int = 32
    channels: int = 3
    num_classes: int = 10
    seq_len: int = 64
    model_kwargs: dict = field(default_factory=dict)
    optimizer: str = "adam"
    lr: float = 1e-3
    seed: int = 0
    dtype: str = "float32"
    device: str = "cpu"
    threads: int | None = None
    max_in_flight: int = 2
    update_every: int = 1
    timeout: float = 300.0
    heartbeat_timeout: float = 30.0
    init_timeout: float = 300.0
    save_params: str | None = None
    fault: str | None = None

    @property
    def local_method(self) -> str:
        return self.method or f"chunked-{self.stages}"

    @property
    def total_micro_batches(self) -> int:
        return (self.warmup_steps + self.steps) * self.micro_batches

    def validate(self) -> "PipelineConfig":
        from .. import models

        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}; valid: {', '.join(SCHEDULES)}")
        if self.model not in models.MODELS:
            raise ValueError(f"unknown model {self.model!r}; valid: {', '.join(models.MODELS)}")
        for key in ("stages", "micro_batch", "micro_batches", "steps", "image_size", "channels",
                    "num_classes", "seq_len", "max_in_flight", "update_every"):
            _positive_int(key, getattr(self, key))
        if self.micro_batches % self.update_every:
            raise ValueError(f"update_every={self.update_every} must divide micro_batches={self.micro_batches} "
                             "(the local pipeline's optimizer steps must fall on step boundaries)")
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be a non-negative integer, got {self.warmup_steps!r}")
        if self.schedule in PIPELINED_BACKPROP and self.stages < 2:
            raise ValueError(f"schedule {self.schedule!r} needs at least 2 stages, got stages={self.stages}")
        if self.schedule in ("1f1b", "1f1b-recompute") and self.micro_batches < self.stages:
            raise ValueError(f"schedule {self.schedule!r} needs micro_batches >= stages, got "
                             f"micro_batches={self.micro_batches} < stages={self.stages}")
        if self.schedule == "ddp" and self.micro_batches % self.stages:
            raise ValueError(f"schedule 'ddp' splits the micro_batches of a step over the {self.stages} "
                             f"processes: micro_batches={self.micro_batches} must be a multiple of stages")
        if self.balance not in BALANCES:
            raise ValueError(f"unknown balance {self.balance!r}; valid: {', '.join(BALANCES)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; valid: {', '.join(DTYPES)}")
        if self.device not in DEVICES:
            raise ValueError(f"unknown device {self.device!r}; valid: {', '.join(DEVICES)} "
                             "(each process uses cuda:LOCAL_RANK)")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}")
        for key in ("timeout", "heartbeat_timeout", "init_timeout"):
            if not getattr(self, key) > 0:
                raise ValueError(f"{key} must be a positive number of seconds, got {getattr(self, key)!r}")
        if self.threads is not None:
            _positive_int("threads", self.threads)
        parse_fault(self.fault)
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _positive_int(key, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{key} must be a positive integer, got {value!r}")


def parse_fault(fault: str | None) -> tuple[str, int, int] | None:
    """``"raise@1:5"`` -> ("raise", stage 1, micro-batch 5); None -> None."""
    if fault is None:
        return None
    try:
        mode, where = fault.split("@")
        stage, at = (int(v) for v in where.split(":"))
    except ValueError:
        raise ValueError(f"fault must look like MODE@STAGE:MICROBATCH with MODE in "
                         f"{', '.join(FAULT_MODES)}, got {fault!r}") from None
    if mode not in FAULT_MODES:
        raise ValueError(f"unknown fault mode {mode!r}; valid: {', '.join(FAULT_MODES)}")
    return mode, stage, at


# ------------------------------------------------------------------------------- the model
def data_spec(cfg: PipelineConfig):
    """(data set or None, spec with kind / num_classes / input_shape / seq_len) for ``cfg``."""
    if cfg.dataset == "synthetic":
        if cfg.model == "transformer":
            return None, SimpleNamespace(kind="text", num_classes=cfg.num_classes, seq_len=cfg.seq_len,
                                         input_shape=(cfg.seq_len,))
        return None, SimpleNamespace(kind="image", num_classes=cfg.num_classes, seq_len=None,
                                     input_shape=(cfg.channels, cfg.image_size, cfg.image_size))
    from .. import data

    ds = data.load(cfg.dataset, cfg.data_dir, **cfg.data_kwargs)
    return ds, ds


def build_learner(cfg: PipelineConfig, spec=None) -> methods.Learner:
    """The full learner of ``cfg.local_method``, seeded with ``cfg.seed`` (every process builds
    the same one, then keeps its own modules)."""
    from ..train import TrainConfig, build_model

    spec = spec if spec is not None else data_spec(cfg)[1]
    torch.manual_seed(cfg.seed)
    net = build_model(TrainConfig(model=cfg.model, model_kwargs=dict(cfg.model_kwargs)), spec)
    return methods.build(net, cfg.local_method).to(DTYPES[cfg.dtype])


def synthetic_batches(cfg: PipelineConfig, spec, generator: torch.Generator):
    """Random micro-batches of the right shape forever (inputs N(0,1) or random tokens, random labels)."""
    b = cfg.micro_batch
    while True:
        if spec.kind == "text":
            yield (torch.randint(spec.num_classes, (b, spec.seq_len), generator=generator),
                   torch.randint(spec.num_classes, (b, spec.seq_len), generator=generator))
        else:
            yield (torch.randn(b, *spec.input_shape, generator=generator).to(DTYPES[cfg.dtype]),
                   torch.randint(spec.num_classes, (b,), generator=generator))


def micro_batches(cfg: PipelineConfig, ds, spec, seed: int):
    """The micro-batch stream read by stage 0 (or by each DDP rank, with its own ``seed``)."""
    gen = torch.Generator().manual_seed(seed)
    if ds is None:
        return synthetic_batches(cfg, spec, gen)
    dtype = DTYPES[cfg.dtype]
    return ((x.to(dtype) if x.is_floating_point() else x, y)
            for x, y in ds.sampler("train", cfg.micro_batch, gen))


# -------------------------------------------------------------------- shapes, FLOPs, split
@dataclass
class BlockInfo:
    """Per-sample facts of one block's output (batch dimension removed)."""
    shape: tuple
    dtype: torch.dtype
    flops: int              # forward FLOPs per sample of the block
    head_flops: int = 0     # forward FLOPs per sample of an auxiliary head on this block

    @property
    def bytes(self) -> int:
        return math.prod(self.shape) * _itemsize(self.dtype)


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@torch.no_grad()
def boundary_info(learner: methods.Learner, spec, dtype: torch.dtype = torch.float32) -> list[BlockInfo]:
    """Output shape, dtype and forward FLOPs of every block for one sample (eval mode, no state
    changes), plus the FLOPs of the learner's head on that block where it has one."""
    net = learner.net
    was_training = net.training
    net.eval()
    if spec.kind == "text":
        h = torch.zeros(1, spec.seq_len, dtype=torch.long)
    else:
        h = torch.zeros(1, *spec.input_shape, dtype=dtype)
    head_of = {blocks[-1]: learner.heads[m] for m, blocks in enumerate(learner.module_blocks)}
    infos = []
    try:
        for b, block in enumerate(net.blocks):
            with FlopCounterMode(display=False) as fc:
                h = block(h)
            head_flops = 0
            if b in head_of:
                with FlopCounterMode(display=False) as fh:
                    head_of[b](h)
                head_flops = fh.get_total_flops()
            infos.append(BlockInfo(tuple(h.shape[1:]), h.dtype, fc.get_total_flops(), head_flops))
    finally:
        net.train(was_training)
    return infos


def label_info(spec) -> tuple[tuple, torch.dtype]:
    """Per-sample label shape and dtype: () for classes, (seq_len,) for next-token targets."""
    return ((spec.seq_len,) if spec.kind == "text" else ()), torch.int64


@dataclass
class StagePlan:
    """Which local modules and blocks each stage holds, and which block's output it sends."""
    modules: list[list[int]]
    blocks: list[list[int]]
    send_blocks: list[int]          # stage s sends the output of block send_blocks[s] (s < S-1)

    @property
    def stages(self) -> int:
        return len(self.modules)

    def to_dict(self) -> dict:
        return {"modules": self.modules, "blocks": self.blocks, "send_blocks": self.send_blocks}


def balanced_split(costs: list[float], stages: int) -> list[int]:
    """First item of stages 1..S-1 of the contiguous partition of ``costs`` with the smallest
    maximum stage cost (dynamic programming; ties go to the earliest cut)."""
    n = len(costs)
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for s in range(1, stages + 1):
        for i in range(s, n + 1):
            for j in range(s - 1, i):
                value = max(best[s - 1][j], prefix[i] - prefix[j])
                if value < best[s][i]:
                    best[s][i], cut[s][i] = value, j
    starts, i = [], n
    for s in range(stages, 0, -1):
        i = cut[s][i]
        starts.append(i)
    return sorted(starts)[1:]


def plan_stages(learner: methods.Learner, stages: int, split: list[int] | None = None,
                infos: list[BlockInfo] | None = None) -> StagePlan:
    """Cut the learner's local modules into ``stages`` contiguous groups.

    ``split`` gives the first module of stages 1..S-1; without it the cut balances forward
    FLOPs (blocks + heads, from ``infos``). A block shared by two stages (overlapping windows
    across a cut) would need a gradient message back across the cut: refused with ValueError.
    """
    n = learner.num_modules
    if stages > n:
        raise ValueError(f"stages={stages} is more than the {n} local modules of method "
                         f"{learner.spec!r}; use at most {n} stages or a method with more modules")
    if split is None:
        if infos is None:
            starts = [round(s * n / stages) for s in range(1, stages)]
        else:
            costs = [sum(infos[b].flops for b in blocks) + infos[blocks[-1]].head_flops
                     for blocks in learner.module_blocks]
            starts = balanced_split(costs, stages)
    else:
        starts = [int(v) for v in split]
        if len(starts) != stages - 1 or starts != sorted(set(starts)) or (starts and not 0 < starts[0]) \
                or (starts and starts[-1] >= n):
            raise ValueError(f"split must list {stages - 1} increasing module indices in 1..{n - 1} "
                             f"(the first local module of stages 1..{stages - 1}), got {split!r}")
    bounds = [0, *starts, n]
    modules = [list(range(bounds[s], bounds[s + 1])) for s in range(stages)]
    blocks = [sorted({b for m in mods for b in learner.module_blocks[m]}) for mods in modules]
    for s in range(stages - 1):
        shared = set(blocks[s]) & set(blocks[s + 1])
        if shared:
            b = min(shared)
            raise ValueError(
                f"method {learner.spec!r} shares block {b} between local module {modules[s][-1]} "
                f"(stage {s}) and local module {modules[s + 1][0]} (stage {s + 1}): the window that "
                f"crosses this stage boundary would need a gradient message sent back across it, "
                f"which this pipeline does not support. Use greedy or chunked-K, or run "
                f"{learner.spec!r} in one process (stages=1).")
    send_blocks = [learner.input_block(modules[s + 1][0]) for s in range(stages - 1)]
    return StagePlan(modules, blocks, send_blocks)


def boundary_records(plan: StagePlan, infos: list[BlockInfo], micro_batch: int) -> list[dict]:
    """The tensors at the stage boundaries, for one micro-batch: block, shape, dtype, bytes."""
    return [{"after_block": b, "shape": [micro_batch, *infos[b].shape],
             "dtype": str(infos[b].dtype).replace("torch.", ""), "bytes": micro_batch * infos[b].bytes}
            for b in plan.send_blocks]


def module_times(learner: methods.Learner, spec, cfg: PipelineConfig, reps: int = 3) -> list[float]:
    """Seconds of forward+backward of each local module on one micro-batch (best of ``reps`` after
    a warm-up run), measured on a copy of the learner so nothing of it changes."""
    import copy
    import time

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
    label = math.prod(lshape) * _itemsize(ldtype)
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
