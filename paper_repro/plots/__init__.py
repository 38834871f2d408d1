"""Every figure of the package, one module per figure family.

* :mod:`.labels`      titles: model, data set, profile and hardware of a figure
* :mod:`.common`      saving, log-axis ticks, training curves of per-step records
* :mod:`.efficiency`  loss curves, time-vs-compute Pareto frontiers, speedup over backprop
* :mod:`.similarity`  gradient cosine per layer, CKA heatmap, filter grids, random labels
* :mod:`.pipeline`    throughput, peak memory and busy fraction per pipeline stage
* :mod:`.simulate`    simulated schedules: Gantt charts, memory per processor, throughput ratios
* :mod:`.race`        the race: loss against wall-clock seconds of every strategy

Figure functions take the tables of :mod:`paper_repro.analysis`, :mod:`paper_repro.probes`
and :mod:`paper_repro.distributed.report` (and the simulator's records, results and
:mod:`paper_repro.simulate.scaling` tables) and return a matplotlib ``Figure``.
"""
from . import efficiency, pipeline, race, similarity, simulate
from .common import clean_log_ticks, save_figure, training_curves
from .race import plot_race
from .labels import data_label, figure_title, grid_labels, hardware_label, model_label

__all__ = ["clean_log_ticks", "data_label", "efficiency", "figure_title", "grid_labels", "hardware_label",
           "model_label", "pipeline", "plot_race", "race", "save_figure", "similarity", "simulate", "training_curves"]
