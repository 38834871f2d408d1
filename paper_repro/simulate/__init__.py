"""Paper-scale answers without the paper's hardware: exact memory accounting on the meta device
(:mod:`.memory`) and a pipeline-schedule simulator calibrated by measured per-block costs
(:mod:`.schedules`, :mod:`.engine`, :mod:`.calibrate`), with Gantt charts (:mod:`.gantt`)."""
