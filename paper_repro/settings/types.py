"""The types of the pipeline, communication, scaling, race and similarity settings of
:mod:`paper_repro.settings`.

Each is a frozen dataclass, read by attribute (``s.micro_batch``): a misspelt name fails where
it is written, not deep in a run. Nothing here imports torch. Lists inside are the caller's
own copies (:mod:`paper_repro.settings` hands out fresh ones); change a field with
:func:`dataclasses.replace`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PipelineSettings:
    """The runs of ``bench pipeline`` that notebook 04 makes at one profile (expanded into
    configs by :func:`paper_repro.distributed.options.configs_for`).

    * ``model``, ``model_kwargs``: the network (a built-in name) and its keyword arguments
    * ``image_size``, ``num_classes``: the synthetic images' side in pixels and the classes
    * ``stages``: processes, one stage each
    * ``micro_batch``: the micro-batch sizes (samples), each run in turn
    * ``micro_batches``: micro-batches per step
    * ``steps``, ``warmup_steps``: timed steps, and untimed steps before them
    * ``device``: ``cpu`` (gloo) or ``cuda`` (nccl)
    * ``repeats``: every run this many times, interleaved (the tables show medians)
    * ``schedules``: the run names (``bench pipeline --schedule``); None: every one
    """
    model: str
    model_kwargs: dict
    image_size: int
    num_classes: int
    stages: int
    micro_batch: list[int]
    micro_batches: int
    steps: int
    warmup_steps: int
    device: str
    repeats: int = 1
    schedules: tuple[str, ...] | None = None


@dataclass(frozen=True)
class CommunicationSettings:
    """The communication figure of notebook 04: bytes per step counted from the boundary
    tensors' shapes (no training), by :func:`paper_repro.distributed.bench.comm_by_size`.

    * ``model``, ``model_kwargs``, ``image_size``, ``num_classes``: the network and its inputs
    * ``dtype``: the activations' dtype (a torch dtype name)
    * ``micro_batch``: the micro-batch sizes (samples)
    * ``micro_batches``: micro-batches per step
    * ``processors``: the stage counts the network is cut into
    * ``schedules``: the run names compared
    """
    model: str
    model_kwargs: dict
    image_size: int
    num_classes: int
    dtype: str
    micro_batch: list[int]
    micro_batches: int
    processors: list[int]
    schedules: list[str]


@dataclass(frozen=True)
class SimulatedModel:
    """One network of the scaling study, as :class:`~paper_repro.distributed.PipelineConfig`
    fields: ``model`` (a built-in name), ``num_classes`` (classes, or the Transformer's
    vocabulary), ``model_kwargs``, and the inputs' ``image_size`` or ``seq_len`` (None: the
    config's default, for the field the model does not read)."""
    model: str
    num_classes: int
    model_kwargs: dict = field(default_factory=dict)
    image_size: int | None = None
    seq_len: int | None = None

    def config_fields(self) -> dict:
        """The fields to build a ``PipelineConfig`` with (those left None are left out)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass(frozen=True)
class ScalingSettings:
    """The simulated scaling study of notebook 08 (:mod:`paper_repro.simulate.scaling`) at one
    profile. Per-model fields are keyed like ``models``: ``"resnet"``, ``"transformer"``.

    * ``models``: the two networks simulated
    * ``device``: where per-block costs are measured when none are cached
    * ``calibrations``: cached per-block cost files per model (in the notebook's calibration
      folder), or None: measure them on ``device``
    * ``micro_batch``: samples per micro-batch of the sweeps
    * ``memory_stages``, ``memory_micro_batches``, ``memory_schedules``: the memory table's
      stage counts, micro-batches per step and schedules
    * ``baselines``: the pipelined-backprop schedules local parallelism is compared with
    * ``ratio_stages``: per model, the processor counts of the throughput-vs-processors sweep
    * ``stage_sweep_micro_batches``: micro-batches per step in that sweep
    * ``micro_batch_sweep_stages``: per model, the processors of the throughput-vs-micro-batches sweep
    * ``micro_batches``: micro-batches per step in that sweep
    * ``paper_ratio``: the paper's reported local / pipelined-backprop throughput ratio
    * ``paper_stages``, ``paper_micro_batch``, ``paper_micro_batches``: the paper's setting
      (processors, samples per micro-batch, micro-batches per step)
    * ``paper_calibrations``: the cached ResNet cost files the paper's setting is simulated
      with (their spread is shown), or None: the one measured
    * ``paper_calibrations_gpu``: the same setting's cost files measured on a GPU
      (``tools/gpu_calibrate.py``)
    * ``gantt_schedules``, ``gantt_micro_batches``: the one-step charts' schedules and
      micro-batches
    * ``validation``: the committed comparisons of the simulator with repeated real runs
      (CSV files in the calibration folder)
    """
    models: dict[str, SimulatedModel]
    device: str
    calibrations: dict[str, str] | None
    micro_batch: int
    memory_stages: list[int]
    memory_micro_batches: list[int]
    memory_schedules: list[str]
    baselines: list[str]
    ratio_stages: dict[str, list[int]]
    stage_sweep_micro_batches: int
    micro_batch_sweep_stages: dict[str, int]
    micro_batches: list[int]
    paper_ratio: float
    paper_stages: int
    paper_micro_batch: int
    paper_micro_batches: int
    paper_calibrations: list[str] | None
    paper_calibrations_gpu: list[str]
    gantt_schedules: list[str]
    gantt_micro_batches: int
    validation: list[str]


@dataclass(frozen=True)
class RaceStrategy:
    """One way to train in the race (:mod:`paper_repro.race`): ``schedule`` ``"single"`` (one
    process, backprop: the reference), ``ddp``, a pipelined-backprop schedule, ``local`` or
    ``local/M``; ``method`` the local method of a local schedule (None: backprop)."""
    name: str
    schedule: str
    method: str | None = None


@dataclass(frozen=True)
class RaceSettings:
    """The race of notebook 10 at one profile: every strategy trains the same model to the same
    targets on the same processes, from the same seeds.

    * ``name``: the store's folder under the results folder
    * ``model``, ``model_kwargs``, ``dataset``, ``data_kwargs``: the network and its data
    * ``processes``: processes of every multi-process strategy (``"single"`` uses one), on
      ``device`` (``cuda``: one GPU each)
    * ``batches``: examples per step; ``micro_batches``: micro-batches per step (pipelines;
      ``local`` updates after each, so its updates are ``batch / micro_batches`` examples)
    * ``targets``: training-subset losses (``train_eval_loss``); a run stops at the lowest
    * ``max_examples``: a run also stops after this many examples (a strategy that misses a target)
    * ``eval_every_examples``, ``train_eval_examples``: the training-subset evaluation
    * ``repeats``: every run this many times, with seeds 0..repeats-1, strategies interleaved
    * ``lr``: one learning rate for every strategy; or, with ``lr=None``, each method's best
      learning rate in the committed compute study ``lr_store`` (a folder under ``results/``) at
      loss ``lr_target``, at the batch its optimizer steps on (:func:`paper_repro.race.race_lr`)
    * ``predict_devices``: ``{devices: depth}``, the device counts the race is predicted for and the
      depth of the committed study's net each trains (:mod:`paper_repro.simulate.race`), from per-block
      costs calibrated here at ``calibration_micro_batch`` (empty: no prediction), over a link of
      ``link = (latency s, bandwidth bytes/s)`` between devices (empty: an ideal, free link)
    """
    name: str
    model: str
    model_kwargs: dict
    dataset: str
    data_kwargs: dict
    processes: int
    batches: tuple[int, ...]
    micro_batches: int
    targets: tuple[float, ...]
    max_examples: int
    eval_every_examples: int
    train_eval_examples: int | None
    repeats: int
    strategies: tuple[RaceStrategy, ...]
    lr: float | None = None
    lr_store: str | None = None
    lr_target: float | None = None
    device: str = "cpu"
    predict_devices: dict = dataclasses.field(default_factory=dict)
    calibration_micro_batch: int = 64
    link: tuple = ()



# ------------------------------------------------------------------ similarity probes (05-07)
@dataclass(frozen=True)
class AblationVariant:
    """One row of the gradient-cosine ablation (:mod:`paper_repro.probes.ablation`): ``name``,
    ``change`` (what it changes, in words), and the settings it changes; None keeps the base's
    (:class:`GradientSettings`, trained greedily with Adam, the cosine on the training batch,
    linear heads, a hidden last block).

    * ``data_kwargs``: the data subset (e.g. the full training set)
    * ``optimizer``, ``lr``: ``"adam"`` or ``"sgd"`` (momentum 0.9), and its learning rate
    * ``probe_examples``: the cosine on a fixed set of that many training examples instead of
      the training batch
    * ``trajectory``: ``"backprop"`` trains the net end to end by backprop, the greedy auxiliary
      heads alongside on the detached block outputs (``"greedy"``: the base)
    * ``heads``: ``"deep"`` auxiliary heads shaped like the rest of the net (``"linear"``: the base)
    * ``last_block``: ``"classifier"`` makes the last block the linear classifier itself
      (``"block"``: the base)
    * ``width``, ``depth``, ``steps``, ``seeds``: the net's size, its training length, the seeds
    """
    name: str
    change: str = ""
    data_kwargs: dict | None = None
    optimizer: str | None = None
    lr: float | None = None
    probe_examples: int | None = None
    trajectory: str | None = None
    heads: str | None = None
    last_block: str | None = None
    width: int | None = None
    depth: int | None = None
    steps: int | None = None
    seeds: list[int] | None = None

    def changes(self) -> dict:
        """``{field: value}`` of the settings this variant sets."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("name", "change") and getattr(self, f.name) is not None}


@dataclass(frozen=True)
class AblationSettings:
    """The ablation of notebook 05: every variant trained with each of ``seeds`` (unless the
    variant names its own)."""
    seeds: list[int]
    variants: list[AblationVariant]


@dataclass(frozen=True)
class GradientSettings:
    """The gradient-similarity study of notebook 05 at one profile: an MLP of ``depth`` blocks
    of ``width`` on ``dataset`` (with ``data_kwargs``), ``steps`` of ``batch_size`` at Adam's
    ``lr``, each of ``methods`` with each of ``seeds``; the cosine of every block's local update
    with its backprop gradient every ``every`` steps. ``ablation``: one change at a time (None:
    not run at this profile)."""
    dataset: str
    data_kwargs: dict
    depth: int
    width: int
    steps: int
    every: int
    batch_size: int
    lr: float
    seeds: list[int]
    methods: list[str]
    ablation: AblationSettings | None = None


@dataclass(frozen=True)
class FeatureSettings:
    """The feature-similarity study of notebook 06 at one profile: ``model`` (with
    ``model_kwargs``) trained by each of ``methods`` for ``steps`` of ``batch_size`` at Adam's
    ``lr`` on ``dataset`` (with ``data_kwargs``), every method of a seed from one initial net;
    linear CKA on ``cka_examples`` test images, the test loss on ``eval_examples``."""
    dataset: str
    data_kwargs: dict
    model: str
    model_kwargs: dict
    steps: int
    batch_size: int
    lr: float
    cka_examples: int
    eval_examples: int
    seeds: list[int]
    methods: list[str]


@dataclass(frozen=True)
class RandomLabelRun:
    """One net of the random-label study: ``model`` (with ``model_kwargs``), called ``label`` in
    figures, trained ``epochs`` epochs of ``batch_size`` at Adam's ``lr`` on the study's data set
    with ``data_kwargs``; ``key``: its short name in unit files (None: ``model``); ``seeds``:
    its own seeds (None: the study's)."""
    model: str
    label: str
    model_kwargs: dict
    data_kwargs: dict
    epochs: int
    batch_size: int
    lr: float
    key: str | None = None
    seeds: list[int] | None = None


@dataclass(frozen=True)
class RandomLabelSettings:
    """The random-label study of notebook 07 at one profile: every net of ``runs`` on
    ``dataset`` with random labels, trained by each of ``methods`` with each of ``seeds``."""
    dataset: str
    seeds: list[int]
    methods: list[str]
    runs: list[RandomLabelRun]
