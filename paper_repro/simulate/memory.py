"""Exact memory accounting of every stage under every schedule, at any scale, on the meta device.

Each stage's forward (blocks, head, loss) runs once on **meta tensors** -- shapes and dtypes
only, no memory, no arithmetic, so ResNet-34 at 224 px costs milliseconds -- under the same
``saved_tensors_hooks`` meter the real runs use (:class:`~paper_repro.distributed.memory.SavedTensorMeter`
counts a storage once, parameters excluded). That gives, per micro-batch:

* ``saved_in``: bytes saved for backward, the stage's input included;
* ``saved_ex``: the same with the input excluded (stage 0 of pipelined backprop: its inputs are
  views of one tensor holding the whole step, which is counted once, see ``step_input``);
* ``recompute``: what the stage's blocks and head save without the loss, input excluded: the
  live set while one micro-batch is recomputed.

A schedule holds ``k`` micro-batches in flight on a stage (GPipe: all ``M``; 1F1B: up to
``S - rank``, the most torch's own loop holds; interleaved and zero-bubble schedules: counted
moment by moment from torch's action lists, a piece's activations held from its ``F`` until its
``B`` or ``W``; local: one, since every micro-batch's backward runs right after its forward).
Then, per stage, with ``in`` one micro-batch's input bytes::

    local                 saved_in
    pipelined backprop    k * saved_in                          (stage 0: k * saved_ex + M * in)
    ... + recomputation   k * (in + loss) + recompute           (stage 0: M * in + recompute)

which is what the CPU runs record as ``saved_for_backward``, except for one term of torch's own:
on its first step ``torch.distributed.pipelining`` runs a forward with gradients for metadata
inference and keeps its outputs (``_fwd_outputs_for_bwd_meta``); on stage 0, whose graph no
backward frees, that holds one more micro-batch's activations and one more copy of the step's
input for the rest of the run (``first_step_inference``; with checkpointing only the input,
which it shares). The CPU records of GPipe and 1F1B match the sum within 0.1%. On top come parameters, gradients
(one copy of each trainable parameter), optimizer state (Adam: two copies, SGD with momentum:
one), message buffers (pipelined backprop: a receive buffer per micro-batch in flight for
the input and for the output's gradient; local: two receive buffers for the input and
``max_in_flight`` unreceived sends) and ``temporaries``: the most one micro-batch's forward or
backward pass has alive above what it started or ended with (:class:`LiveBytes`; the largest of
the processor's pieces).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ..blocknet import grad_input
from ..distributed.config import DTYPES, PipelineConfig
from .inputs import checked_learner, input_spec
from ..distributed.memory import SavedTensorMeter
from .schedules import base_schedule, in_flight_rank_peak, stages_per_rank, torch_order

OPTIMIZER_COPIES = {"adam": 2, "sgd": 1}


@dataclass
class PieceBytes:
    """Per-micro-batch bytes of one piece (see the module docstring). ``saved_in``, ``saved_ex``,
    ``recompute`` and ``loss`` leave out the module buffers autograd saves (BatchNorm's running
    statistics: one storage, whatever the number of micro-batches; ``shared``) and the labels."""
    saved_in: int
    saved_ex: int
    recompute: int
    loss: int
    shared: int
    labels: int
    input: int
    output: int
    params: int
    temporaries: int = 0


class MetaNet:
    """The model of ``cfg`` on the meta device: runs any piece at any micro-batch size for free.
    ``input``: the kind of synthetic input (:func:`.inputs.input_spec`)."""

    def __init__(self, cfg: PipelineConfig, input: str | None = None):
        self.spec = input_spec(cfg, input)
        self.cfg = cfg
        learner = checked_learner(cfg, self.spec)
        self.net = copy.deepcopy(learner.net).to("meta").train()
        self.dtype = DTYPES[cfg.dtype]
        self._heads: dict[int, torch.nn.Module] = {}
        self._pieces: dict[tuple, PieceBytes] = {}
        self._shapes: dict[tuple, tuple] = {}

    @property
    def blocks(self) -> int:
        return len(self.net.blocks)

    def head(self, b: int) -> torch.nn.Module:
        if b == self.blocks - 1:
            return self.net.head
        if b not in self._heads:
            self._heads[b] = self.net.make_head(b).to(dtype=self.dtype).to("meta").train()
        return self._heads[b]

    def _input(self, first: int, B: int) -> torch.Tensor:
        if first == 0:
            if self.spec.kind == "text":
                return torch.empty(B, self.spec.seq_len, dtype=torch.long, device="meta")
            return torch.empty(B, *self.spec.input_shape, dtype=self.dtype, device="meta")
        if (first, B) not in self._shapes:
            h = self._input(first - 1, B)
            with torch.no_grad():
                h = self.net.blocks[first - 1](h)
            self._shapes[(first, B)] = (tuple(h.shape), h.dtype)
        shape, dtype = self._shapes[(first, B)]
        return torch.empty(shape, dtype=dtype, device="meta")

    def _labels(self, B: int) -> torch.Tensor:
        shape = (B, self.spec.seq_len) if self.spec.kind == "text" else (B,)
        return torch.empty(shape, dtype=torch.long, device="meta")

    def piece(self, blocks: list[int], B: int, head: bool, input_grad: bool) -> PieceBytes:
        """Bytes of ``blocks`` (+ head and loss if ``head``) on one micro-batch of ``B`` samples."""
        key = (tuple(blocks), B, head, input_grad)
        if key not in self._pieces:
            self._pieces[key] = self._measure(blocks, B, head, input_grad)
        return self._pieces[key]

    def _measure(self, blocks: list[int], B: int, head: bool, input_grad: bool) -> PieceBytes:
        leaf = self._input(blocks[0], B)
        if input_grad and leaf.is_floating_point():
            leaf.requires_grad_(True)

        def fresh():
            """The input for one pass: with a gradient, a new copy of ``leaf`` in the graph, made
            before any meter starts, so a block that writes its input in place writes the copy."""
            return grad_input(leaf)[1] if leaf.requires_grad else leaf
        mods = [self.net.blocks[b] for b in blocks] + ([self.head(blocks[-1])] if head else [])
        params = list({id(p): p for m in mods for p in m.parameters()}.values())
        buffers = [t for m in mods for t in m.buffers()]
        y = self._labels(B)
        n = len(blocks)
        saved_in, loss, out = self._run(mods, n, fresh(), y, [*params, *buffers, y], head)
        x = fresh()
        saved_ex, _, _ = self._run(mods, n, x, y, [*params, *buffers, y, x], head)
        x = fresh()
        recompute, _, _ = self._run(mods, n, x, y, [*params, *buffers, x], False)
        everything, temporaries = self._passes(mods, fresh(), y, head, params)
        labels = _nbytes(y) if head else 0
        return PieceBytes(saved_in, saved_ex, recompute, loss, everything - saved_in - labels, labels,
                          _nbytes(leaf), _nbytes(out), sum(_nbytes(p) for p in params), temporaries)

    def _passes(self, mods, x, y, with_loss: bool, params) -> tuple[int, int]:
        """One forward and backward of the piece: (the forward's peak saved bytes, parameters
        excluded; the temporaries). Temporaries: bytes one micro-batch's forward or backward pass
        needs above what is alive when the pass ends (forward) or starts (backward): outputs an op
        frees once the next has used them, activation gradients, the input's gradient. Gradients
        already exist, as when pipelined backprop accumulates (added in place; their own bytes are
        counted apart)."""
        grads = [p for p in params if p.requires_grad]
        for q in grads:
            q.grad = torch.zeros_like(q)
        live, meter = LiveBytes(), MetaSavedTensorMeter(params)
        try:
            with live:
                with meter:
                    h = x
                    for m in mods:
                        h = m(h)
                    out = self.net.loss(h, y) if with_loss else h
                live.sweep()
                forward = live.peak - live.live
                grad = None if with_loss else torch.empty_like(out)
                live.sweep()
                live.peak = start = live.live
                out.backward(grad)
                backward = live.peak - start
        finally:
            for q in grads:
                q.grad = None
        return meter.peak, max(forward, backward)

    def _run(self, mods, n_blocks: int, x, y, exclude, with_loss: bool) -> tuple[int, int, torch.Tensor]:
        """(peak saved bytes, bytes the loss adds, the last block's output) of one forward."""
        meter = MetaSavedTensorMeter(exclude)
        with meter:
            h = x
            for i, m in enumerate(mods):
                h = m(h)
                if i == n_blocks - 1:
                    out = h
            before = meter.current
            loss = self.net.loss(h, y) if with_loss else None
            added = meter.current - before
        del loss
        return meter.peak, added, out


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages that operators create under it and that are still alive (``live``),
    and their peak (``peak``). It holds each such storage and, after every operator, forgets those
    it alone still holds (their use count is 1): freed by the program, whichever thread or
    library dropped the last reference. Works on the meta device, where storages have sizes but
    no memory."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self._held: dict = {}           # storage id -> (the storage, its bytes)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.sweep()
        inputs = {t.untyped_storage()._cdata for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                # new storages only: not a view of a known one, not an input written in place
                if storage._cdata not in self._held and storage._cdata not in inputs:
                    self._held[storage._cdata] = (storage, storage.nbytes())
                    self.live += storage.nbytes()
        self.peak = max(self.peak, self.live)
        return out

    def sweep(self) -> None:
        """Forget the storages nothing but this meter holds any more."""
        for key, (storage, n) in list(self._held.items()):
            if torch._C._storage_Use_Count(storage._cdata) == 1:
                del self._held[key]
                self.live -= n

    def __exit__(self, *exc):
        self._held.clear()
        return super().__exit__(*exc)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _storage_key(t: torch.Tensor) -> tuple:
    return (t.device.type, t.untyped_storage()._cdata)


class MetaSavedTensorMeter(SavedTensorMeter):
    """:class:`SavedTensorMeter` for meta tensors, which have no data pointer: a storage is known
    by the identity of its storage object instead."""

    @staticmethod
    def key(t: torch.Tensor) -> tuple:
        return _storage_key(t)

    @staticmethod
    def counts(t: torch.Tensor) -> bool:
        return True


def stage_memory(meta: MetaNet, schedule: str, stages: int, micro_batch: int, micro_batches: int,
                 cut: list[list[int]], optimizer: str = "adam", max_in_flight: int = 2,
                 first_step_inference: bool = True) -> list[dict]:
    """Bytes held at the peak by every processor of ``schedule`` (see the module docstring).

    ``cut`` lists the blocks of every piece (``stages`` pieces, or two per processor for the
    interleaved and V schedules). Returns per processor: ``saved_for_backward``, ``params``,
    ``grads``, ``optimizer``, ``buffers`` and ``peak_bytes`` (their sum)."""
    if optimizer not in OPTIMIZER_COPIES:
        raise ValueError(f"unknown optimizer {optimizer!r}; valid: {', '.join(OPTIMIZER_COPIES)}")
    base, recompute = base_schedule(schedule)
    local = base.startswith("local")
    if len(cut) != stages * stages_per_rank(schedule):
        raise ValueError(f"schedule {schedule!r} on {stages} stages needs "
                         f"{stages * stages_per_rank(schedule)} pieces, got {len(cut)}")
    B, M, N = micro_batch, micro_batches, len(cut)
    pb = [meta.piece(blocks, B, head=local or v == N - 1, input_grad=v > 0 and not local)
          for v, blocks in enumerate(cut)]
    records = []
    if local:
        for s, p in enumerate(pb):
            buffers = (2 * p.input if s > 0 else 0) + (max_in_flight * p.output if s < N - 1 else 0)
            records.append(_record(p.saved_in + p.shared + p.labels, p.params, optimizer, buffers,
                                   p.temporaries))
        return records
    order = torch_order(schedule, stages, M)
    if recompute:
        held = [(p.input if v > 0 else 0) + p.loss for v, p in enumerate(pb)]
    else:
        held = [p.saved_in if v > 0 else p.saved_ex for v, p in enumerate(pb)]
    saved = in_flight_rank_peak(order, held)
    buffers = in_flight_rank_peak(order, [(p.input if v > 0 else 0) + (p.output if v < N - 1 else 0)
                                          for v, p in enumerate(pb)])
    for r in range(stages):
        mine = [v for v in range(N) if order.stage_rank[v] == r]
        # once per stage, not per micro-batch: the step's input (stage 0; its micro-batches are
        # views of it), the step's labels (last stage, likewise) and the saved module buffers
        total = saved[r] + (M * pb[0].input if 0 in mine else 0) + (M * pb[-1].labels if N - 1 in mine else 0)
        if recompute:
            total += max(pb[v].recompute + pb[v].shared for v in mine)
        else:
            total += sum(pb[v].shared for v in mine)
            if first_step_inference and 0 in mine:
                total += pb[0].saved_ex + M * pb[0].input
        records.append(_record(total, sum(pb[v].params for v in mine), optimizer, buffers[r],
                               max(pb[v].temporaries for v in mine)))
    return records


def _record(saved: float, params: int, optimizer: str, buffers: float, temporaries: int) -> dict:
    opt = OPTIMIZER_COPIES[optimizer] * params
    return {"saved_for_backward": int(saved), "params": params, "grads": params, "optimizer": opt,
            "buffers": int(buffers), "temporaries": int(temporaries),
            "peak_bytes": int(saved + 2 * params + opt + buffers + temporaries)}
