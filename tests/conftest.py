import os

import torch

# Tests use tiny models on a 2-core machine: one intra-op thread is faster and steadier.
torch.set_num_threads(1)
os.environ.setdefault("MPLBACKEND", "Agg")


FAULT_ENV = "PAPER_REPRO_TEST_FAULT"
FAULT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fault_injection")


def inject_fault(monkeypatch, spec: str) -> None:
    """Stage processes started from now on fail as ``spec`` says (``MODE@RANK:STEP``, see
    tests/fault_injection/sitecustomize.py): they inherit the variable and the folder on PYTHONPATH."""
    monkeypatch.setenv(FAULT_ENV, spec)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (FAULT_PATH, os.environ.get("PYTHONPATH")) if p))
