"""Grids of training runs: resumable, shardable, parallel, with divergence recorded.

* :mod:`.grid`    a :class:`Grid` (one model x data set, swept over methods x batch sizes x
                  learning rates x seeds), its point ids and shards, its total FLOPs
* :mod:`.store`   the results folder: ``grid.json`` + one atomically written file per point
* :mod:`.runner`  :func:`run_sweep`: pending points of a shard, in-process or in workers
* :mod:`.duration` how long a grid will take, from a pilot sweep's records or its own saved runs

A point file holds the point's per-step records (``step``, ``examples``, ``final_loss``,
``eval_loss``, ``eval_acc``, ``wall_time``) with its configuration, ``status``
(``finished`` or ``diverged``) and the per-example FLOPs of :func:`paper_repro.cost.step_cost`
(``total_flops_pe``, ``critical_path_flops_pe``, ``fill_flops_pe``) as columns, so the
analysis is a pure function of the table :func:`load_results` returns. Each point also records
the machine that ran it (``hardware``: the CPU model as ``figures/MACHINE`` names it, or the
GPU; ``torch_version``); points written before it did have neither column
(:func:`point_machines` says "not recorded").
"""
from .duration import estimate_line, measure_rates, remaining_estimate, remaining_line, saved_rates, time_estimate
from .grid import Grid, cost_line, example_shape, grid_flops, parse_shard, point_id, store_name
from .runner import SweepInterrupted, SweepReport, point_machines, run_point, run_sweep
from .store import (CONFIG_COLUMNS, RECORD_COLUMNS, STATUSES, adopt_points, finished_ids, load_grid, load_results,
                    open_store, progress_line, remove_stale_tmp)

__all__ = ["CONFIG_COLUMNS", "RECORD_COLUMNS", "STATUSES", "Grid", "adopt_points", "SweepInterrupted", "SweepReport",
           "cost_line", "estimate_line", "example_shape", "measure_rates", "finished_ids", "grid_flops", "load_grid", "load_results", "open_store",
           "parse_shard", "point_id", "point_machines", "progress_line", "remaining_estimate", "remaining_line", "remove_stale_tmp", "run_point", "run_sweep", "saved_rates", "store_name", "time_estimate"]
