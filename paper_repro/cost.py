"""FLOPs per block and head, and the ideal-machine time model of the compute study.

Every number is *measured* with :class:`torch.utils.flop_counter.FlopCounterMode` on a
real batch and divided by the batch size, so it is a count **per example** (per sequence
for the language model). Forward and backward are measured separately; backward is not
assumed to be 2x forward. It is not: a block whose input is a stop-gradient (the first
block of every local module, and the first block of the net) computes no input gradient,
so its backward costs about 1x its forward, while an inner block's costs about 2x.

For a learner with local modules ``m = 0..M-1`` (blocks ``B_m``, head ``h_m``), with
``F(.)`` and ``G(.)`` the measured forward and backward FLOPs per example as the block
runs *inside that module*::

    c_m                  = sum_{b in B_m} (F(b) + G(b)) + F(h_m) + G(h_m)
    total_flops          = sum_m c_m                      (all work of one step)
    critical_path_flops  = max_m c_m                      (backprop: M = 1, so c_0)
    fill_flops           = sum_{m=1}^{M-1} sum_{b in B_{m-1}, b <= in(m)} F(b)

``in(m)`` is the block whose output feeds module ``m``. The ideal machine of the paper
(``docs/paper.md``) has one device per local module, unlimited data parallelism inside a
device (the batch size does not change time) and free communication. A step of backprop is one forward and
backward through everything; the local modules run as a pipeline whose steady-state step
is its slowest stage, and whose first batch reaches the last module after the forward
passes of the modules before it (``fill_flops``, paid once per run). Hence, after
``s`` steps with batch size ``B``::

    compute(s) = s * B * total_flops
    time(s)    = fill_flops + s * critical_path_flops

(:mod:`paper_repro.analysis` applies these to the sweep tables.) The counter sees matrix
products, convolutions and attention, not element-wise ops, norms or the loss itself;
those are a few percent at most for the models here and are left out for every method
alike. Overlapping windows re-run their first block, and that re-run is counted.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import pandas as pd
import torch
from torch.utils.flop_counter import FlopCounterMode

from .blocknet import grad_input
from .methods import Learner


def _count(fn) -> tuple[float, object]:
    with FlopCounterMode(display=False) as counter:
        out = fn()
    return float(counter.get_total_flops()), out


@dataclass
class StepCost:
    """Per-example FLOPs of one training step of a learner (see the module docstring)."""

    method: str
    total_flops: float              # sum over modules of forward + backward, blocks and heads
    critical_path_flops: float      # max over modules (backprop: everything)
    fill_flops: float               # pipeline fill, paid once per run (0 for backprop)
    modules: pd.DataFrame           # one row per (module, part): forward / backward per example

    def as_columns(self) -> dict:
        """The three numbers as the columns the sweep stores with every point."""
        return {"total_flops_pe": self.total_flops, "critical_path_flops_pe": self.critical_path_flops,
                "fill_flops_pe": self.fill_flops}


def module_costs(learner: Learner, x: torch.Tensor, y: torch.Tensor) -> pd.DataFrame:
    """Measured forward and backward FLOPs per example of every block and head, per module.

    Returns one row per (module, part), ``part`` being ``"block <i>"`` or ``"head"``, with
    columns ``module``, ``part``, ``block`` (-1 for heads), ``forward``, ``backward``,
    ``input_grad`` (whether the part computes a gradient for its input). The learner is
    not changed: the measurement runs on a deep copy (BatchNorm statistics, ``.grad``).
    """
    learner = copy.deepcopy(learner)
    learner.train()
    n = x.shape[0]
    rows = []
    with torch.no_grad():
        inputs = [run.h_in for run in learner.run_modules(x, y)]
    for m, blocks in enumerate(learner.module_blocks):
        h = inputs[m]
        ins, outs, fwd = [], [], []
        for j, b in enumerate(blocks):
            # inside a module the gradient flows back into the previous block
            leaf, fed = grad_input(h, requires_grad=j > 0)
            ins.append(leaf)
            f, h = _count(lambda b=b, fed=fed: learner.net.blocks[b](fed))
            outs.append(h)
            fwd.append(f)
        head_in, head_fed = grad_input(h)
        head = learner.heads[m]
        f_head, loss = _count(lambda: learner.net.loss(head(head_fed), y))
        g_head, _ = _count(lambda: loss.backward())
        grad, block_rows = head_in.grad, []
        for j in reversed(range(len(blocks))):  # backward through the module, last block first
            inp, out = ins[j], outs[j]
            # a block without parameters on the module's (detached) input has no backward
            g_block = _count(lambda: out.backward(grad))[0] if out.requires_grad else 0.0
            grad = inp.grad if inp.requires_grad else None
            block_rows.append(dict(module=m, part=f"block {blocks[j]}", block=blocks[j], forward=fwd[j] / n,
                                   backward=g_block / n, input_grad=inp.requires_grad))
        rows += block_rows[::-1]
        rows.append(dict(module=m, part="head", block=-1, forward=f_head / n, backward=g_head / n,
                         input_grad=True))
    return pd.DataFrame(rows)


def step_cost(learner: Learner, x: torch.Tensor, y: torch.Tensor) -> StepCost:
    """Per-example ``total_flops``, ``critical_path_flops`` and ``fill_flops`` of one step.

    Formulas (also in the module docstring and the README), with ``c_m`` the forward +
    backward FLOPs of module ``m``'s blocks and head as the method runs them::

        total_flops         = sum_m c_m
        critical_path_flops = max_m c_m       (backprop has one module: all blocks + head)
        fill_flops          = sum_{m>=1} forward FLOPs of module m-1's blocks up to in(m)
    """
    table = module_costs(learner, x, y)
    per_module = (table["forward"] + table["backward"]).groupby(table["module"]).sum()
    fill = 0.0
    for m in range(1, learner.num_modules):
        feed = learner.input_block(m)
        prev = table[(table["module"] == m - 1) & (table["block"] >= 0) & (table["block"] <= feed)]
        fill += float(prev["forward"].sum())
    return StepCost(method=learner.spec, total_flops=float(per_module.sum()),
                    critical_path_flops=float(per_module.max()), fill_flops=fill, modules=table)
