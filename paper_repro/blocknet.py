"""The block-structured network every method works on, and wrapping of plain ``nn.Sequential``s.

A :class:`BlockNet` is ``blocks`` (an ``nn.ModuleList``) applied in order, then ``head`` (the
network's own output head); ``make_head(i)`` builds a fresh *auxiliary* head for the output
of block ``i``; ``loss(logits, y)`` is the task loss. :meth:`BlockNet.from_sequential` turns
any list of blocks into one, with default heads chosen by the shape of each block's output.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F


class BlockNet(nn.Module):
    """``forward(x) = head(blocks[-1](...blocks[0](x)))``: plain backprop inference.

    ``head_factory(i)`` returns a new auxiliary head for the output of block ``i``;
    ``task`` is ``"classification"`` or ``"lm"`` (next-token prediction); ``expects``
    describes the input the net takes, for error messages (e.g. ``"(N, 3, H, W) images"``);
    ``model`` is the registry name it was built under (:data:`MODELS`), None for other nets.
    """

    def __init__(self, blocks: list[nn.Module], head_factory: Callable[[int], nn.Module],
                 task: str = "classification", name: str = "net", expects: str = "",
                 model: str | None = None):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.head_factory = head_factory
        self.head = head_factory(len(blocks) - 1)
        self.task = task
        self.name = name
        self.expects = expects
        self.model = model

    @classmethod
    def from_sequential(cls, seq, num_classes: int | None = None, head: Callable[[int], nn.Module] | None = None,
                        example: torch.Tensor | None = None, task: str | None = None,
                        name: str = "sequential") -> "BlockNet":
        """Wrap an ``nn.Sequential`` (or a list of modules) as a BlockNet, one block per entry.

        ``head(i)`` builds the head for block ``i``'s output; by default :class:`AutoHead`
        with ``num_classes`` outputs: average pool + linear for ``(N, C, H, W)`` outputs,
        linear for ``(N, D)``, per-token linear for ``(N, T, D)``. With ``example`` (a batch
        of inputs) every block and head is run once (eval mode, no gradients): a block that
        cannot take the previous block's output, or an output no head can take, raises a
        ValueError naming the block and the shapes; the default heads then get their sizes
        from it (without it they are lazy: sized by the first batch, which the trainer runs
        before building the optimizer). ``task`` defaults to ``"lm"`` (next-token loss) when
        ``example``'s last block gives ``(N, T, D)``, else ``"classification"``."""
        blocks = list(seq) if isinstance(seq, (nn.Sequential, nn.ModuleList, list, tuple)) else None
        if not blocks:
            raise ValueError(f"from_sequential needs a non-empty nn.Sequential or list of nn.Modules, "
                             f"got {type(seq).__name__}{'' if blocks is None else ' (empty)'}")
        for i, b in enumerate(blocks):
            if not isinstance(b, nn.Module):
                raise ValueError(f"block {i} is a {type(b).__name__} ({b!r}), not an nn.Module")
        if head is None and num_classes is None:
            raise ValueError("from_sequential needs num_classes (for the default heads) or a head factory "
                             "head(i) -> nn.Module")
        shapes = _trace_shapes(blocks, example) if example is not None else None
        if head is None:
            for i, shape in enumerate(shapes or []):
                if len(shape) not in (2, 3, 4):
                    raise ValueError(f"block {i} ({type(blocks[i]).__name__}) gives outputs of shape {shape}; "
                                     "the default heads take (N, C, H, W), (N, D) or (N, T, D): pass head=")
            width = [s[1] if len(s) == 4 else s[-1] for s in shapes] if shapes else None
            head = (lambda i: AutoHead(num_classes, width[i])) if width else (lambda i: AutoHead(num_classes))
        if task is None:
            task = "lm" if shapes and len(shapes[-1]) == 3 else "classification"
        net = cls(blocks, head, task=task, name=name,
                  expects=f"inputs like {tuple(example.shape)}" if example is not None else "")
        if example is not None:
            _check_heads(net, example)
        return net

    def make_head(self, i: int) -> nn.Module:
        if not 0 <= i < len(self.blocks):
            raise ValueError(f"block index {i} out of range 0..{len(self.blocks) - 1}")
        return self.head_factory(i)

    def features(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Outputs of every block (for probes such as CKA)."""
        outs = []
        for block in self.blocks:
            x = block(x)
            outs.append(x)
        return outs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    def loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.task == "lm":
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        return F.cross_entropy(logits, y)


def grad_input(h: torch.Tensor, requires_grad: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``(leaf, fed)`` for running a block on ``h`` and reading the gradient of its input.

    ``leaf`` is ``h`` detached, requiring a gradient when ``requires_grad`` and ``h`` is
    floating point: after a backward its ``.grad`` is the input gradient. ``fed`` is what to
    give the block: a copy of ``leaf`` made inside the graph, so that a block whose first
    operation writes its input (``nn.ReLU(inplace=True)`` as a block of its own, as in
    ``torchvision.models.vgg11().features``) writes the copy; autograd refuses to write a leaf
    that requires a gradient. The copy adds no FLOPs, and its backward only passes the
    gradient on. Without a gradient, ``fed`` is ``leaf``."""
    leaf = h.detach().requires_grad_(requires_grad and h.is_floating_point())
    return leaf, (leaf.clone() if leaf.requires_grad else leaf)


# ----------------------------------------------------------------- wrapped blocks
class AutoHead(nn.Module):
    """The default head of :meth:`BlockNet.from_sequential`: global average pool + linear for
    ``(N, C, H, W)``, linear for ``(N, D)``, per-token linear for ``(N, T, D)``. Without
    ``in_features`` the linear layer is lazy (sized by the first input)."""

    def __init__(self, num_classes: int, in_features: int | None = None):
        super().__init__()
        self.linear = nn.Linear(in_features, num_classes) if in_features else nn.LazyLinear(num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 4:
            x = x.mean(dim=(2, 3))
        elif x.dim() not in (2, 3):
            raise ValueError(f"the default head takes (N, C, H, W), (N, D) or (N, T, D), got shape {tuple(x.shape)}")
        return self.linear(x)


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


@torch.no_grad()
def _trace_shapes(blocks: list[nn.Module], example: torch.Tensor) -> list[tuple]:
    """Output shape of every block on ``example`` (eval mode); ValueError naming the block that
    fails, or that changes the batch (first) dimension: losses and stage boundaries count samples
    along it. An example of one sample is run twice over, so that a block folding the batch into
    another dimension (``x.view(1, -1)``) shows."""
    modes = [b.training for b in blocks]
    if example.dim() == 0:
        raise ValueError("the example must be a batch of inputs (first dimension: samples), got a scalar")
    n = example.shape[0]
    h, shapes = (example if n > 1 else torch.cat([example, example])), []
    try:
        for i, block in enumerate(blocks):
            block.eval()
            h_in = h
            try:
                h = block(h)
            except (RuntimeError, ValueError, IndexError, TypeError) as err:
                what = "the example input" if i == 0 else f"the output of block {i - 1}"
                raise ValueError(f"block {i} ({type(block).__name__}) cannot take {what} of shape "
                                 f"{tuple(h.shape)}: {_first_line(err)}") from err
            if not isinstance(h, torch.Tensor):
                raise ValueError(f"block {i} ({type(block).__name__}) returns {type(h).__name__}, not a tensor")
            if h.dim() == 0 or h.shape[0] != h_in.shape[0]:
                raise ValueError(f"block {i} ({type(block).__name__}) changes the batch dimension: input of shape "
                                 f"{tuple(h_in.shape)} gives output of shape {tuple(h.shape)}; every block must "
                                 "keep dimension 0 as the samples (flatten with x.flatten(1), not x.view(-1) or "
                                 "x.view(1, -1))")
            shapes.append((n, *h.shape[1:]))
    finally:
        for block, mode in zip(blocks, modes):
            block.train(mode)
    return shapes


@torch.no_grad()
def _check_heads(net: BlockNet, example: torch.Tensor) -> None:
    """Run a head on every block's output of ``example``; ValueError naming the block that no head fits."""
    was_training = net.training
    net.eval()
    try:
        for i, h in enumerate(net.features(example)):
            head = net.head if i == len(net.blocks) - 1 else net.make_head(i)
            try:
                head.eval()(h)
            except (RuntimeError, ValueError, IndexError, TypeError) as err:
                raise ValueError(f"the head for block {i} ({type(net.blocks[i]).__name__}) cannot take its "
                                 f"output of shape {tuple(h.shape)}: {_first_line(err)}") from err
    finally:
        net.train(was_training)
