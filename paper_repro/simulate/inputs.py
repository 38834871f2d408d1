"""What the simulator feeds a model: synthetic inputs of one kind, and the learner built and
checked on them.

``image``: ``channels`` x ``image_size`` x ``image_size`` floats with ``num_classes`` classes;
``text``: windows of ``seq_len`` token ids from a vocabulary of ``num_classes``, with next-token
targets. Without a kind, the built-in Transformer gets text and every other model images, as in
``bench pipeline``'s synthetic input; a user's token model (``package.module:function``) needs
``kind="text"`` (``paper-repro simulate --input text``).
"""
from __future__ import annotations

import torch

from ..data import DataSet, InputSpec
from ..distributed.config import DTYPES, PipelineConfig
from ..distributed.inputs import build_learner, data_spec

KINDS = ("image", "text")      # paper_repro.cli.SIMULATED_INPUTS repeats them (the parser imports no torch)
HINT = ("give --input text for a model that takes token ids (windows of --seq-len tokens from a vocabulary of "
        "--num-classes), --input image for one that takes images (--channels x --image-size x --image-size)")


def input_spec(cfg: PipelineConfig, kind: str | None = None) -> DataSet | InputSpec:
    """The shapes of the synthetic input of ``kind`` (None: text for the built-in Transformer,
    images otherwise)."""
    if kind is None:
        return data_spec(cfg)[1]
    if kind == "text":
        return InputSpec.text(cfg.num_classes, cfg.seq_len)
    if kind == "image":
        return InputSpec.image(cfg.num_classes, (cfg.channels, cfg.image_size, cfg.image_size))
    raise ValueError(f"unknown input {kind!r}; valid: {', '.join(KINDS)}")


def example(spec, dtype: torch.dtype = torch.float32, batch: int = 2) -> torch.Tensor:
    """A batch of ``spec``'s input (zeros; token ids 0)."""
    if spec.kind == "text":
        return torch.zeros(batch, spec.seq_len, dtype=torch.long)
    return torch.zeros(batch, *spec.input_shape, dtype=dtype)


def checked_learner(cfg: PipelineConfig, spec):
    """``build_learner(cfg, spec)``, after one forward of its net and loss on a batch of ``spec``'s
    input: a model that cannot take that input is a one-line ValueError naming the model, the
    input and the ``--input`` choices, not a traceback from inside the calibration."""
    shape = tuple(example(spec).shape)
    what = f"model {cfg.model} cannot take the simulator's {spec.kind} input of shape {shape}"
    try:
        learner = build_learner(cfg, spec)
    except ValueError as err:          # an nn.Sequential is traced on the example as it is wrapped
        if "cannot take" not in str(err):
            raise
        raise ValueError(f"{what} ({_first_line(err)}); {HINT}") from None
    net = learner.net
    was_training = net.training
    x = example(spec, DTYPES[cfg.dtype])
    y = torch.zeros((2, spec.seq_len) if spec.kind == "text" else (2,), dtype=torch.long)
    try:
        with torch.no_grad():
            net.eval()
            net.loss(net(x), y)
    except (RuntimeError, ValueError, TypeError, IndexError) as err:
        raise ValueError(f"{what} ({_first_line(err)}); {HINT}") from None
    finally:
        net.train(was_training)
    return learner


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
