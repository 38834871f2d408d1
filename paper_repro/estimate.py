"""What a pipeline over N devices would give a network, predicted in this process, without
starting any: throughput relative to one device, bytes sent between devices, and memory
per device, for the local pipeline and for pipelined backprop on the same cut.

``pipeline_estimate(make_net, x, y, devices)`` builds the net twice from ``make_net`` (once
as backprop, once as chunked-N: one local module per device) and measures, on the
micro-batch ``(x, y)``:

* **the cut**: the net's blocks go to the devices in contiguous pieces chosen by ``cut``
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
import warnings
from typing import Callable

import pandas as pd
import torch
import torch.nn as nn

from . import cost, methods
from .blocknet import BlockNet, grad_input
from .data import InputSpec
from .distributed.config import PipelineConfig
from .distributed.memory import SavedTensorMeter
from .distributed.cut import boundary_info, plan_stages
from .distributed.cut import balanced_cut
from .distributed.timing import predicted_comm
from .names import CUTS, DEFAULT_CUT, RECOMPUTE_REFERENCE, REFERENCE, check_cut, former_cut
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


# the estimate's former column names (read for one more release): name -> (new column, what of it)
FORMER_COLUMNS = {"devices": ("stages", None), "bytes_forward": ("comm_bytes_per_sample", "forward"),
                  "bytes_backward": ("comm_bytes_per_sample", "backward"),
                  "peak_memory_bytes": ("peak_mem_bytes_per_stage", None), "split": ("stage_plan", None),
                  "balance": ("cut", None)}


class Estimate(pd.DataFrame):
    """The rows of :func:`pipeline_estimate`; printed (``print``, ``repr``, ``to_string()``)
    as the result table that ``simulate`` and ``bench pipeline`` print, every column shown.
    Anything derived from it (a slice, ``set_index``, ...) is a plain DataFrame. A former column
    name (:data:`FORMER_COLUMNS`) reads its new column, with a FutureWarning."""

    @property
    def _constructor(self):
        return pd.DataFrame

    def __getitem__(self, key):
        if isinstance(key, str) and key in FORMER_COLUMNS and key not in self.columns:
            new, part = FORMER_COLUMNS[key]
            warnings.warn(f"the estimate's column {key!r} is now {new!r}" + (f" (its {part!r})" if part else "")
                          + f"; {key!r} goes in the next release", FutureWarning, stacklevel=2)
            column = super().__getitem__(new)
            return column.rename(key) if part is None else column.map(lambda d: d[part]).rename(key)
        return super().__getitem__(key)

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
                      cut: str = DEFAULT_CUT, *, balance: str | None = None) -> Estimate:
    """One row per schedule of :data:`paper_repro.names.PLANNING_SCHEDULES`, in the order of every
    tool's table: the ``devices``-stage local pipeline, one chunk per device (``local``; ``local/M``,
    its optimizer stepping once per step, costs the same on the ideal machine), pipelined backprop
    on the same cut (``1f1b``) and 1F1B with recomputation (``1f1b-recompute``). Columns, named as
    in ``simulate``'s and ``bench pipeline``'s records: ``schedule``, ``stages``, ``micro_batch``,
    ``micro_batches``, ``samples_per_s`` (at this machine's speed), ``comm_bytes_per_sample``
    (``{"forward": bytes, "backward": bytes}`` between devices), ``peak_mem_bytes_per_stage`` and
    ``busy_fraction_per_stage`` (lists, one per device), ``stage_plan`` (the cut: ``{"blocks": [...]}``),
    ``cut`` (the rule that made it), ``method``; and the estimate's own ``training`` (in words), ``flops_per_sample``
    (the slowest device's, bubbles included) and ``speedup`` (throughput relative to one device
    running backprop, whose numbers are in ``.attrs["one_device"]``). The former column names
    ``devices``, ``bytes_forward``, ``bytes_backward``, ``peak_memory_bytes``, ``split`` and
    ``balance`` are still read (``est["devices"]``) for one release, with a FutureWarning naming
    the new one. The devices get contiguous pieces of the net cut by ``cut`` (``"time"``,
    ``"flops"`` or ``"blocks"``; ``balance``: its former name, for one release). ``make_net()``
    returns a fresh BlockNet or nn.Sequential (wrapped with ``num_classes`` default heads); a
    model given instead of a function is deep-copied for each build. Printed, the result is the table of every tool."""
    if not isinstance(devices, int) or devices < 2:
        raise ValueError(f"devices must be an integer >= 2, got {devices!r}")
    cut = check_cut(former_cut(cut, balance, "pipeline_estimate"), CUTS)
    num_classes = num_classes or int(y.max()) + 1
    bp, local, method = _learners(make_net, x, y, devices, num_classes, cut)
    spec, b = _spec(x, y, num_classes), x.shape[0]
    plan = plan_stages(local, devices, infos=boundary_info(local, spec, x.dtype))
    bp_costs = cost.module_costs(bp, x, y)
    one_device = float((bp_costs["forward"] + bp_costs["backward"]).sum())
    work = _stage_work(bp_costs, cost.module_costs(local, x, y), plan)
    memory = _stage_memory(bp, local, plan, x, y)
    param_bytes = sum(p.numel() * p.element_size() for p in bp.net.parameters())
    comm = {k: predicted_comm(PipelineConfig(schedule=k, stages=devices, micro_batch=b, micro_batches=micro_batches),
                              plan, boundary_info(local, spec, x.dtype), spec, param_bytes) for k in ("local", "1f1b")}
    bubble = (micro_batches + devices - 1) / micro_batches
    one_step = _step_seconds(bp, x, y)

    def row(training, schedule, stage_flops, slowest, comm_bytes, mem):
        speedup = one_device / slowest
        return dict(training=training, schedule=schedule, stages=devices, flops_per_sample=slowest,
                    speedup=speedup, samples_per_s=speedup * b / one_step, comm_bytes_per_sample=comm_bytes,
                    peak_mem_bytes_per_stage=mem, busy_fraction_per_stage=[f / slowest for f in stage_flops],
                    method="backprop" if not schedule.startswith("local") else method,
                    stage_plan=plan.to_dict(), micro_batch=b, micro_batches=micro_batches, cut=cut)

    comm = {k: {"forward": c["forward"], "backward": c["backward"]} for k, c in comm.items()}
    local_row = (work["local"], max(work["local"]), comm["local"], memory["local"])
    # rows in the order of every tool's table; on the ideal machine an optimizer step costs
    # nothing, so local/M (one step per M micro-batches) predicts what local does
    rows = [
        row(f"local pipeline ({method}), {devices} devices", "local", *local_row),
        row(f"local pipeline ({method}), one optimizer step per {micro_batches} micro-batches, {devices} devices",
            "local/M", *local_row),
        row(f"pipelined backprop (1F1B), {devices} devices", REFERENCE, work["1f1b"], max(work["1f1b"]) * bubble,
            comm["1f1b"], memory["1f1b"]),
        row(f"pipelined backprop (1F1B, recomputation), {devices} devices", RECOMPUTE_REFERENCE, work["recompute"],
            max(work["recompute"]) * bubble, comm["1f1b"], memory["recompute"]),
    ]
    est = Estimate(rows)
    est.attrs["one_device"] = dict(training="backprop, 1 device", flops_per_sample=one_device,
                                   samples_per_s=b / one_step,
                                   peak_mem_bytes=_state_bytes(bp.parameters())
                                   + _saved_bytes(lambda: bp.losses(x, y)[0]))
    return est


def _learners(make_net, x: torch.Tensor, y: torch.Tensor, devices: int, num_classes: int, cut: str
              ) -> tuple[methods.Learner, methods.Learner, str]:
    """The net as backprop and as the local pipeline's method, one chunk per device cut by
    ``cut``: (backprop learner, local learner, the local method's name)."""
    if isinstance(make_net, (nn.Module, list, tuple)):
        model = make_net
        make_net = lambda: copy.deepcopy(model)  # noqa: E731  (two independent copies of the model)
    elif not callable(make_net):
        raise TypeError(f"make_net must be a function returning a BlockNet or an nn.Sequential (or the model "
                        f"itself), got {type(make_net).__name__}")
    first = make_net()
    wrap = {} if isinstance(first, BlockNet) else {"num_classes": num_classes, "example": x}
    bp = methods.build(first, "backprop", **wrap)
    n_blocks = len(bp.net.blocks)
    if devices > n_blocks:
        raise ValueError(f"devices={devices} is more than the {n_blocks} blocks of the net; use at most {n_blocks}")
    if cut == "blocks":
        method = f"chunked-{devices}"
    else:
        if cut == "time":
            work = _block_seconds(bp.net, x, y)
        else:
            bp_costs = cost.module_costs(bp, x, y)
            blocks_fwd = bp_costs[bp_costs["block"] >= 0].set_index("block")["forward"]
            work = [float(blocks_fwd.loc[i]) for i in range(n_blocks)]
            work[-1] += float(bp_costs[bp_costs["block"] < 0]["forward"].sum())
        method = "chunked@" + ",".join(str(s) for s in balanced_cut(work, devices))
    return bp, methods.build(make_net(), method, **wrap), method


def _stage_work(bp_costs: pd.DataFrame, local_costs: pd.DataFrame, plan) -> dict[str, list[float]]:
    """FLOPs per sample of each device: ``local`` (its modules, heads included), ``1f1b`` (its
    blocks, the net's head on the last) and ``recompute`` (1F1B with every forward run again)."""
    per_block = bp_costs[bp_costs["block"] >= 0].set_index("block")
    head = bp_costs[bp_costs["block"] < 0][["forward", "backward"]].sum().sum()
    last = len(plan.blocks) - 1
    bp_stage = [float((per_block.loc[blocks, "forward"] + per_block.loc[blocks, "backward"]).sum())
                + (head if s == last else 0.0) for s, blocks in enumerate(plan.blocks)]
    by_module = (local_costs["forward"] + local_costs["backward"]).groupby(local_costs["module"]).sum()
    return {"local": [float(by_module[mods].sum()) for mods in plan.modules], "1f1b": bp_stage,
            "recompute": [bp_stage[s] + float(per_block.loc[blocks, "forward"].sum())
                          for s, blocks in enumerate(plan.blocks)]}


def _stage_memory(bp: methods.Learner, local: methods.Learner, plan, x: torch.Tensor, y: torch.Tensor
                  ) -> dict[str, list[int]]:
    """Peak bytes of each device: its parameters, gradients and Adam state, plus what its
    micro-batches in flight keep for backward: one for ``local``; device s of S holds S - s
    under ``1f1b``; under ``recompute`` one micro-batch's saved tensors at a time and the stage
    inputs of the others in flight."""
    devices = len(plan.blocks)
    with torch.no_grad():
        inputs = [run.h_in for run in local.run_modules(x, y)]
    local_saved = [_saved_bytes(lambda mods=mods: sum(local.module_loss(m, inputs[m], y)[1] for m in mods))
                   for mods in plan.modules]
    bp_saved = []
    for s, blocks in enumerate(plan.blocks):
        def run(blocks=blocks, h_in=inputs[plan.modules[s][0]], last=s == devices - 1):
            h = h_in
            for i in blocks:
                h = bp.net.blocks[i](h)
            return bp.net.loss(bp.net.head(h), y) if last else h.sum()
        bp_saved.append(_saved_bytes(run))

    def state(learner, s):
        own = [p for i in plan.blocks[s] for p in learner.net.blocks[i].parameters()]
        heads = [p for m in plan.modules[s] for p in learner.heads[m].parameters()] if learner is local else (
            list(learner.net.head.parameters()) if s == devices - 1 else [])
        return _state_bytes(own + heads)

    stage_input = [inputs[plan.modules[s][0]].numel() * inputs[plan.modules[s][0]].element_size()
                   for s in range(devices)]
    return {"local": [state(local, s) + local_saved[s] for s in range(devices)],
            "1f1b": [state(bp, s) + (devices - s) * bp_saved[s] for s in range(devices)],
            "recompute": [state(bp, s) + bp_saved[s] + (devices - s - 1) * stage_input[s] for s in range(devices)]}
