"""Compute-efficiency analysis (tables only) that does not depend on how long a run is.

Their figures are in :mod:`paper_repro.plots.efficiency`.

Pure functions of a sweep table (one row per step of every point: ``point_id``,
``method``, ``batch_size``, ``lr``, ``seed``, ``step``, ``examples``, the losses, and the
per-example FLOPs ``total_flops_pe``, ``critical_path_flops_pe``, ``fill_flops_pe``).

**When a run reaches a target** is decided by a *rule*:

* ``"eval"`` (the default): the loss of the net's own head on a fixed subset of the
  training set, measured every ``k`` training examples (the same ``k`` for every batch
  size; column ``train_eval_loss``). A run reaches ``L`` at the first evaluation whose
  loss is ``<= L``. A short large-batch run and a long small-batch run are judged by the
  same measurement at the same cadence in examples.
* ``"examples:W"``: the training mini-batch loss of the net's own head (``final_loss``)
  smoothed with a trailing mean over the last ``W`` *examples* (``ceil(W / batch)``
  steps), so the window lags every run by the same amount of data.
* ``"steps:w"``: a trailing mean over ``w`` steps, kept only to show how much a window
  counted in steps moves the result.

**Seeds**: a (method, batch size, learning rate) configuration reaches a target at the
median over its seeds of steps, examples, compute and time (an unreached seed counts as
infinite, so the configuration reaches the target only if at least half of its seeds do).

**Frontiers are staircases**: a method's time at compute ``c`` is the best time of any of
its configurations that reached the target with compute ``<= c``. Nothing is interpolated.
**Speedup** at ``c`` = backprop's staircase time / the method's, only for ``c`` from the
point where both staircases start up to the largest compute both actually ran (no
extrapolation). Both staircases are constant between their steps, so the speedup curve is
evaluated exactly at every step of either inside that range.
"""
from __future__ import annotations

from .frontiers import (per_seed_curves, per_seed_speedups, sensitivity, sensitivity_spread, speedup, speedup_table,
                        staircase, staircase_at, summarize_speedup)
from .regime import critical_batch, lr_at_edge, regime_by_rule, regime_start, steps_vs_batch
from .study import (StudyTables, claims_table, cost_table, save_tables, shared_end_speedup, step_ratio_table,
                    study_tables, verdict_table)
from .targets import (CONFIG_KEYS, FLOP_COLUMNS, best_lr_points, over_seeds, parse_rule, run_curve, suggest_targets,
                      time_to_target, trailing_mean, unreached_targets)

__all__ = [
    "CONFIG_KEYS", "FLOP_COLUMNS", "StudyTables", "best_lr_points", "claims_table", "cost_table",
    "critical_batch", "over_seeds", "regime_by_rule", "regime_start", "parse_rule", "per_seed_curves",
    "per_seed_speedups", "run_curve", "save_tables", "shared_end_speedup", "step_ratio_table", "sensitivity", "sensitivity_spread", "speedup", "speedup_table", "staircase",
    "staircase_at", "steps_vs_batch", "study_tables", "suggest_targets", "summarize_speedup",
    "time_to_target", "trailing_mean", "unreached_targets", "verdict_table",
]
