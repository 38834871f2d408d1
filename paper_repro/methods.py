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
* ``chunked@A,B``  the same with chunks chosen by their first blocks: here ``[0, A)``,
                   ``[A, B)``, ``[B, n)``. A pipeline whose stages are cut by measured time
                   (``cut="time"``, ``bench pipeline --cut time``) records its method
                   this way: ``chunked@4`` is two chunks, blocks 0-3 and blocks 4 to n-1.

Every module's input is detached (stop-gradient), so no gradient crosses a module
boundary. The module that ends at the last block uses ``net.head``; the others use
``net.make_head(last block of the module)``.

:meth:`Learner.run_modules` is the one place where modules are chained: it runs a slice of
the modules, feeding each the output of the block before it, and yields each module's
input, block outputs and loss. ``losses`` runs all of them; a pipeline stage runs its own
slice; the cost model and the stage timer read the inputs it yields. Methods know nothing
about devices.
"""
from __future__ import annotations

import re
from typing import Iterator, NamedTuple

import torch
import torch.nn as nn

from .models import BlockNet

from .names import FIXED_METHODS, METHOD_PATTERNS


def chunk_starts(spec: str) -> list[int] | None:
    """``"chunked@3,5"`` -> ``[3, 5]`` (the first blocks of chunks 1..K-1); None for any other spec."""
    match = re.fullmatch(METHOD_PATTERNS["chunked@A,B,..."], spec) if isinstance(spec, str) else None
    if match is None:
        return None
    starts = [int(v) for v in match.group(1).split(",")]
    if starts[0] < 1 or starts != sorted(set(starts)):
        raise ValueError(f"{spec}: the chunks' first blocks must be increasing and at least 1, got {starts}")
    return starts


def parse_spec(spec: str) -> tuple[str, int | None]:
    """``"chunked-3"`` -> ``("chunked", 3)``, ``"chunked@2,5"`` -> ``("chunked", 3)``,
    ``"greedy"`` -> ``("greedy", None)``.

    Checks the syntax only (and ``K >= 1``); whether K fits a net is :func:`module_blocks`'s job."""
    if spec in FIXED_METHODS:
        return spec, None
    starts = chunk_starts(spec)
    if starts is not None:
        return "chunked", len(starts) + 1
    match = re.fullmatch(r"chunked-(-?\d+)", spec) if isinstance(spec, str) else None
    if match is None:
        raise ValueError(f"unknown method {spec!r}; valid: backprop, greedy, overlapping, chunked-K "
                         f"(K a positive integer, at most the number of blocks), chunked@A,B,... "
                         f"(the first blocks of chunks 2..K)")
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
    starts = chunk_starts(spec)
    if starts is not None:
        if starts[-1] >= n_blocks:
            raise ValueError(f"{spec}: a chunk starts at block {starts[-1]}, but the net has {n_blocks} blocks "
                             f"(0..{n_blocks - 1})")
        bounds = [0, *starts, n_blocks]
        return [list(range(bounds[i], bounds[i + 1])) for i in range(len(bounds) - 1)]
    if not 1 <= k <= n_blocks:
        raise ValueError(f"{spec}: K must be between 1 and the number of blocks ({n_blocks}), got {k}")
    sizes = [n_blocks // k + (1 if i < n_blocks % k else 0) for i in range(k)]
    starts = [sum(sizes[:i]) for i in range(k)]
    return [list(range(s, s + size)) for s, size in zip(starts, sizes)]


def split_advice(net) -> str:
    """Why ``net`` (an ``nn.Module`` that is neither a BlockNet nor an ``nn.Sequential``) cannot be
    trained locally, and how to write it so that it can."""
    name = type(net).__name__
    return (f"needs an nn.Sequential of blocks or a BlockNet, got a {name}, whose forward is one piece of code "
            f"that cannot be cut into blocks. Write the network as blocks, each taking the previous block's "
            f"output, and pass nn.Sequential(block0, "
            f"block1, ...): move each stage of {name}.forward into a block (e.g. nn.Sequential(self.conv1, "
            "nn.ReLU()) as one block), keep the batch as dimension 0 between blocks, and leave the "
            "classifier out (the default heads, sized by num_classes=, go after a block; or give head=); "
            "num_classes= and example= then apply to that nn.Sequential. For heads and a loss of your "
            "own, build a paper_repro.blocknet.BlockNet(blocks, head_factory, task=...)")


class ModuleRun(NamedTuple):
    """One local module's pass: its index, its (detached) input, its blocks' outputs by block
    index, and its loss."""
    index: int
    h_in: torch.Tensor
    outputs: dict[int, torch.Tensor]
    loss: torch.Tensor


class Learner(nn.Module):
    """A net plus one head per local module; ``losses(x, y)`` is the method."""

    def __init__(self, net: BlockNet, spec: str):
        super().__init__()
        if isinstance(net, nn.Module) and not isinstance(net, (BlockNet, nn.Sequential, nn.ModuleList)):
            raise ValueError(f"a Learner {split_advice(net)}")
        if not isinstance(net, BlockNet):
            raise ValueError(f"a Learner needs a BlockNet (paper_repro.models.build, or BlockNet.from_sequential "
                             f"for an nn.Sequential), got {type(net).__name__}")
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

    def run_modules(self, h: torch.Tensor, y: torch.Tensor, first: int = 0,
                    last: int | None = None) -> Iterator[ModuleRun]:
        """Run modules ``first .. last-1`` (default: to the end) one after the other.

        ``h`` is the input of module ``first``: the data for module 0, else the output of
        block ``input_block(first)``. Every later module reads the output of its input block
        as the first module of the slice that computed it produced it (an overlapping
        window's re-run of a block gives the same value). A generator: the caller may run a
        module's backward, or send its outputs, before the next module runs."""
        last = self.num_modules if last is None else last
        if not 0 <= first < last <= self.num_modules:
            raise ValueError(f"module slice [{first}, {last}) is not within the {self.num_modules} "
                             f"local modules of method {self.spec!r}")
        outs: dict[int, torch.Tensor] = {self.input_block(first): h}
        for m in range(first, last):
            h_in = outs[self.input_block(m)]
            block_outs, loss = self.module_loss(m, h_in, y)
            for b, out in block_outs.items():
                outs.setdefault(b, out)
            yield ModuleRun(m, h_in.detach() if h_in.is_floating_point() else h_in, block_outs, loss)

    def losses(self, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        """One loss per local module (see the module docstring)."""
        return [run.loss for run in self.run_modules(x, y)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def build(net: BlockNet | nn.Sequential | list, spec: str, **wrap) -> Learner:
    """A learner for ``spec`` in backprop | greedy | overlapping | chunked-K.

    ``net`` is a BlockNet, or an ``nn.Sequential`` / list of blocks, which is wrapped with
    :meth:`BlockNet.from_sequential` and ``wrap`` (``num_classes`` or ``head``; ``example``,
    ``task``, ``name``). Any other ``nn.Module`` is refused, with or without ``wrap``: its
    ``forward`` is one piece of code the methods cannot cut into blocks."""
    if isinstance(net, (nn.Sequential, nn.ModuleList, list, tuple)):
        net = BlockNet.from_sequential(net, **wrap)
    elif isinstance(net, nn.Module) and not isinstance(net, BlockNet):
        raise ValueError(f"methods.build {split_advice(net)}")
    elif wrap:
        raise ValueError(f"wrap arguments {', '.join(sorted(wrap))} are for an nn.Sequential or a list of blocks, "
                         f"not a {type(net).__name__}")
    return Learner(net, spec)
