"""A grid of training runs, its point ids and shards, and its total compute.

A :class:`Grid` is one model on one data set crossed with methods x batch sizes x
learning rates x seeds. A point id is ``<method>-b<batch>-lr<lr>-s<seed>-<hash>``, the hash
taken over every setting that changes the run (not ``data_dir`` or ``device``: the same
point may run on machines that keep the data in different places).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .. import cost, methods, models, train


@dataclass
class Grid:
    """One model x data set, swept over methods x batch sizes x learning rates x seeds.

    Each point trains ``steps_for(batch_size)`` steps: ``steps``, or, when ``examples`` is
    set, ``ceil(examples / batch_size)`` clipped to ``[min_steps, steps]`` (so small
    batches take more steps and large batches do not cost a fortune).

    ``eval_every_examples``, ``train_eval_examples``, ``stop_loss`` and ``stop_overshoot`` go to every point's
    :class:`~paper_repro.train.TrainConfig` (they enter a point's config, and so its id,
    only when set).

    ``extra_lrs`` extends the learning rates where a best sat at the grid's edge: under a batch
    size for every method, or under ``"method@batch"`` for that method alone."""

    name: str
    model: str
    dataset: str
    methods: list
    batch_sizes: list
    lrs: list
    seeds: list = field(default_factory=lambda: [0])
    steps: int = 200
    examples: int | None = None
    min_steps: int = 1
    model_kwargs: dict = field(default_factory=dict)
    data_kwargs: dict = field(default_factory=dict)
    optimizer: str = "adam"
    eval_every: int = 0
    eval_examples: int | None = 1000
    eval_every_examples: int = 0            # training-subset evaluation cadence (0: off)
    train_eval_examples: int | None = None  # size of that fixed training subset
    stop_loss: float | None = None          # stop a point at this training-subset loss
    stop_overshoot: float = 0.0             # ... after this fraction more examples
    extra_lrs: dict = field(default_factory=dict)  # {batch size or "method@batch": [learning rates]} beyond ``lrs``
    description: str = ""

    def validate(self) -> None:
        if not self.name or not all(c.isalnum() or c in "-_." for c in self.name):
            raise ValueError(f"grid name {self.name!r} must be non-empty and use only letters, digits, -, _ or .")
        for key in ("methods", "batch_sizes", "lrs", "seeds"):
            values = getattr(self, key)
            if not isinstance(values, (list, tuple)) or not values:
                raise ValueError(f"grid {key} must be a non-empty list, got {values!r}")
            if len(set(map(str, values))) != len(values):
                raise ValueError(f"grid {key} has repeated values: {values!r}")
        if not isinstance(self.extra_lrs, dict):
            raise ValueError(f"grid extra_lrs must be a dict {{batch size: [learning rates]}}, got {self.extra_lrs!r}")
        for key, lrs in self.extra_lrs.items():
            method, _, b = str(key).rpartition("@")
            if method and method not in self.methods:
                raise ValueError(f"grid extra_lrs names method {method!r} ({key!r}), which is not in methods "
                                 f"{self.methods}")
            if not b.isdigit() or int(b) not in self.batch_sizes:
                raise ValueError(f"grid extra_lrs names batch size {b!r} ({key!r}), which is not in batch_sizes "
                                 f"{self.batch_sizes}")
            if not isinstance(lrs, (list, tuple)) or not lrs or set(map(float, lrs)) & set(map(float, self.lrs)):
                raise ValueError(f"grid extra_lrs[{key!r}] must be a non-empty list of learning rates not in lrs, "
                                 f"got {lrs!r}")
            if method and set(map(float, lrs)) & set(map(float, self._extra(int(b)))):
                raise ValueError(f"grid extra_lrs[{key!r}] repeats a learning rate of extra_lrs[{b}]: {lrs!r}")
        for b in self.batch_sizes:
            if not isinstance(b, int) or b < 1 or b & (b - 1):
                raise ValueError(f"batch sizes must be powers of 2, got {b!r} in {self.batch_sizes}")
        for key in ("steps", "min_steps") + (("examples",) if self.examples is not None else ()):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"grid {key} must be a positive integer, got {value!r}")
        for p in self.points():
            train.TrainConfig(**p["config"]).validate()

    def _extra(self, batch_size: int, method: str | None = None) -> list:
        key = batch_size if method is None else f"{method}@{batch_size}"
        return list(self.extra_lrs.get(key, self.extra_lrs.get(str(key), [])))

    def lrs_for(self, batch_size: int, method: str | None = None) -> list:
        """The learning rates swept at ``batch_size`` (by ``method``): ``lrs``, then the batch
        size's ``extra_lrs``, then the method's own there."""
        return list(self.lrs) + self._extra(batch_size) + (self._extra(batch_size, method) if method else [])

    def steps_for(self, batch_size: int) -> int:
        if self.examples is None:
            return self.steps
        return max(self.min_steps, min(self.steps, math.ceil(self.examples / batch_size)))

    def points(self) -> list[dict]:
        """Every point in a fixed order (seed, method, batch size, lr): ``{"point_id", "config"}``
        (config = TrainConfig kwargs)."""
        out = []
        for seed in self.seeds:  # seed-major: an unfinished sweep has every method at its first seeds
            for method in self.methods:
                for batch in self.batch_sizes:
                    for lr in self.lrs_for(batch, method):
                        config = dict(model=self.model, method=method, dataset=self.dataset,
                                      steps=self.steps_for(batch), batch_size=batch, lr=float(lr),
                                      optimizer=self.optimizer, seed=seed, eval_every=self.eval_every,
                                      eval_examples=self.eval_examples, model_kwargs=dict(self.model_kwargs),
                                      data_kwargs=dict(self.data_kwargs), **self._optional())
                        out.append({"point_id": point_id(config), "config": config})
        return out

    def _optional(self) -> dict:
        """The training-subset settings that are set (left out when off, so that the point
        ids of grids without them stay what they were)."""
        return {k: getattr(self, k) for k in ("eval_every_examples", "train_eval_examples", "stop_loss",
                                              "stop_overshoot")
                if getattr(self, k) not in (0, None)}

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Grid:
        if not isinstance(d, dict):
            raise ValueError(f"a grid must be a JSON object (a dict) of Grid keys, got {type(d).__name__} {d!r:.80}")
        fields = dataclasses.fields(cls)
        known = {f.name for f in fields}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown grid keys {unknown}; valid: {sorted(known)}")
        required = [f.name for f in fields if f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING]
        missing = [k for k in required if k not in d]
        if missing:
            raise ValueError(f"grid lacks required keys {missing}; required: {required}")
        return cls(**d)


def point_id(config: dict) -> str:
    """``<method>-b<batch>-lr<lr>-s<seed>-<8 hex>``: stable across machines and runs."""
    key = {k: v for k, v in config.items() if k not in ("data_dir", "device", "progress")}
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:8]
    return f"{config['method']}-b{config['batch_size']}-lr{config['lr']:g}-s{config['seed']}-{digest}"


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` -> ``(i, n)`` with ``0 <= i < n`` (shards are numbered from 0, like Slurm arrays)."""
    try:
        i, n = (int(part) for part in str(text).split("/"))
    except ValueError:
        raise ValueError(f"shard must look like i/n (e.g. 0/4), got {text!r}") from None
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"shard {text!r}: need n >= 1 and 0 <= i < n (shards count from 0)")
    return i, n


def grid_flops(grid: Grid, input_shape: tuple, num_classes: int) -> dict:
    """Total training FLOPs of ``grid`` (forward + backward of all blocks and heads, every
    point), measured per example on a net of the grid's size, without any data.

    ``input_shape`` is one example's shape ((C, H, W), or (seq_len,) for text) and
    ``num_classes`` the classes or vocabulary size. Returns ``{"flops": total,
    "per_method": {method: flops}, "per_example": {method: FLOPs per example},
    "critical_path": {method: critical-path FLOPs per example}, "examples": training examples at the
    step caps}``."""
    kw = dict(grid.model_kwargs)
    if grid.model == "transformer":
        net_fn = lambda: models.transformer_lm(vocab_size=num_classes, seq_len=input_shape[0], **kw)  # noqa: E731
        x = torch.randint(num_classes, (2, *input_shape))
        y = torch.randint(num_classes, (2, *input_shape))
    else:
        if grid.model == "mlp":
            kw.setdefault("in_dim", math.prod(input_shape))
        else:
            kw.setdefault("small_input", input_shape[-1] <= 64)
            kw.setdefault("in_channels", input_shape[0])
        net_fn = lambda: models.build(grid.model, num_classes=num_classes, **kw)  # noqa: E731
        x, y = torch.randn(2, *input_shape), torch.randint(num_classes, (2,))
    examples = {m: 0 for m in grid.methods}
    for p in grid.points():
        examples[p["config"]["method"]] += p["config"]["steps"] * p["config"]["batch_size"]
    per_method, per_example, critical = {}, {}, {}
    for method in grid.methods:
        c = cost.step_cost(methods.build(net_fn(), method), x, y)
        per_method[method] = examples[method] * c.total_flops
        per_example[method] = c.total_flops
        critical[method] = c.critical_path_flops
    return {"flops": sum(per_method.values()), "per_method": per_method, "per_example": per_example,
            "critical_path": critical, "examples": sum(examples.values())}


# one example's shape and the number of classes (vocabulary: byte level) of each data set,
# without loading it; image sizes follow data_kwargs["image_size"]
_NATIVE = {"digits": ((1, 8, 8), 10), "cifar10": ((3, 32, 32), 10), "imagenet": ((3, 224, 224), 1000)}


def example_shape(grid: Grid) -> tuple[tuple, int]:
    """``(input shape of one example, classes or vocabulary size)`` of ``grid``'s data set."""
    if grid.dataset == "text":
        return (int(grid.data_kwargs.get("seq_len", 64)),), 256
    (c, h, w), classes = _NATIVE[grid.dataset]
    size = grid.data_kwargs.get("image_size")
    return ((c, size, size) if size else (c, h, w)), classes


def cost_line(grid: Grid) -> str:
    """One line for the console before a sweep starts: points, examples and FLOPs at the
    step caps (an upper bound when runs stop at ``stop_loss``)."""
    shape, classes = example_shape(grid)
    counted = grid_flops(grid, shape, classes)
    flops, examples = counted["flops"], counted["examples"]
    n = len(grid.points())
    bound = "at most " if grid.stop_loss is not None else ""
    line = (f"grid {grid.name}: {n} points; {bound}{examples:.3g} training examples and "
            f"{bound}{flops:.3g} FLOPs (forward+backward, all blocks and heads, at the step caps)")
    path = counted["critical_path"]
    if "backprop" in path and len(path) > 1:  # the speedup each method could reach in backprop's steps
        line += "; critical path, backprop's over the method's: " + ", ".join(
            f"{m} {path['backprop'] / c:.2f}x" for m, c in path.items() if m != "backprop")
    return line


def store_name(grid: Grid, data_dir=None) -> str:
    """The folder name of ``grid``'s store when it trains on ``data_dir``: the grid's name, and
    for text (any corpus fits the same grid) the corpus's name after it, so that a run on
    LM1B and one on the built-in pydoc text never share a store (``<name>-<file stem>``)."""
    if grid.dataset != "text" or data_dir is None:
        return grid.name
    stem = Path(str(data_dir).rstrip("/")).stem or "text"
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in stem)
    return f"{grid.name}-{slug}"
