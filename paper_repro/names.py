"""Every name the commands accept, defined once: models, data sets, methods, optimizers,
profiles, studies, schedules and cut rules.

The parser (:mod:`paper_repro.cli`) and the modules that do the work import these tuples from
here, so a name is spelled in one place. Nothing here imports torch or the rest of the package.

Schedules carry the names of ``bench pipeline`` (after ``torch.distributed.pipelining``) in
every tool: ``estimate``, ``simulate`` and ``bench``. ``local`` steps each stage's optimizer
after every micro-batch, ``local/M`` once per step of M micro-batches (the pipelined-backprop
schedules' rule). The simulator's former spellings are accepted with a warning
(:data:`SCHEDULE_ALIASES`, :func:`schedule_name`).
"""
from __future__ import annotations

import re
import warnings

# ---------------------------------------------------------------- models, data, training
MODELS = ("mlp", "transformer", "resnet18", "resnet34", "resnet50")
IMAGE_DATASETS = ("digits", "cifar10", "imagenet")
TEXT_DATASETS = ("text",)
DATASETS = IMAGE_DATASETS + TEXT_DATASETS
OPTIMIZERS = ("adam", "sgd")
DTYPES = ("bfloat16", "float16", "float32", "float64")      # torch dtype names
DEVICES = ("cpu", "cuda")                                   # of a pipeline's processes
PREFETCH = ("auto", "on", "off")                            # a pipeline's stage 0 drawing inputs ahead

# local-learning methods: fixed names and the two patterns of chunked
METHODS = ("backprop", "greedy", "overlapping", "chunked-K")
FIXED_METHODS = ("backprop", "greedy", "overlapping")
METHOD_PATTERNS = {"chunked-K": r"chunked-(\d+)", "chunked@A,B,...": r"chunked@(\d+(?:,\d+)*)"}

# profiles and built-in studies
PROFILES = ("quick", "cpu", "full")
# transformer-lm-pilot: the pilot that chose transformer-lm's targets (its cpu profile only)
COMPUTE_STUDIES = ("mlp", "mlp-deep", "transformer", "transformer-lm", "transformer-lm-pilot", "resnet",
                   "resnet-imagenet")
# depth series: a compute study's net at several depths, one grid per depth -> that compute study
DEPTH_SERIES = {"mlp-modules": "mlp-deep", "transformer-lm-modules": "transformer-lm"}
MODULES_STUDY = "mlp-modules"      # the deep MLP's series (the first one the package had)
SWEEP_STUDIES = (*COMPUTE_STUDIES, *DEPTH_SERIES)
SIMILARITY_STUDIES = ("gradient", "features", "random_labels")

# ---------------------------------------------------------------------------- schedules
RECOMPUTE = "-recompute"
# pipelined backprop with one stage per process, and with two ("virtual") stages per process
SINGLE_STAGE = ("gpipe", "1f1b", "1f1b-recompute")
MULTI_STAGE = ("interleaved-1f1b", "interleaved-1f1b-recompute", "interleaved-zb", "interleaved-zb-recompute",
               "zbv", "zbv-recompute", "dualpipev", "dualpipev-recompute")
PIPELINED_BACKPROP = SINGLE_STAGE + MULTI_STAGE
LOCAL_SCHEDULES = ("local", "local/M")
# what one pipeline run's config holds (local/M is local with update_every = micro_batches)
RUN_SCHEDULES = ("local", *PIPELINED_BACKPROP, "ddp")
# what `bench pipeline --schedule` accepts
RUN_NAMES = ("local", "local/M", *PIPELINED_BACKPROP, "ddp")
# what the simulator can replay
SIMULATED_SCHEDULES = (*LOCAL_SCHEDULES, "gpipe", "gpipe-recompute", "1f1b", "1f1b-recompute",
                       "interleaved-1f1b", "interleaved-1f1b-recompute", "interleaved-zb", "zbv", "dualpipev")
# the order of a result table's rows (every tool): the local schedules, then pipelined backprop
# with one stage per process, with two, then data parallelism
SCHEDULE_ORDER = (*LOCAL_SCHEDULES, "gpipe", "gpipe-recompute", *SINGLE_STAGE[1:], *MULTI_STAGE, "ddp")
# the rows estimate gives, and the set to ask simulate and bench for to compare the three
PLANNING_SCHEDULES = (*LOCAL_SCHEDULES, "1f1b", "1f1b-recompute")
# former spellings -> the names above
SCHEDULE_ALIASES = {"local-per-step": "local/M", "zb-interleaved": "interleaved-zb"}
# the references of a result table's ratio columns
REFERENCE = "1f1b"
RECOMPUTE_REFERENCE = "1f1b-recompute"

# ---------------------------------------------------------------------------- cut rules
# how a net's blocks are cut into stages: balancing measured time (forward, backward,
# optimizer step, send), balancing forward FLOPs, or as many blocks per stage as chunked-K
CUTS = ("time", "flops", "blocks")
DEFAULT_CUT = "time"
CUT_HELP = ("the stage cut: time balances measured time per micro-batch (forward, backward, optimizer "
            "step, send; the default of estimate, simulate and bench), flops balances forward FLOPs, "
            "blocks puts as many blocks on each stage as chunked-STAGES")


class DeprecatedName(FutureWarning):
    """A former spelling was given; the warning names the current one."""


def schedule_name(name: str, valid: tuple[str, ...] = SIMULATED_SCHEDULES) -> str:
    """``name`` if it is one of ``valid``; a former spelling -> its current name, with a
    one-line :class:`DeprecatedName` warning; anything else -> ValueError naming ``name``."""
    if name in SCHEDULE_ALIASES and SCHEDULE_ALIASES[name] in valid:
        new = SCHEDULE_ALIASES[name]
        warnings.warn_explicit(f"schedule {name!r} is deprecated; use {new!r}", DeprecatedName,
                               "paper-repro", 0)
        return new
    if name not in valid:
        raise ValueError(f"unknown schedule {name!r}; valid: {', '.join(valid)}")
    return name


def check_cut(cut: str, valid: tuple[str, ...] = CUTS) -> str:
    """``cut`` if it is one of ``valid`` cut rules, else ValueError naming it."""
    if cut not in valid:
        raise ValueError(f"unknown cut {cut!r}; valid: {', '.join(valid)}")
    return cut


def former_cut(cut: str, balance: str | None, where: str) -> str:
    """The cut rule of a call that may still name it ``balance=`` (its former keyword, taken for
    one release with a FutureWarning); ``cut`` otherwise."""
    if balance is None:
        return cut
    warnings.warn(f"{where}(balance=...) is now {where}(cut=...)", FutureWarning, stacklevel=3)
    return balance


def is_method(spec: str) -> bool:
    """Whether ``spec`` has the syntax of a method name (not whether it fits a net)."""
    return isinstance(spec, str) and (spec in FIXED_METHODS
                                      or any(re.fullmatch(p, spec) for p in METHOD_PATTERNS.values()))
