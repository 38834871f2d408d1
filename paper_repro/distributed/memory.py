"""Peak memory of one stage.

CUDA: ``torch.cuda.max_memory_allocated`` over the whole run (everything the caching allocator
handed out: activations, parameters, gradients, optimizer state, the tensors messages are sent
from and received into). NCCL's own staging buffers and the CUDA context live outside the
allocator and are not counted.

CPU has no allocator statistics, so the CPU figure is a model of what dominates:

    peak bytes held for backward  +  parameters  +  gradients  +  optimizer state

*Held for backward* is measured with ``torch.autograd.graph.saved_tensors_hooks``: the pack hook
adds the bytes of every tensor autograd saves (once per storage, parameters excluded because
they are counted separately) and the bytes are released when autograd drops the saved tensor;
the meter keeps the maximum. Gradients are counted as one copy of every trainable parameter,
optimizer state as the tensors in ``optimizer.state``. The terms are peaks of different moments
added together, so the sum is an upper bound of the true peak of these terms. Not counted on
CPU: communication buffers (messages in flight, ``torch.distributed.pipelining``'s per-micro-
batch receive buffers) and temporaries that autograd does not keep.

``torch.utils.checkpoint(use_reentrant=False)`` hides the tensors it recomputes during backward
from outer hooks, so for the recomputation baseline the bytes the stage's forward saves for one
micro-batch are measured once without checkpointing (:func:`saved_bytes_of`, the input itself
excluded) and added to the peak the hooks see (which holds the checkpointed inputs of every
micro-batch in flight). In 1F1B's steady state these two are held at the same time (the inputs
of the in-flight micro-batches while one of them is recomputed), so the sum is what the stage
holds then.

A storage is counted whole, once: ``torch.distributed.pipelining`` splits the step's input into
views of one tensor, so stage 0 of a baseline is charged the whole step's input (it is indeed
kept alive for the whole step).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .messages import nbytes


class SavedTensorMeter:
    """Context manager: current and peak bytes of tensors saved for backward inside it."""

    def __init__(self, exclude: list[torch.Tensor] = ()):
        self.exclude = {self.key(p) for p in exclude}
        self.live: dict[tuple, list[int]] = {}     # storage -> [references, bytes]
        self.current = 0
        self.peak = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    @staticmethod
    def key(t: torch.Tensor) -> tuple:
        """Which storage ``t`` views (two saved views of one storage are counted once)."""
        return _key(t)

    @staticmethod
    def counts(t: torch.Tensor) -> bool:
        """Whether ``t`` is metered: real tensors only (meta tensors hold no memory)."""
        return t.device.type != "meta"

    def _pack(self, t: torch.Tensor):
        if not isinstance(t, torch.Tensor) or not self.counts(t):
            return t
        key = self.key(t)
        if key in self.exclude:
            return t
        entry = self.live.get(key)
        if entry is None:
            size = t.untyped_storage().nbytes()
            self.live[key] = [1, size]
            self.current += size
            self.peak = max(self.peak, self.current)
        else:
            entry[0] += 1
        return _Saved(t, key, self)

    @staticmethod
    def _unpack(packed):
        return packed.tensor if isinstance(packed, _Saved) else packed

    def release(self, key: tuple) -> None:
        entry = self.live.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            self.current -= entry[1]
            del self.live[key]

    def __enter__(self):
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        return self._hooks.__exit__(*exc)


class _Saved:
    __slots__ = ("tensor", "key", "meter")

    def __init__(self, tensor, key, meter):
        self.tensor, self.key, self.meter = tensor, key, meter

    def __del__(self):
        self.meter.release(self.key)


def _key(t: torch.Tensor) -> tuple:
    return (t.device.type, t.device.index, t.untyped_storage().data_ptr())


def state_bytes(params: list[nn.Parameter], optimizer: torch.optim.Optimizer | None) -> dict:
    """Bytes of parameters, of their gradients (one copy per trainable parameter) and of the
    optimizer's state tensors."""
    params = list({id(p): p for p in params}.values())
    param_bytes = sum(nbytes(p) for p in params)
    grad_bytes = sum(nbytes(p) for p in params if p.requires_grad)
    opt_bytes = 0
    if optimizer is not None:
        for state in optimizer.state.values():
            opt_bytes += sum(nbytes(v) for v in state.values() if isinstance(v, torch.Tensor) and v.dim() > 0)
    return {"params": param_bytes, "grads": grad_bytes, "optimizer": opt_bytes}


def saved_bytes_of(module: nn.Module, *inputs: torch.Tensor, exclude: list[torch.Tensor] = ()) -> int:
    """Bytes ``module(*inputs)`` saves for backward, measured by running it once; the module's
    buffers (e.g. BatchNorm running statistics) are restored afterwards."""
    buffers = {name: b.clone() for name, b in module.named_buffers()}
    meter = SavedTensorMeter(exclude)
    with meter:
        out = module(*inputs)
    peak = meter.peak
    del out
    with torch.no_grad():
        for name, b in module.named_buffers():
            b.copy_(buffers[name])
    return peak


def peak_memory(device: torch.device, meter_peak: int, extra_saved: int, state: dict) -> dict:
    """The stage's memory record: ``peak_bytes`` plus its parts and how it was measured."""
    if device.type == "cuda":
        return {"peak_bytes": int(torch.cuda.max_memory_allocated(device)), "method": "cuda.max_memory_allocated",
                "saved_for_backward": meter_peak + extra_saved, **state}
    total = meter_peak + extra_saved + state["params"] + state["grads"] + state["optimizer"]
    return {"peak_bytes": int(total), "method": "cpu: saved_tensors_hooks peak + params + grads + optimizer state",
            "saved_for_backward": meter_peak + extra_saved, **state}
