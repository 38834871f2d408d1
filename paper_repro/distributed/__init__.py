"""Multi-process pipelines: local parallelism vs pipelined backprop vs DDP (see docs/pipeline.md).

* :mod:`.stages`    the run's config, the stage cut, boundary shapes and predicted bytes
* :mod:`.comm`      process group, failure watchdog, counted non-blocking sends/receives
* :mod:`.local`     the local-parallel pipeline (forward messages only)
* :mod:`.baselines` ``torch.distributed.pipelining`` GPipe / 1F1B (+ recomputation) and DDP
* :mod:`.memory`    peak memory per stage
* :mod:`.run`       the per-process worker (``torchrun -m paper_repro.distributed.run``)
* :mod:`.launch`    the package launcher (one local process per stage)
* :mod:`.bench`     ``paper-repro bench pipeline``; :mod:`.report` tables, targets, figures
"""
from .stages import SCHEDULES, PipelineConfig  # noqa: F401

__all__ = ["SCHEDULES", "PipelineConfig"]
