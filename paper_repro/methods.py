"""Where the losses and stop-gradients go: backprop, greedy, overlapping, chunked-K.

``build(net, spec)`` returns a :class:`Learner`. Its ``losses(x, y)`` gives one scalar
loss per *local module*, in order, such that ``sum(losses).backward()`` leaves in every
parameter's ``.grad`` exactly that parameter's local update:

* ``backprop``     one module = all blocks, the net's own head (global backprop).
* ``greedy``       one module per block, each with its own auxiliary head.
* ``overlapping``  windows ``[k, k+1]`` for k = 0..n-2, each with a head; a window
                   re-runs its first block on the *detached* output of the block before
                   it, so an inner block receives the sum of the two windows' gradients.
* ``chunked-K``    K contiguous chunks whose sizes differ by at most one (the first
                   ``n % K`` chunks get the extra block); backprop inside a chunk.

Every module's input is detached (stop-gradient), so no gradient crosses a module
boundary. The module that ends at the last block uses ``net.head``; the others use
``net.make_head(last block of the module)``. Methods know nothing about devices: a
pipeline stage runs :meth:`Learner.module_loss` on its own slice of modules.
"""
from __future__ import annotations

import re

import torch
import torch.nn as nn

from .models import BlockNet

METHODS = ("backprop", "greedy", "overlapping", "chunked-K")


def parse_spec(spec: str) -> tuple[str, int | None]:
    """``"chunked-3"`` -> ``("chunked", 3)``, ``"greedy"`` -> ``("greedy", None)``.

    Checks the syntax only (and ``K >= 1``); whether K fits a net is :func:`module_blocks`'s job."""
    if spec in ("backprop", "greedy", "overlapping"):
        return spec, None
    match = re.fullmatch(r"chunked-(-?\d+)", spec) if isinstance(spec, str) else None
    if match is None:
        raise ValueError(f"unknown method {spec!r}; valid: backprop, greedy, overlapping, chunked-K "
                         f"(K a positive integer, at most the number of blocks)")
    k = int(match.group(1))
    if k < 1:
        raise ValueError(f"{spec}: K must be between 1 and the number of blocks, got {k}")
    return "chunked", k


def module_blocks(spec: str, n_blocks: int) -> list[list[int]]:
    """Block indices of each local module for ``spec`` on a net of ``n_blocks`` blocks."""
    name, k = parse_spec(spec)
    if name == "backprop":
        return [list(range(n_blocks))]
    if name == "greedy":
        return [[i] for i in range(n_blocks)]
    if name == "overlapping":
        if n_blocks < 2:
            raise ValueError(f"method 'overlapping' needs at least 2 blocks, the net has {n_blocks}")
        return [[k, k + 1] for k in range(n_blocks - 1)]
    if not 1 <= k <= n_blocks:
        raise ValueError(f"{spec}: K must be between 1 and the number of blocks ({n_blocks}), got {k}")
    sizes = [n_blocks // k + (1 if i < n_blocks % k else 0) for i in range(k)]
    starts = [sum(sizes[:i]) for i in range(k)]
    return [list(range(s, s + size)) for s, size in zip(starts, sizes)]


class Learner(nn.Module):
    """A net plus one head per local module; ``losses(x, y)`` is the method."""

    def __init__(self, net: BlockNet, spec: str):
        super().__init__()
        self.spec = spec
        self.net = net
        self.module_blocks = module_blocks(spec, len(net.blocks))
        last = len(net.blocks) - 1
        self.heads = nn.ModuleList(net.head if blocks[-1] == last else net.make_head(blocks[-1])
                                   for blocks in self.module_blocks)

    @property
    def num_modules(self) -> int:
        return len(self.module_blocks)

    def input_block(self, m: int) -> int:
        """Index of the block whose output feeds module ``m`` (-1: the data)."""
        return self.module_blocks[m][0] - 1

    def module_parameters(self, m: int) -> list[nn.Parameter]:
        """Parameters that module ``m``'s loss touches: its blocks and its head."""
        params = [p for b in self.module_blocks[m] for p in self.net.blocks[b].parameters()]
        return params + list(self.heads[m].parameters())

    def module_loss(self, m: int, h_in: torch.Tensor, y: torch.Tensor) -> tuple[dict[int, torch.Tensor], torch.Tensor]:
        """Run module ``m`` on the detached ``h_in``: (outputs of its blocks by index, loss)."""
        h = h_in.detach() if h_in.is_floating_point() else h_in
        outs = {}
        for b in self.module_blocks[m]:
            h = self.net.blocks[b](h)
            outs[b] = h
        return outs, self.net.loss(self.heads[m](h), y)

    def losses(self, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        outs: dict[int, torch.Tensor] = {-1: x}
        result = []
        for m in range(self.num_modules):
            block_outs, loss = self.module_loss(m, outs[self.input_block(m)], y)
            for b, h in block_outs.items():
                outs.setdefault(b, h)  # an overlapping window's re-run gives the same value
            result.append(loss)
        return result

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def build(net: BlockNet, spec: str) -> Learner:
    """A learner for ``spec`` in backprop | greedy | overlapping | chunked-K."""
    return Learner(net, spec)
