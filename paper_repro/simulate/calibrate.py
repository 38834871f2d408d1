"""Measured costs of every block of a net, on the device at hand: the simulator's calibration.

One micro-batch of ``micro_batch`` samples goes through the net block by block, in one process,
with the threads a stage process would get (``cores // stages`` on CPU, as ``bench pipeline``
does). Every quantity is timed once per round, a round visits every block, and each keeps its
best of ``reps`` rounds after one warm-up round (so a burst of load from other programs spoils
one round of a block rather than all its samples). For every block ``b``:

* ``forward[b]``: its forward;
* ``backward[b]``: its whole backward (input gradient and weight gradients), given a gradient
  of its output;
* ``backward_weight[b]``: its backward when its input needs no gradient (weight gradients
  only): what the first block of a stage costs under local learning (its input is detached),
  and the ``W`` half of a zero-bubble schedule; the ``I`` half is the difference;
* ``accumulate[b]``: what the backward costs more when the block's gradients are added to
  existing ones than when they are written fresh (after ``zero_grad(set_to_none=True)``).
  ``backward`` and ``backward_weight`` are timed accumulating, as pipelined backprop runs all
  but the first micro-batch of a step; a local stage that steps after every micro-batch always
  writes fresh gradients. It depends on the parameters, not on the micro-batch size;
* ``optimizer[b]``: one optimizer step over the block's parameters;
* ``head_forward[b]``, ``head_backward[b]``, ``head_optimizer[b]``: the head that would sit on
  block ``b``'s output (an auxiliary head; on the last block the net's own head), loss included;
* ``out_bytes[b]``: bytes of the block's output for one micro-batch (what crosses a cut after it);
* ``flops[b]``: forward FLOPs of the block for one sample (the last block's with the net's head):
  what ``cut="flops"`` cuts by.

and for the input, drawn by the first stage as ``bench pipeline`` draws it:

* ``data``: one micro-batch from the input stream (the local pipeline draws one before each
  forward);
* ``concat``: per micro-batch, joining a step's ``micro_batches`` micro-batches into the one
  batch the backprop schedules split (``torch.cat``, into a fresh allocation as in the runs).

Times at another micro-batch size are scaled linearly (:meth:`BlockCosts.scaled`; the optimizer
step and ``accumulate`` stay as they are): a good model on CPU, where time is proportional to
work; on a GPU, calibrate at the size you simulate.
"""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..blocknet import grad_input
from ..build import make_optimizer
from ..distributed.config import DTYPES, PipelineConfig
from ..distributed.cut import boundary_info
from ..distributed.inputs import synthetic_batches
from .inputs import checked_learner, input_spec
from ..distributed.timing import synchronize


@dataclass
class BlockCosts:
    """Seconds per micro-batch of ``micro_batch`` samples for every block (see the module docstring)."""
    model: str
    model_kwargs: dict
    image_size: int
    micro_batch: int
    forward: list[float]
    backward: list[float]
    backward_weight: list[float]
    optimizer: list[float]
    head_forward: list[float]
    head_backward: list[float]
    head_optimizer: list[float]
    out_bytes: list[int]
    label_bytes: int = 0
    accumulate: list[float] = dataclasses.field(default_factory=list)     # empty: not measured (0)
    data: float = 0.0               # 0: not measured (calibrations made before it was)
    concat: float = 0.0
    flops: list[int] = dataclasses.field(default_factory=list)      # empty: not recorded
    device: str = "cpu"
    threads: int = 1
    hardware: str = ""
    note: str = ""

    @property
    def blocks(self) -> int:
        return len(self.forward)

    def accumulate_or_zero(self, b: int) -> float:
        return self.accumulate[b] if self.accumulate else 0.0

    def scaled(self, micro_batch: int) -> "BlockCosts":
        """The same costs at ``micro_batch`` samples: times and bytes scaled linearly, the
        optimizer step and the cost of accumulating gradients unchanged (they do not depend on
        the batch)."""
        if not isinstance(micro_batch, int) or micro_batch < 1:
            raise ValueError(f"micro_batch must be a positive integer, got {micro_batch!r}")
        k = micro_batch / self.micro_batch
        scale = {f: [v * k for v in getattr(self, f)] for f in ("forward", "head_forward", "head_backward")}
        for f in ("backward", "backward_weight"):
            scale[f] = [(v - self.accumulate_or_zero(b)) * k + self.accumulate_or_zero(b)
                        for b, v in enumerate(getattr(self, f))]
        return dataclasses.replace(self, micro_batch=micro_batch, **scale, data=self.data * k,
                                   concat=self.concat * k, out_bytes=[round(v * k) for v in self.out_bytes],
                                   label_bytes=round(self.label_bytes * k))

    def without_input(self) -> "BlockCosts":
        """The same costs with the input free (``data`` and ``concat`` 0): prefetched, as a data
        loader's workers supply it, instead of drawn by the first processor between its passes."""
        return dataclasses.replace(self, data=0.0, concat=0.0)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1))
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> "BlockCosts":
        path = Path(path)
        try:
            data = json.loads(path.read_text())
            return cls(**data)
        except FileNotFoundError:
            raise ValueError(f"calibration file {str(path)!r} does not exist") from None
        except (json.JSONDecodeError, TypeError) as err:
            raise ValueError(f"calibration file {str(path)!r} is not a BlockCosts JSON: {err}") from None


def measure(cfg: PipelineConfig, reps: int = 3, threads: int | None = None, input: str | None = None) -> BlockCosts:
    """Calibrate every block of ``cfg``'s model at ``cfg.micro_batch`` on ``cfg.device``.

    ``threads`` (CPU): torch threads during the measurement; default ``cfg.threads`` or
    ``cores // cfg.stages``, what each stage process of ``bench pipeline`` uses. ``input``: the
    kind of synthetic input, ``image`` or ``text`` (:func:`.inputs.input_spec`; None: text for
    the built-in Transformer, images otherwise)."""
    if not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps must be a positive integer, got {reps!r}")
    cfg = dataclasses.replace(cfg, method="backprop")
    spec = input_spec(cfg, input)
    learner = checked_learner(cfg, spec)
    infos = boundary_info(learner, spec, DTYPES[cfg.dtype])
    net = learner.net
    device = torch.device("cuda" if cfg.device == "cuda" else "cpu")
    net.to(device).train()
    stream = synthetic_batches(cfg, spec, torch.Generator().manual_seed(cfg.seed))
    x, y = next(stream)
    x, y = x.to(device), y.to(device)
    step_batch = [next(stream) for _ in range(cfg.micro_batches)]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = threads or cfg.threads or max(1, cores // cfg.stages)
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    kinds = ("forward", "backward", "backward_fresh", "backward_weight", "optimizer", "head_forward",
             "head_backward", "head_optimizer")
    try:
        probes = _block_probes(net, x, y, cfg, device)  # per block: kind -> a function timing it once
        # rounds over all blocks (the first a warm-up), best per block: a burst of load from
        # elsewhere spoils one round of a block, not all of its samples
        best = [dict.fromkeys(kinds, float("inf")) for _ in probes]
        data = dict.fromkeys(("data", "concat"), float("inf"))
        draw = _timer(lambda: _to(next(stream), device), device)
        concat = _timer(lambda: _to((torch.cat([a for a, _ in step_batch]), torch.cat([b for _, b in step_batch])),
                                    device), device)
        for r in range(reps + 1):
            t_data, t_concat = draw(), concat() / cfg.micro_batches
            if r:
                data = {"data": min(data["data"], t_data), "concat": min(data["concat"], t_concat)}
            for per_block, timers in zip(best, probes):
                for kind in kinds:
                    t = timers[kind]()
                    if r:
                        per_block[kind] = min(per_block[kind], t)
    finally:
        torch.set_num_threads(saved_threads)
    out = {kind: [per_block[kind] for per_block in best] for kind in kinds}
    fresh = out.pop("backward_fresh")
    out["accumulate"] = [max(0.0, acc - f) for acc, f in zip(out["backward"], fresh)]
    B = cfg.micro_batch
    label_bytes = y.numel() * y.element_size()
    hardware = (torch.cuda.get_device_name(device) if device.type == "cuda"
                else f"CPU x{cores} ({platform.machine()})")
    return BlockCosts(cfg.model, dict(cfg.model_kwargs), cfg.image_size, B, **out, **data,
                      out_bytes=[B * info.bytes for info in infos], label_bytes=label_bytes,
                      flops=[info.flops + info.head_flops for info in infos], device=cfg.device, threads=threads, hardware=hardware)


def _block_probes(net, x: torch.Tensor, y: torch.Tensor, cfg: PipelineConfig, device: torch.device) -> list[dict]:
    """For every block of ``net`` (fed ``x`` through the blocks before it): kind -> a function
    returning one timing of it in seconds (forward, backward, a first backward into fresh
    gradients, the weights' backward, the optimizer; the same for the block's head)."""
    probes = []
    h = x
    for b, block in enumerate(net.blocks):
        h_in = h.detach().requires_grad_(True) if h.is_floating_point() else h
        # a fresh copy of h_in in the graph for every run, made before the clock starts: a
        # block may write its input in place, which autograd refuses on a leaf
        fed = (lambda h_in=h_in: grad_input(h_in)[1]) if h_in.requires_grad else (lambda h_in=h_in: h_in)
        h_plain = h.detach()
        with torch.no_grad():
            g = torch.randn_like(block(h_plain))
            h = block(h_plain)
        head = net.head if b == len(net.blocks) - 1 else net.make_head(b).to(device)
        feats = h.detach().requires_grad_(True)
        probes.append({
            "forward": _timer(block, device, make_input=fed),
            "backward": _backward_timer(block, h_in, g, device, make_input=fed),
            "backward_fresh": _backward_timer(block, h_in, g, device, fresh=list(block.parameters()),
                                              make_input=fed),
            "backward_weight": _backward_timer(block, h_plain, g, device),
            "optimizer": _optimizer_timer(cfg, list(block.parameters()), device),
            "head_forward": _timer(lambda head=head, feats=feats: net.loss(head(feats), y), device),
            "head_backward": _backward_timer(lambda f, head=head: net.loss(head(f), y), feats, None, device),
            "head_optimizer": _optimizer_timer(cfg, list(head.parameters()), device),
        })
    return probes


def _to(batch, device: torch.device):
    return tuple(t.to(device) for t in batch)


def _timer(fn, device: torch.device, make_input=None):
    """Times ``fn()``, or with ``make_input`` ``fn(make_input())``, the input made untimed."""
    def one() -> float:
        args = () if make_input is None else (make_input(),)
        if args:
            synchronize(device)
        t0 = time.perf_counter()
        fn(*args)
        synchronize(device)
        return time.perf_counter() - t0
    return one


def _backward_timer(fn, inp, grad, device: torch.device, fresh: list | None = None, make_input=None):
    """Times the backward of ``fn(inp)`` alone (the forward reruns, untimed, each time); with
    ``fresh``, those parameters' gradients are dropped first, so the backward writes them anew
    instead of adding to them. ``make_input()``, if given, replaces ``inp`` at every run."""
    def one() -> float:
        for p in fresh or []:
            p.grad = None
        o = fn(inp if make_input is None else make_input())
        if not o.requires_grad:  # no parameters and no input gradient: there is no backward
            return 0.0
        synchronize(device)
        t0 = time.perf_counter()
        o.backward(grad)
        synchronize(device)
        return time.perf_counter() - t0
    return one


def _optimizer_timer(cfg: PipelineConfig, params: list, device: torch.device):
    params = [p for p in params if p.requires_grad]
    if not params:
        return lambda: 0.0
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    opt = make_optimizer(cfg, params)
    opt.step()          # creates the optimizer state, as after the first step of a run
    return _timer(opt.step, device)
