"""Former home of the pipeline's configuration, stage cut and cost model, now split by concern:

* :mod:`.config` ``PipelineConfig``, its checks and constants, ``parse_fault``
* :mod:`.inputs` ``data_spec``, ``build_learner``, the micro-batch streams, ``label_info``
* :mod:`.split`  ``BlockInfo``, ``boundary_info``, ``StagePlan``, ``plan_stages``, ``balanced_split``,
  ``boundary_records``
* :mod:`.timing` ``module_times``, ``time_split``, ``predicted_comm``

The names stay importable from here for existing callers.
"""
from .config import (BALANCES, DEVICES, DTYPES, FAULT_MODES, OPTIMIZERS, PIPELINED_BACKPROP,  # noqa: F401
                     SCHEDULES, PipelineConfig, parse_fault)
from .inputs import build_learner, data_spec, label_info, micro_batches, synthetic_batches  # noqa: F401
from .split import (BlockInfo, StagePlan, balanced_split, boundary_info, boundary_records,  # noqa: F401
                    plan_stages)
from .timing import module_times, predicted_comm, time_split  # noqa: F401
