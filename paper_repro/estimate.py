"""What a pipeline over N devices would give a network, predicted in this process, without
starting any: throughput relative to one device, bytes sent between devices, and memory
per device, for the local pipeline and for pipelined backprop on the same cut.

``pipeline_estimate(make_net, x, y, devices)`` builds the net twice from ``make_net`` (once
as backprop, once as chunked-N: one local module per device) and measures, on the
micro-batch ``(x, y)``:

* **the cut**: the net's blocks go to the devices in contiguous pieces chosen by ``balance``
  (:data:`paper_repro.names.CUTS`): ``"time"`` (default, as ``simulate`` and ``bench``)
  balances forward + backward wall time of each block measured here on ``(x, y)``;
  ``"flops"`` balances forward FLOPs; ``"blocks"`` gives each device as many blocks as
  chunked-N. The local pipeline trains one chunk per device on that cut (``chunked@...``).
* **compute**: forward + backward FLOPs of every block and head, counted by
  :func:`paper_repro.cost.module_costs`. A device's time is its FLOPs (the ideal machine
  of :mod:`paper_repro.cost`: no communication time, every FLOP costs the same). One device
  running backprop needs ``sum`` of everything per micro-batch. The local pipeline's steady
  state takes the slowest device's FLOPs per micro-batch (no bubble: every device updates
  on its own). Pipelined backprop (GPipe / 1F1B) on the same cut takes
  ``(M + N - 1) / M`` times its slowest device per micro-batch, for ``M`` micro-batches per
  step: the fill and drain bubble of every step. 1F1B with recomputation runs every forward
  twice (its backward recomputes the activations), holding only each micro-batch's stage
  input between them.
* **samples/s**: throughput relative to one device times the samples/s of one backprop step
  on ``(x, y)`` timed here (the ideal machine at this machine's speed); busy per stage is a
  device's FLOPs over the slowest device's, bubbles included.
* **communication** per sample: :func:`paper_repro.distributed.timing.predicted_comm` on
  the boundary shapes (local: activations and labels forward; pipelined backprop:
  activations forward, their gradients back).
* **memory** per device: parameters, gradients and two Adam state tensors per parameter,
  plus the bytes autograd saves for backward (measured with
  :class:`paper_repro.distributed.memory.SavedTensorMeter`): one micro-batch for the local
  pipeline (a device finishes a micro-batch's backward before the next forward), ``N - s``
  micro-batches on device ``s`` for 1F1B (the micro-batches in flight there).

Printed, the result is the result table of ``simulate`` and ``bench pipeline``
(:mod:`paper_repro.report_table`); ``paper-repro simulate`` replays the schedules event by event
with calibrated times, and ``bench pipeline`` runs them.
"""
from __future__ import annotations

import copy
import time
from typing import Callable

import pandas as pd
import torch
import torch.nn as nn

from . import cost, methods
from .blocknet import BlockNet, grad_input
from .data import InputSpec
from .distributed.config import PipelineConfig
from .distributed.memory import SavedTensorMeter
from .distributed.split import boundary_info, plan_stages
from .distributed.split import balanced_split
from .distributed.timing import predicted_comm
from .names import CUTS, DEFAULT_CUT, RECOMPUTE_REFERENCE, REFERENCE, check_cut
from .report_table import format_table

ADAM_STATE = 2  # tensors of optimizer state per parameter (Adam: first and second moments)


def _spec(x: torch.Tensor, y: torch.Tensor, num_classes: int) -> InputSpec:
    """The shape description the pipeline helpers read, for the micro-batch ``(x, y)``."""
    if y.dim() == 2:  # next-token targets
        return InputSpec.text(num_classes, x.shape[1])
    return InputSpec.image(num_classes, x.shape[1:])


def _state_bytes(params) -> int:
    params = list({id(p): p for p in params}.values())
    return (2 + ADAM_STATE) * sum(p.numel() * p.element_size() for p in params)


def _saved_bytes(run: Callable[[], torch.Tensor]) -> int:
    meter = SavedTensorMeter()
    with meter:
        loss = run()
    del loss
    return meter.peak


class Estimate(pd.DataFrame):
    """The rows of :func:`pipeline_estimate`; printed (``print``, ``repr``, ``to_string()``)
    as the result table that ``simulate`` and ``bench pipeline`` print, every column shown.
    Anything derived from it (a slice, ``set_index``, ...) is a plain DataFrame."""

    @property
    def _constructor(self):
        return pd.DataFrame

    def to_string(self, *args, **kwargs) -> str:
        if args or kwargs:
            return pd.DataFrame(self).to_string(*args, **kwargs)
        return format_table(self.to_dict("records"))

    def __repr__(self) -> str:
        return self.to_string()

    __str__ = __repr__


def _block_seconds(net, x: torch.Tensor, y: torch.Tensor, reps: int = 3) -> list[float]:
    """Forward + backward wall time of every block of ``net`` on ``(x, y)`` (the last one with
    the net's head and loss), best of ``reps``, on a copy of the net."""
    net = copy.deepcopy(net).train()
    with torch.no_grad():
        inputs, h = [], x
        for block in net.blocks:
            inputs.append(h)
            h = block(h)
    last = len(net.blocks) - 1
    best = [float("inf")] * len(net.blocks)
    for _ in range(reps):
        for b, block in enumerate(net.blocks):
            _, h_in = grad_input(inputs[b], requires_grad=inputs[b].is_floating_point())
            t0 = time.perf_counter()
            out = block(h_in)
            if b == last:
                net.loss(net.head(out), y).backward()
            else:
                out.backward(torch.ones_like(out))
            best[b] = min(best[b], time.perf_counter() - t0)
    return best


def _step_seconds(learner, x: torch.Tensor, y: torch.Tensor, reps: int = 3) -> float:
    """Wall time of one forward + backward of ``learner`` on ``(x, y)``, best of ``reps``."""
    learner = copy.deepcopy(learner)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        sum(learner.losses(x, y)).backward()
        best = min(best, time.perf_counter() - t0)
    return best


def pipeline_estimate(make_net: Callable[[], BlockNet | nn.Sequential], x: torch.Tensor, y: torch.Tensor,
                      devices: int, micro_batches: int = 16, num_classes: int | None = None,
                      balance: str = DEFAULT_CUT) -> Estimate:
    """One row per schedule of :data:`paper_repro.names.PLANNING_SCHEDULES`, in the order of every
    tool's table: the ``devices``-stage local pipeline, one chunk per device (``local``; ``local/M``,
    its optimizer stepping once per step, costs the same on the ideal machine), pipelined backprop
    on the same cut (``1f1b``) and 1F1B with recomputation (``1f1b-recompute``). Columns, named as
    in ``simulate``'s and ``bench pipeline``'s records: ``schedule``, ``stages``, ``micro_batch``,
    ``micro_batches``, ``samples_per_s`` (at this machine's speed), ``comm_bytes_per_sample``
    (``{"forward": bytes, "backward": bytes}`` between devices), ``peak_mem_bytes_per_stage`` and
    ``busy_fraction_per_stage`` (lists, one per device), ``split`` (the cut: ``{"blocks": [...]}``),
    ``balance``, ``method``; and the estimate's own ``training`` (in words), ``flops_per_sample``
    (the slowest device's, bubbles included) and ``speedup`` (throughput relative to one device
    running backprop, whose numbers are in ``.attrs["one_device"]``). ``devices``,
    ``bytes_forward``, ``bytes_backward`` and ``peak_memory_bytes`` repeat ``stages``,
    ``comm_bytes_per_sample`` and ``peak_mem_bytes_per_stage`` under their former names for one
    release. The devices get contiguous pieces of the net cut by ``balance`` (``"time"``,
    ``"flops"`` or ``"blocks"``). ``make_net()`` returns a fresh BlockNet or nn.Sequential
    (wrapped with ``num_classes`` default heads); a model given instead of a function is
    deep-copied for each build. Printed, the result is the table of every tool."""
    if not isinstance(devices, int) or devices < 2:
        raise ValueError(f"devices must be an integer >= 2, got {devices!r}")
    check_cut(balance, CUTS)
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
    bp_costs = cost.module_costs(bp, x, y)
    n_blocks = len(bp.net.blocks)
    if devices > n_blocks:
        raise ValueError(f"devices={devices} is more than the {n_blocks} blocks of the net; use at most {n_blocks}")
    if balance == "blocks":
        method = f"chunked-{devices}"
    else:
        if balance == "time":
            work = _block_seconds(bp.net, x, y)
        else:
            blocks_fwd = bp_costs[bp_costs["block"] >= 0].set_index("block")["forward"]
            work = [float(blocks_fwd.loc[i]) for i in range(n_blocks)]
            work[-1] += float(bp_costs[bp_costs["block"] < 0]["forward"].sum())
        method = "chunked@" + ",".join(str(s) for s in balanced_split(work, devices))
    local = methods.build(make_net(), method, **wrap)
    plan = plan_stages(local, devices, infos=boundary_info(local, spec, x.dtype))
    stage_blocks = plan.blocks
    b = x.shape[0]
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
    comm = {k: predicted_comm(PipelineConfig(schedule=k, stages=devices, micro_batch=b, micro_batches=micro_batches),
                              plan, boundary_info(local, spec, x.dtype), spec, param_bytes) for k in ("local", "1f1b")}
    bubble = (micro_batches + devices - 1) / micro_batches
    # recomputation: every forward runs again in the backward; a device keeps only the stage
    # inputs of its micro-batches in flight, and one micro-batch's saved tensors at a time
    rc_stage = [bp_stage[s] + float(per_block.loc[blocks, "forward"].sum()) for s, blocks in enumerate(stage_blocks)]
    stage_input = [inputs[plan.modules[s][0]].numel() * inputs[plan.modules[s][0]].element_size()
                   for s in range(devices)]
    one_step = _step_seconds(bp, x, y)
    common = dict(micro_batch=b, micro_batches=micro_batches, balance=balance)

    def row(training, schedule, stage_flops, slowest, comm_bytes, memory):
        speedup = one_device / slowest
        comm_bytes = {"forward": comm_bytes[0], "backward": comm_bytes[1]}
        return dict(training=training, schedule=schedule, stages=devices, flops_per_sample=slowest,
                    speedup=speedup, samples_per_s=speedup * b / one_step, comm_bytes_per_sample=comm_bytes,
                    peak_mem_bytes_per_stage=memory, busy_fraction_per_stage=[f / slowest for f in stage_flops],
                    method="backprop" if not schedule.startswith("local") else method, split=plan.to_dict(),
                    **common,
                    # former names of stages, comm_bytes_per_sample and peak_mem_bytes_per_stage
                    # (deprecated, removed in the next release)
                    devices=devices, bytes_forward=comm_bytes["forward"], bytes_backward=comm_bytes["backward"],
                    peak_memory_bytes=memory)

    bp_comm = (comm["1f1b"]["forward"], comm["1f1b"]["backward"])
    local_row = (local_stage, max(local_stage), (comm["local"]["forward"], comm["local"]["backward"]),
                 [_state_bytes(stage_params(local, s)) + local_saved[s] for s in range(devices)])
    # rows in the order of every tool's table; on the ideal machine an optimizer step costs
    # nothing, so local/M (one step per M micro-batches) predicts what local does
    rows = [
        row(f"local pipeline ({method}), {devices} devices", "local", *local_row),
        row(f"local pipeline ({method}), one optimizer step per {micro_batches} micro-batches, {devices} devices",
            "local/M", *local_row),
        row(f"pipelined backprop (1F1B), {devices} devices", REFERENCE, bp_stage, max(bp_stage) * bubble, bp_comm,
            [_state_bytes(stage_params(bp, s)) + (devices - s) * bp_saved[s] for s in range(devices)]),
        row(f"pipelined backprop (1F1B, recomputation), {devices} devices", RECOMPUTE_REFERENCE, rc_stage,
            max(rc_stage) * bubble, bp_comm,
            [_state_bytes(stage_params(bp, s)) + bp_saved[s] + (devices - s - 1) * stage_input[s]
             for s in range(devices)]),
    ]
    est = Estimate(rows)
    est.attrs["one_device"] = dict(training="backprop, 1 device", flops_per_sample=one_device,
                                   samples_per_s=b / one_step,
                                   peak_mem_bytes=_state_bytes(bp.parameters())
                                   + _saved_bytes(lambda: bp.losses(x, y)[0]))
    return est
