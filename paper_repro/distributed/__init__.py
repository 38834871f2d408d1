"""Multi-process pipelines: local parallelism vs pipelined backprop vs DDP (see docs/pipeline.md).

* :mod:`.config`    the run's config (:class:`PipelineConfig`) and its checks
* :mod:`.inputs`    data or synthetic inputs, the micro-batch stream, the learner every process builds
* :mod:`.split`     the stage cut (exact min-max partition), boundary shapes and FLOPs
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
* :mod:`.bench`     ``paper-repro bench pipeline``; :mod:`.report` tables, targets, figures
"""
from .config import BALANCES, DEVICES, DTYPES, OPTIMIZERS, SCHEDULES, PipelineConfig
from .inputs import build_learner, data_spec, label_info, micro_batches, synthetic_batches
from .split import BlockInfo, StagePlan, balanced_split, boundary_info, boundary_records, plan_stages
from .timing import module_times, predicted_comm, time_split

__all__ = ["BALANCES", "DEVICES", "DTYPES", "OPTIMIZERS", "SCHEDULES", "PipelineConfig",
           "build_learner", "data_spec", "label_info", "micro_batches", "synthetic_batches",
           "BlockInfo", "StagePlan", "balanced_split", "boundary_info", "boundary_records", "plan_stages",
           "module_times", "predicted_comm", "time_split"]
