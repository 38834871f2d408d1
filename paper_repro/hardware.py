"""One line naming the hardware a run used, for figure titles and benchmark records."""
from __future__ import annotations

import os
import platform

import torch


def hardware_label(device: str = "cpu") -> str:
    """A short description of the hardware, e.g. ``'CPU x2 (x86_64)'`` or ``'NVIDIA H100'``."""
    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"CPU x{cores} ({platform.machine()})"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what ``platform`` knows), e.g.
    ``'AMD EPYC 9B14'``: quick runs on the CPU are bitwise repeatable on one model, not across."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


MACHINE_COLUMNS = ("hardware", "torch_version")


def machine_columns(device: str = "cpu") -> dict:
    """What a sweep point records of the machine that ran it, in columns :data:`MACHINE_COLUMNS`:
    ``hardware``, the CPU's model as ``figures/MACHINE`` names it (:func:`cpu_model`), or the
    GPU's name for a CUDA device, and ``torch_version``."""
    cuda = str(device).startswith("cuda") and torch.cuda.is_available()
    return {"hardware": hardware_label(device) if cuda else cpu_model(), "torch_version": torch.__version__}


def figure_machine() -> str:
    """What the committed quick figures depend on besides the code: CPU model and torch version."""
    return f"{cpu_model()}; torch {torch.__version__}"


if __name__ == "__main__":
    print(figure_machine())
