"""Per-stage costs of a schedule from per-block costs (any cut), or uniform costs for teaching.

A *piece* is a contiguous run of blocks that one schedule action runs: one per processor for
GPipe, 1F1B and local, two per processor for the interleaved and V schedules.

* Pipelined backprop: a piece costs the sum of its blocks' forward and backward; the net's
  first block computes no input gradient (its input is data); the last piece also runs the
  net's head and loss. One optimizer step per processor per step.
* Local (one local module per stage, the paper's setting): the stage's first block computes no
  input gradient either (its input is detached), and every stage runs its own auxiliary head
  (the last stage: the net's head).

A block's backward is calibrated adding to existing gradients; ``fresh`` (see
:func:`fresh_share`) is the share of micro-batches whose backward writes them anew instead,
which costs ``accumulate[b]`` less.

Where one action's backward is split into an input-gradient half ``I`` and a weight-gradient
half ``W`` (zero-bubble schedules), a block's ``W`` is its measured weight-only backward and
its ``I`` the rest; the head's backward counts as ``I`` (the gradient flows through it first).

The input costs the first processor ``data`` per micro-batch, and the backprop schedules, which
split one batch per step, ``concat`` more.
"""
from __future__ import annotations

from .. import methods
from ..distributed.cut import balanced_cut
from ..names import CUTS, DEFAULT_CUT, check_cut
from .calibrate import BlockCosts
from .engine import Costs
from .schedules import base_schedule, stages_per_rank

def pieces(bc: BlockCosts, count: int, cut: str = DEFAULT_CUT) -> list[list[int]]:
    """Cut the net's blocks into ``count`` contiguous pieces (one of ``CUTS``): balancing the
    calibrated forward+backward time (``"time"``, the default, as ``bench pipeline`` and
    ``estimate`` do), the forward FLOPs (``"flops"``), or as many blocks in each as the
    chunked-``count`` method gives (``"blocks"``)."""
    check_cut(cut, CUTS)
    if not isinstance(count, int) or not 1 <= count <= bc.blocks:
        raise ValueError(f"cannot cut the {bc.blocks} blocks of {bc.model} into {count!r} pieces; "
                         f"use 1..{bc.blocks}")
    if cut == "blocks":
        return methods.module_blocks(f"chunked-{count}", bc.blocks)
    if cut == "flops" and len(bc.flops) != bc.blocks:
        raise ValueError(f"the calibration of {bc.model} records no FLOPs per block (made before they were); "
                         "calibrate again, or cut by 'time' or 'blocks'")
    work = list(bc.flops) if cut == "flops" else [f + b for f, b in zip(bc.forward, bc.backward)]
    bounds = [0, *balanced_cut(work, count), bc.blocks]
    return [list(range(bounds[i], bounds[i + 1])) for i in range(count)]


def fresh_share(schedule: str, micro_batches: int, update_every: int = 1) -> float:
    """The share of micro-batches whose backward finds no gradient to add to: after every
    optimizer step the gradients are dropped (``zero_grad(set_to_none=True)``), so it is one in
    ``update_every`` for ``local``, and one in a step's ``micro_batches`` for ``local/M``
    and pipelined backprop."""
    base, _ = base_schedule(schedule)
    return 1.0 / (update_every if base == "local" else micro_batches)


def schedule_costs(bc: BlockCosts, schedule: str, stages: int, cut: str = DEFAULT_CUT,
                   blocks: list[list[int]] | None = None, fresh: float = 0.0) -> Costs:
    """Costs of every piece of ``schedule`` on ``stages`` processors (``blocks``: the pieces'
    blocks, default :func:`pieces` cut by ``cut``; ``fresh``: :func:`fresh_share`)."""
    if not 0.0 <= fresh <= 1.0:
        raise ValueError(f"fresh must be a share between 0 and 1, got {fresh!r}")
    base, _ = base_schedule(schedule)
    count = stages * stages_per_rank(schedule)
    chosen = blocks if blocks is not None else pieces(bc, count, cut)
    if len(chosen) != count:
        raise ValueError(f"schedule {schedule!r} on {stages} stages needs {count} pieces, got {len(chosen)}")
    local = base.startswith("local")
    fwd, inp, wgt, opt = [], [], [], []
    last = bc.blocks - 1
    for v, piece in enumerate(chosen):
        f = i = w = o = 0.0
        for b in piece:
            f += bc.forward[b]
            weight = min(bc.backward_weight[b], bc.backward[b])    # timing noise can invert them
            w += max(0.0, weight - fresh * bc.accumulate_or_zero(b))
            o += bc.optimizer[b]
            no_input_grad = b == 0 or (local and b == piece[0])
            i += 0.0 if no_input_grad else bc.backward[b] - weight
        end = piece[-1]
        if local or end == last:
            f += bc.head_forward[end]
            i += bc.head_backward[end]
            o += bc.head_optimizer[end]
        fwd.append(f)
        inp.append(i)
        wgt.append(w)
        opt.append(o)
    send = [bc.out_bytes[piece[-1]] + (bc.label_bytes if local else 0) for piece in chosen[:-1]]
    return Costs(fwd, inp, wgt, opt, send, data=bc.data + (0.0 if local else bc.concat))


def uniform_costs(schedule: str, stages: int, forward: float, backward: float,
                  weight: float | None = None, send_bytes: float = 0.0) -> Costs:
    """Every processor takes ``forward`` per forward and ``backward`` per whole backward of a
    micro-batch (``weight`` of it is the weight-gradient half; default half the backward), no
    optimizer time; schedules with several pieces per processor split these evenly."""
    for key, value in (("forward", forward), ("backward", backward)):
        if not value >= 0:
            raise ValueError(f"uniform {key} time must be >= 0 seconds, got {value!r}")
    weight = backward / 2 if weight is None else weight
    if not 0 <= weight <= backward:
        raise ValueError(f"uniform weight-gradient time must be between 0 and the backward time "
                         f"{backward!r}, got {weight!r}")
    k = stages_per_rank(schedule)
    n = stages * k
    return Costs([forward / k] * n, [(backward - weight) / k] * n, [weight / k] * n,
                 [0.0] * n, [send_bytes] * (n - 1))
