"""The multi-process trainer's per-step time against the pipeline benchmark's (see compare.py)."""
