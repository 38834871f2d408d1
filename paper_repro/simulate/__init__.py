"""Paper-scale answers without the paper's hardware: exact memory accounting on the meta device
(:mod:`.memory`) and a pipeline-schedule simulator calibrated by measured per-block costs
(:mod:`.schedules`, :mod:`.engine`, :mod:`.calibrate`, :mod:`.costs`); :mod:`.api` runs it from
settings, :mod:`.command` is ``paper-repro simulate``, :mod:`.scaling` builds the scaling
notebook's tables (figures and Gantt charts: :mod:`paper_repro.plots.simulate`; the notebook's
settings: :func:`paper_repro.settings.scaling_settings`). The simulator's comparison with real
runs lives outside the package, in ``research/simulator_validation``."""
