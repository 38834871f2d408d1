"""Models named as ``package.module:function``: a user's own network where a built-in name goes.

Processes that cannot be handed a Python object (the pipeline's stage processes, started by
``torchrun`` or :mod:`paper_repro.distributed.launch`) build the model from its name: each
imports ``package.module`` (so it must be importable there: installed, or on
``PYTHONPATH``) and calls ``function(**model_kwargs)``. The function returns a
:class:`~paper_repro.blocknet.BlockNet`, or an ``nn.Sequential`` / list of blocks, which
:meth:`BlockNet.from_sequential` wraps with the default heads (sized for ``num_classes``
by running an example batch through it once).
"""
from __future__ import annotations

import importlib
import inspect
from typing import Callable

import torch
import torch.nn as nn

from .blocknet import BlockNet


def is_factory_name(model) -> bool:
    """True for ``"package.module:function"`` (a built-in model name has no colon)."""
    return isinstance(model, str) and ":" in model


def load_factory(name: str) -> Callable:
    """The function ``name`` (``"package.module:function"``) names; ValueError saying what is wrong."""
    module, _, attr = name.partition(":")
    if not module or not attr or ":" in attr:
        raise ValueError(f"model {name!r}: a model factory is written package.module:function")
    try:
        mod = importlib.import_module(module)
    except ImportError as err:
        raise ValueError(f"model {name!r}: cannot import module {module!r} ({err}); it must be importable "
                         "by every process that builds the model (installed, or on PYTHONPATH)") from None
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise ValueError(f"model {name!r}: module {module!r} has no function {attr!r}")
    return fn


def check_factory(name: str, kwargs: dict) -> None:
    """ValueError unless ``name`` loads and its function accepts ``kwargs`` (nothing is built)."""
    fn = load_factory(name)
    try:
        inspect.signature(fn).bind(**kwargs)
    except TypeError as err:
        raise ValueError(f"model {name!r} does not take model_kwargs {kwargs!r}: {err}") from None
    except ValueError:  # no signature to inspect (a builtin): checked when called
        pass


def build_from_factory(name: str, kwargs: dict, num_classes: int, example: torch.Tensor) -> BlockNet:
    """Call the factory ``name`` with ``kwargs``; wrap an ``nn.Sequential`` or list of blocks
    with the default heads for ``num_classes`` classes, checked and sized on ``example`` (a
    batch of inputs). The net's ``model`` is ``name``, so records say what ran."""
    check_factory(name, kwargs)
    made = load_factory(name)(**kwargs)
    if isinstance(made, BlockNet):
        net = made
    elif isinstance(made, (nn.Sequential, nn.ModuleList, list, tuple)):
        net = BlockNet.from_sequential(made, num_classes=num_classes, example=example,
                                       name=name.rpartition(":")[2])
    else:
        raise ValueError(f"model {name!r} returned a {type(made).__name__}; it must return a BlockNet, "
                         "an nn.Sequential or a list of blocks")
    if net.model is None:
        net.model = name
    return net
