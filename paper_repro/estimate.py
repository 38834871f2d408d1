"""What a pipeline over N devices would give a network, predicted in this process, without
starting any: throughput relative to one device, bytes sent between devices, and memory
per device, for the local pipeline and for pipelined backprop on the same cut.

``pipeline_estimate(make_net, x, y, devices)`` builds the net twice from ``make_net`` (once
as backprop, once as chunked-N: one local module per device) and measures, on the
micro-batch ``(x, y)``:

* **compute**: forward + backward FLOPs of every block and head, counted by
  :func:`paper_repro.cost.module_costs`. A device's time is its FLOPs (the ideal machine
  of :mod:`paper_repro.cost`: no communication time, every FLOP costs the same). One device
  running backprop needs ``sum`` of everything per micro-batch. The local pipeline's steady
  state takes the slowest device's FLOPs per micro-batch (no bubble: every device updates
  on its own). Pipelined backprop (GPipe / 1F1B) on the same cut takes
  ``(M + N - 1) / M`` times its slowest device per micro-batch, for ``M`` micro-batches per
  step: the fill and drain bubble of every step.
* **communication** per sample: :func:`paper_repro.distributed.timing.predicted_comm` on
  the boundary shapes (local: activations and labels forward; pipelined backprop:
  activations forward, their gradients back).
* **memory** per device: parameters, gradients and two Adam state tensors per parameter,
  plus the bytes autograd saves for backward (measured with
  :class:`paper_repro.distributed.memory.SavedTensorMeter`): one micro-batch for the local
  pipeline (a device finishes a micro-batch's backward before the next forward), ``N - s``
  micro-batches on device ``s`` for 1F1B (the micro-batches in flight there).

A schedule simulator that replays the pipelines event by event (messages, bubbles, memory
over time) will give the same three tables with time instead of FLOPs; until then these
are the ideal-machine numbers.
"""
from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Callable

import pandas as pd
import torch
import torch.nn as nn

from . import cost, methods
from .blocknet import BlockNet
from .distributed.memory import SavedTensorMeter
from .distributed.split import boundary_info, plan_stages
from .distributed.timing import predicted_comm

ADAM_STATE = 2  # tensors of optimizer state per parameter (Adam: first and second moments)


def _spec(x: torch.Tensor, y: torch.Tensor, num_classes: int):
    """The shape description the pipeline helpers read, for the micro-batch ``(x, y)``."""
    if y.dim() == 2:  # next-token targets
        return SimpleNamespace(kind="text", num_classes=num_classes, seq_len=x.shape[1], input_shape=(x.shape[1],))
    return SimpleNamespace(kind="image", num_classes=num_classes, seq_len=None, input_shape=tuple(x.shape[1:]))


def _state_bytes(params) -> int:
    params = list({id(p): p for p in params}.values())
    return (2 + ADAM_STATE) * sum(p.numel() * p.element_size() for p in params)


def _saved_bytes(run: Callable[[], torch.Tensor]) -> int:
    meter = SavedTensorMeter()
    with meter:
        loss = run()
    del loss
    return meter.peak


def pipeline_estimate(make_net: Callable[[], BlockNet | nn.Sequential], x: torch.Tensor, y: torch.Tensor,
                      devices: int, micro_batches: int = 16, num_classes: int | None = None) -> pd.DataFrame:
    """One row per way of training (1 device backprop; ``devices``-stage pipelined backprop,
    GPipe/1F1B; the ``devices``-stage local pipeline, chunked-``devices``) with
    ``flops_per_sample`` (the slowest device's, bubbles included), ``speedup`` (throughput
    relative to one device), ``bytes_forward`` / ``bytes_backward`` per sample between
    devices, and ``peak_memory_bytes`` per device (a list). ``make_net()`` returns a fresh
    BlockNet or nn.Sequential (wrapped with ``num_classes`` default heads); a model given
    instead of a function is deep-copied for each build."""
    if not isinstance(devices, int) or devices < 2:
        raise ValueError(f"devices must be an integer >= 2, got {devices!r}")
    if isinstance(make_net, (nn.Module, list, tuple)):
        model = make_net
        make_net = lambda: copy.deepcopy(model)  # noqa: E731  (two independent copies of the model)
    elif not callable(make_net):
        raise TypeError(f"make_net must be a function returning a BlockNet or an nn.Sequential (or the model "
                        f"itself), got {type(make_net).__name__}")
    num_classes = num_classes or int(y.max()) + 1
    spec = _spec(x, y, num_classes)
    first = make_net()
    wrap = {} if isinstance(first, BlockNet) else {"num_classes": num_classes, "example": x}
    bp = methods.build(first, "backprop", **wrap)
    local = methods.build(make_net(), f"chunked-{devices}", **wrap)
    plan = plan_stages(local, devices, infos=boundary_info(local, spec, x.dtype))
    stage_blocks = plan.blocks
    b = x.shape[0]

    bp_costs = cost.module_costs(bp, x, y)
    one_device = float((bp_costs["forward"] + bp_costs["backward"]).sum())
    per_block = bp_costs[bp_costs["block"] >= 0].set_index("block")
    head = bp_costs[bp_costs["block"] < 0][["forward", "backward"]].sum().sum()
    bp_stage = [float((per_block.loc[blocks, "forward"] + per_block.loc[blocks, "backward"]).sum())
                + (head if s == devices - 1 else 0.0) for s, blocks in enumerate(stage_blocks)]
    local_costs = cost.module_costs(local, x, y)
    local_stage = (local_costs["forward"] + local_costs["backward"]).groupby(local_costs["module"]).sum()
    local_stage = [float(local_stage[mods].sum()) for mods in plan.modules]

    # bytes saved for backward by one micro-batch on each device
    with torch.no_grad():
        inputs = [run.h_in for run in local.run_modules(x, y)]
    local_saved = [_saved_bytes(lambda mods=mods: sum(local.module_loss(m, inputs[m], y)[1] for m in mods))
                   for mods in plan.modules]
    bp_saved = []
    for s, blocks in enumerate(stage_blocks):
        h_in = inputs[plan.modules[s][0]]

        def run(blocks=blocks, h_in=h_in, last=s == devices - 1):
            h = h_in
            for i in blocks:
                h = bp.net.blocks[i](h)
            return bp.net.loss(bp.net.head(h), y) if last else h.sum()
        bp_saved.append(_saved_bytes(run))

    def stage_params(learner, s):
        own = [p for i in stage_blocks[s] for p in learner.net.blocks[i].parameters()]
        heads = [p for m in plan.modules[s] for p in learner.heads[m].parameters()] if learner is local else (
            list(learner.net.head.parameters()) if s == devices - 1 else [])
        return own + heads

    param_bytes = sum(p.numel() * p.element_size() for p in bp.net.parameters())
    comm = {k: predicted_comm(SimpleNamespace(schedule=k, micro_batch=b, micro_batches=micro_batches), plan,
                              boundary_info(local, spec, x.dtype), spec, param_bytes) for k in ("local", "1f1b")}
    bubble = (micro_batches + devices - 1) / micro_batches
    rows = [
        dict(training="backprop, 1 device", devices=1, flops_per_sample=one_device, speedup=1.0,
             bytes_forward=0, bytes_backward=0,
             peak_memory_bytes=[_state_bytes(bp.parameters()) + _saved_bytes(lambda: bp.losses(x, y)[0])]),
        dict(training=f"pipelined backprop (1F1B), {devices} devices", devices=devices,
             flops_per_sample=max(bp_stage) * bubble, speedup=one_device / (max(bp_stage) * bubble),
             bytes_forward=comm["1f1b"]["forward"], bytes_backward=comm["1f1b"]["backward"],
             peak_memory_bytes=[_state_bytes(stage_params(bp, s)) + (devices - s) * bp_saved[s]
                                for s in range(devices)]),
        dict(training=f"local pipeline (chunked-{devices}), {devices} devices", devices=devices,
             flops_per_sample=max(local_stage), speedup=one_device / max(local_stage),
             bytes_forward=comm["local"]["forward"], bytes_backward=comm["local"]["backward"],
             peak_memory_bytes=[_state_bytes(stage_params(local, s)) + local_saved[s] for s in range(devices)]),
    ]
    return pd.DataFrame(rows)
