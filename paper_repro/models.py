"""The models of the study, each a :class:`~paper_repro.blocknet.BlockNet`, and their registry.

Every model here is a BlockNet: ``blocks`` (an ``nn.ModuleList``) applied in
order, then ``head`` (the network's own output head). ``make_head(i)`` builds a fresh
*auxiliary* head for the output of block ``i``, as in the paper (``docs/paper.md``):
MLP -> linear classifier, ResNet -> global average pool + linear, Transformer -> final
LayerNorm + projection to the vocabulary. ``loss(logits, y)`` is the task loss. Models know nothing about
local-learning methods: :mod:`paper_repro.methods` decides where losses and
stop-gradients go. ``models.BlockNet``, ``models.AutoHead`` (from :mod:`paper_repro.blocknet`) and
``models.MODELS`` (the built-in names, from :mod:`paper_repro.names`) are part of this module's API.
"""
from __future__ import annotations

import inspect
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models.resnet import BasicBlock, Bottleneck, conv1x1

from .blocknet import AutoHead, BlockNet  # noqa: F401  (this module's API: see its docstring)

from .names import MODELS  # noqa: F401  (models.MODELS: the built-in names)


# ---------------------------------------------------------------------------- MLP
def mlp(depth: int = 4, width: int = 256, in_dim: int = 64, num_classes: int = 10,
        layer_norm: bool = False) -> BlockNet:
    """``depth`` blocks of Linear + ReLU (+ LayerNorm); inputs are flattened first."""
    _check_positive(depth=depth, width=width, in_dim=in_dim, num_classes=num_classes)
    blocks = []
    for i in range(depth):
        layers: list[nn.Module] = [nn.Flatten()] if i == 0 else []
        layers += [nn.Linear(in_dim if i == 0 else width, width), nn.ReLU()]
        if layer_norm:
            layers.append(nn.LayerNorm(width))
        blocks.append(nn.Sequential(*layers))
    return BlockNet(blocks, lambda i: nn.Linear(width, num_classes), name=f"mlp{depth}x{width}", model="mlp",
                    expects=f"(N, {in_dim}) inputs, or (N, ...) with {in_dim} values per example")


# -------------------------------------------------------------------- Transformer
class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.shape[-1])
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.proj(y)


class TransformerLayer(nn.Module):
    """Pre-LN transformer layer: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Embedding(nn.Module):
    def __init__(self, vocab_size: int, d_model: int, seq_len: int):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.seq_len = seq_len

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        if T > self.seq_len:
            raise ValueError(f"sequence length {T} exceeds the model's seq_len={self.seq_len}")
        return self.tok(idx) + self.pos(torch.arange(T, device=idx.device))


def transformer_lm(vocab_size: int = 256, d_model: int = 128, n_layers: int = 4, n_heads: int = 4,
                   seq_len: int = 64) -> BlockNet:
    """Causal pre-LN Transformer LM; block 0 = embedding + first layer."""
    _check_positive(vocab_size=vocab_size, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                    seq_len=seq_len)
    blocks: list[nn.Module] = []
    for i in range(n_layers):
        layer = TransformerLayer(d_model, n_heads)
        blocks.append(nn.Sequential(Embedding(vocab_size, d_model, seq_len), layer) if i == 0 else layer)
    net = BlockNet(blocks, lambda i: nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, vocab_size)),
                   task="lm", name=f"transformer{n_layers}x{d_model}", model="transformer",
                   expects=f"(N, T) token ids with T <= {seq_len} and ids < {vocab_size}")
    net.apply(_gpt_init)
    return net


def _gpt_init(m: nn.Module) -> None:
    if isinstance(m, (nn.Linear, nn.Embedding)):
        nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)


# ------------------------------------------------------------------------ ResNet
_RESNETS = {"resnet18": (BasicBlock, [2, 2, 2, 2]), "resnet34": (BasicBlock, [3, 4, 6, 3]),
            "resnet50": (Bottleneck, [3, 4, 6, 3])}


class PoolHead(nn.Module):
    """Global average pool + linear: the ResNet head (and its auxiliary heads)."""

    def __init__(self, channels: int, num_classes: int):
        super().__init__()
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet(name: str = "resnet18", num_classes: int = 10, small_input: bool = True,
           in_channels: int = 3, width: int = 64) -> BlockNet:
    """torchvision's ResNet split into stem + one block per BasicBlock/Bottleneck.

    Block 0 is the stem (conv1, bn1, relu, maxpool); ``small_input=True`` gives the
    CIFAR/digits stem (3x3 stride-1 conv, no max-pool). ``width`` is the stem width
    (64 in torchvision; stages use width, 2*width, 4*width, 8*width). With the defaults
    the parameters are exactly torchvision's ``resnetXX`` (tested).
    """
    if name not in _RESNETS:
        raise ValueError(f"unknown ResNet {name!r}; valid: {sorted(_RESNETS)}")
    _check_positive(num_classes=num_classes, in_channels=in_channels, width=width)
    block_cls, layers = _RESNETS[name]
    if small_input:
        stem = nn.Sequential(nn.Conv2d(in_channels, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width),
                             nn.ReLU(inplace=True))
    else:
        stem = nn.Sequential(nn.Conv2d(in_channels, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                             nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
    blocks: list[nn.Module] = [stem]
    channels = [width]
    inplanes = width
    for stage, n in enumerate(layers):  # mirrors torchvision.models.resnet.ResNet._make_layer
        planes, stride = width * 2 ** stage, (1 if stage == 0 else 2)
        for j in range(n):
            s = stride if j == 0 else 1
            down = None
            if s != 1 or inplanes != planes * block_cls.expansion:
                down = nn.Sequential(conv1x1(inplanes, planes * block_cls.expansion, s),
                                     nn.BatchNorm2d(planes * block_cls.expansion))
            blocks.append(block_cls(inplanes, planes, s, down))
            inplanes = planes * block_cls.expansion
            channels.append(inplanes)
    net = BlockNet(blocks, lambda i: PoolHead(channels[i], num_classes), name=name, model=name,
                   expects=f"(N, {in_channels}, H, W) images")
    for m in net.modules():  # torchvision's initialisation
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.constant_(m.weight, 1)
            nn.init.constant_(m.bias, 0)
    return net


# ------------------------------------------------------------------------ registry
def builder_arguments(name: str) -> list[str]:
    """The keyword arguments :func:`build` accepts for model ``name``."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid: {', '.join(MODELS)}")
    fn = mlp if name == "mlp" else transformer_lm if name == "transformer" else resnet
    return [p for p in inspect.signature(fn).parameters if p != "name"]


def check_kwargs(name: str, kwargs: dict) -> None:
    """A clear ValueError for keyword arguments model ``name`` does not take (not a TypeError)."""
    unknown = sorted(set(kwargs) - set(builder_arguments(name)))
    if unknown:
        raise ValueError(f"unknown model_kwargs {', '.join(map(repr, unknown))} for model {name!r}; "
                         f"valid: {', '.join(builder_arguments(name))}")


def build(name: str, **kwargs) -> BlockNet:
    """Build a model by name: ``mlp``, ``transformer`` or ``resnet18/34/50``."""
    check_kwargs(name, kwargs)
    if name == "mlp":
        net = mlp(**kwargs)
    elif name == "transformer":
        net = transformer_lm(**kwargs)
    elif name in _RESNETS:
        net = resnet(name, **kwargs)
    else:
        raise ValueError(f"unknown model {name!r}; valid: {', '.join(MODELS)}")
    return net


def _check_positive(**values: int) -> None:
    for key, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{key} must be a positive integer, got {value!r}")
