"""What one pipeline run is made of: the fields of :class:`PipelineFields`, with their defaults.

Nothing here imports torch: the parser of ``paper-repro bench pipeline`` and ``simulate``
(:mod:`.arguments`, :mod:`paper_repro.cli`) take their defaults from here and answer
``--help`` at once. :class:`.config.PipelineConfig` adds the checks, which need torch.
"""
from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

from ..fields import DataFields, ModelFields, OptimFields
from ..names import DEFAULT_CUT


@dataclass
class PipelineFields(ModelFields, DataFields, OptimFields):
    """One benchmark run: a model cut into ``stages`` processes, trained with ``schedule``.

    ``method`` is the local-learning method of the ``local`` schedule (default
    ``chunked-{stages}``: one local module per stage, as in the paper); the other schedules
    train with backprop but use the stage cut that ``method`` and ``cut_at`` give. ``cut_at``
    lists the first local module of stages 1..S-1; without it the rule ``cut`` places the cut:
    ``"time"`` (default: forward + backward + optimizer step of each local module on one
    micro-batch and the send of a stage's output, measured once before the run;
    :func:`.timing.time_cut`), ``"flops"`` (forward FLOPs of blocks and heads) or ``"blocks"``
    (as many blocks per stage as ``chunked-{stages}`` gives). The schedules of ``MULTI_STAGE`` hold two stages per process (Interleaved 1F1B and
    interleaved zero bubble: stages ``r`` and ``r + S``; ZBV and DualPipeV: ``r`` and
    ``2S - 1 - r``); ``cut_at_blocks`` lists the first block of their stages 1..2S-1 (without
    it, the ``cut`` rule's cut of the net's blocks: :func:`.timing.block_cut` for ``"time"``).
    A step is ``micro_batches`` micro-batches of ``micro_batch`` samples; the first
    ``warmup_steps`` steps are not timed.
    ``update_every``: the local pipeline's stages step their optimizers every this many
    micro-batches (gradients averaged over them); 1 = after every micro-batch (reported as
    ``local``), ``micro_batches`` = once per step, the pipelined-backprop schedules' optimizer
    semantics (reported as ``local/M``).
    ``dp``: each stage runs as ``dp`` replicas (``stages * dp`` processes, rank
    ``replica * stages + stage``), each reading its own micro-batches; the replicas of a stage
    average their gradients before every optimizer step (DDP over the stage's process group),
    so a step sees ``dp * micro_batch`` samples per micro-batch.
    ``timeout`` bounds every message, ``init_timeout`` the start-up (reaching the rendezvous
    store and waiting for every stage to join), ``heartbeat_timeout`` a silent peer.
    Model, data and optimizer fields: :mod:`paper_repro.fields`.
    """
    schedule: str = "local"
    method: str | None = None
    stages: int = 2
    cut_at: list[int] | None = None
    cut: str = DEFAULT_CUT
    cut_at_blocks: list[int] | None = None
    dp: int = 1
    micro_batch: int = 8
    micro_batches: int = 16
    steps: int = 3
    warmup_steps: int = 1
    dataset: str = "synthetic"      # a data set of paper_repro.data, or synthetic inputs:
    image_size: int = 32            # synthetic images: image_size x image_size,
    channels: int = 3               # with this many channels,
    num_classes: int = 10           # and classes (the vocabulary size for the Transformer)
    seq_len: int = 64               # synthetic token windows
    input: str | None = None        # synthetic: image | text (None: text for the built-in transformer)
    seed: int = 0
    dtype: str = "float32"
    device: str = "cpu"
    threads: int | None = None
    max_in_flight: int = 2
    update_every: int = 1
    timeout: float = 300.0
    heartbeat_timeout: float = 30.0
    init_timeout: float = 300.0
    save_params: str | None = None
    prefetch: str = "auto"          # draw stage 0's inputs ahead in a thread: auto = on GPUs only

    @property
    def prefetches(self) -> bool:
        """Whether stage 0 draws its inputs ahead in a background thread, as a data loader's
        workers would (``auto``: on a GPU, where drawing on the host is as long as a stage's
        compute; not on a CPU, whose cores the stages use)."""
        return self.prefetch == "on" or (self.prefetch == "auto" and self.device == "cuda")

    @property
    def local_method(self) -> str:
        return self.method or f"chunked-{self.stages}"

    @property
    def total_micro_batches(self) -> int:
        return (self.warmup_steps + self.steps) * self.micro_batches

    @property
    def processes(self) -> int:
        return self.stages * self.dp

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def __getattr__(self, name: str):
        # only reached for names the instance lacks: the former names of the cut fields
        if name in FORMER_FIELDS:
            warnings.warn(f"the pipeline field {name!r} is now {FORMER_FIELDS[name]!r}", FutureWarning, stacklevel=2)
            return getattr(self, FORMER_FIELDS[name])
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


# the cut fields' names before they were one word (``cut``); still read, for one release
FORMER_FIELDS = {"split": "cut_at", "balance": "cut", "block_split": "cut_at_blocks"}


def current_fields(fields: dict) -> dict:
    """``fields`` (a config as a dict, e.g. a checkpoint's manifest of an earlier release) with
    the former names of :data:`FORMER_FIELDS` under their current ones."""
    return {FORMER_FIELDS.get(k, k): v for k, v in fields.items()}


@dataclass
class TrainingFields:
    """What makes a pipeline run a training run (``paper-repro train --stages S``), beside its
    :class:`PipelineFields` (``steps`` steps of ``micro_batches`` micro-batches, no warm-up).

    An *update* is one optimizer step of the stages: a micro-batch for ``local`` with
    ``update_every = 1``, a step for ``local/M`` and the pipelined-backprop and DDP schedules;
    the records have one row per update, as single-process training at the batch the optimizer
    steps on. ``eval_every``: updates between evaluations of the whole net on the test split
    (``eval_examples`` examples; 0: only at the end); ``eval_every_examples`` (0: off): the
    training-subset evaluation each time the examples seen cross a multiple of it
    (``train_eval_examples`` examples, None: the whole training split); ``stop_loss``: every
    process stops at the first training-subset evaluation at or below it.
    ``checkpoint``: a folder where each process writes its state every ``checkpoint_every``
    updates (0: only when stopped by Ctrl-C or SIGTERM), with a manifest written last;
    ``resume``: go on from the checkpoint there. ``save``: the whole trained learner (net and
    heads) as one state dict, written by rank 0 at the end."""
    eval_every: int = 100
    eval_examples: int | None = 2000
    eval_every_examples: int = 0
    train_eval_examples: int | None = None
    stop_loss: float | None = None
    checkpoint: str | None = None
    checkpoint_every: int = 0
    resume: bool = False
    save: str | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

