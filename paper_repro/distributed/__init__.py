"""Multi-process pipelines: local parallelism vs pipelined backprop vs DDP (see docs/pipeline.md).

* :mod:`.fields`    the fields of a run and their defaults, without torch (:class:`.fields.PipelineFields`)
* :mod:`.config`    the run's config (:class:`PipelineConfig`) and its checks
* :mod:`.inputs`    data or synthetic inputs, the micro-batch stream, the learner every process builds
* :mod:`.cut`       the stage cut (exact min-max partition), boundary shapes and FLOPs
* :mod:`.timing`    measured module and block times (the time-balanced cuts), predicted bytes
* :mod:`.comm`      process group, failure watchdog; :mod:`.messages` counted sends/receives
* :mod:`.replicas`  ``dp`` replicas per stage: ranks, pipeline and stage process groups
* :mod:`.local`     the local-parallel pipeline (forward messages only): ``local`` and ``local/M``
* :mod:`.baselines` ``torch.distributed.pipelining``: GPipe, 1F1B, Interleaved 1F1B, interleaved
  zero bubble, ZBV, DualPipeV (each also with recomputation)
* :mod:`.ddp`       data parallelism over the same processes
* :mod:`.memory`    peak memory per stage
* :mod:`.run`       the per-process worker (``torchrun -m paper_repro.distributed.run``)
* :mod:`.launch`    the package launcher (one local process per stage)
* :mod:`.torchrun`  ``torchrun`` for several nodes, ending a failed rendezvous or stage in one line
* :mod:`.arguments` the options of ``bench pipeline`` and of the worker, without torch;
  :mod:`.options` the configs they expand to
* :mod:`.bench`     ``paper-repro bench pipeline``; :mod:`.report` tables, targets, figures

Its names: the cuts, devices, optimizers and schedules a run takes (``CUTS``, ``DEVICES``,
``OPTIMIZERS``, ``RUN_SCHEDULES``, from :mod:`paper_repro.names`), and those of ``_LAZY`` below.
Importing the package loads no torch: the parser takes its options from :mod:`.arguments`
alone. The names below that need torch are loaded from their modules on first use; the
former ``balanced_split`` and ``time_split`` still resolve, with a FutureWarning, for one release.
"""
import importlib
import warnings

from ..names import CUTS, DEVICES, OPTIMIZERS, RUN_SCHEDULES

# name -> the module that defines it (each imports torch, so it loads on first use)
_LAZY = {name: module for module, names in {
    "config": ("DTYPES", "PipelineConfig"),
    "inputs": ("build_learner", "data_spec", "label_info", "micro_batches", "synthetic_batches"),
    "cut": ("BlockInfo", "StagePlan", "balanced_cut", "boundary_info", "boundary_records", "plan_stages"),
    "timing": ("module_times", "predicted_comm", "time_cut"),
}.items() for name in names}
_FORMER = {"balanced_split": "balanced_cut", "time_split": "time_cut"}

__all__ = ["CUTS", "DEVICES", "OPTIMIZERS", "RUN_SCHEDULES", *_LAZY]


def __getattr__(name: str):
    if name in _FORMER:
        warnings.warn(f"paper_repro.distributed.{name} is now {_FORMER[name]}", FutureWarning, stacklevel=2)
        return __getattr__(_FORMER[name])
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
