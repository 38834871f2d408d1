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
