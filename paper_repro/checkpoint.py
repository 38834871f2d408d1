"""Checkpoints of a training run in progress, so that a stopped run resumes where it was.

:func:`paper_repro.train.train` with ``checkpoint=path`` saves, every ``checkpoint_every_s``
seconds at the end of a step, everything the rest of the run depends on: the learner's
parameters and buffers, the optimizer's state, the records so far, the step, the stop rule's
progress, the seconds trained and the global random state. A new ``train`` call with the same
configuration and path loads it, replays the data sampler to that step and goes on; the
records it returns are those of an uninterrupted run (``wall_time`` counts only the seconds
spent training). A run stopped between two saves loses at most the steps since the last one.

A checkpoint is written to a temporary dot file beside it (named by host and process id, as
the sweep store's temporary files are) and renamed into place, so it is whole or absent; it is
read with ``weights_only=True`` (tensors and plain Python values only).
"""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import torch

from . import build
from .config import ModelParts

FORMAT = 1
_IGNORED = ("progress", "device", "threads")  # how a run is shown or where it runs does not change its records


def _comparable(config: dict) -> dict:
    """The fields that decide the records, as plain JSON values (a Path becomes its text)."""
    return json.loads(json.dumps({k: v for k, v in config.items() if k not in _IGNORED}, default=str))


def save(path: str | os.PathLike, config: dict, *, step: int, learner: torch.nn.Module,
         optimizer: torch.optim.Optimizer, rows: list[dict], stop_at: float, elapsed: float) -> Path:
    """Write the state after ``step`` to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = dict(format=FORMAT, config=_comparable(config), step=step, learner=learner.state_dict(),
                 optimizer=optimizer.state_dict(), rows=rows, stop_at=stop_at, elapsed=elapsed,
                 rng=torch.get_rng_state())
    tmp = path.with_name(f".{path.name}.{socket.gethostname().replace('.', '_')}.{os.getpid()}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def load(path: str | os.PathLike, config: dict, device: str = "cpu") -> dict | None:
    """The state saved at ``path`` (None: no checkpoint there). A checkpoint of another
    configuration is a ValueError naming the fields that differ."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as err:  # a file that is not a checkpoint, or one torch cannot read
        raise ValueError(f"cannot read the checkpoint {path}: {err}; delete it to start the run afresh") from None
    if state.get("format") != FORMAT:
        raise ValueError(f"{path} is a checkpoint of format {state.get('format')!r}, this version reads {FORMAT}; "
                         "delete it to start the run afresh")
    mine = _comparable(config)
    if state["config"] != mine:
        differ = sorted(k for k in set(mine) | set(state["config"]) if mine.get(k) != state["config"].get(k))
        raise ValueError(f"{path} is the checkpoint of another run (it differs in {differ}); "
                         "delete it or pass another checkpoint path")
    return state


def remove(path: str | os.PathLike) -> None:
    """Delete the checkpoint at ``path`` (if any), and its folder once empty."""
    path = Path(path)
    path.unlink(missing_ok=True)
    try:
        path.parent.rmdir()
    except OSError:  # not empty, or gone
        pass


# ------------------------------------------------------------------------ trained models
MODEL_FORMAT = 1


def save_learner(path: str | os.PathLike, learner: torch.nn.Module, *, model: str, model_kwargs: dict,
                 dataset: str, seed: int = 0) -> Path:
    """The whole trained learner (the net and every local module's head) as one state dict, with
    what rebuilds it (model name, its keyword arguments, method, data set), written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"format": MODEL_FORMAT, "model": model, "model_kwargs": model_kwargs, "method": learner.spec,
             "dataset": dataset, "seed": seed,
             "learner": {k: v.detach().cpu() for k, v in learner.state_dict().items()}}
    tmp = path.with_name(f".{path.name}.{socket.gethostname().replace('.', '_')}.{os.getpid()}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def load_learner(path: str | os.PathLike, data, device: str = "cpu"):
    """The learner :func:`save_learner` wrote, rebuilt for ``data`` (the data set it was trained
    on, which gives the input shape and classes) with its trained parameters."""
    state = torch.load(path, map_location=device, weights_only=True)
    if state.get("format") != MODEL_FORMAT:
        raise ValueError(f"{path} is not a model saved by paper_repro (format {state.get('format')!r})")
    parts = ModelParts(model=state["model"], model_kwargs=state["model_kwargs"])
    learner = build.build_learner(parts, data, state["method"], state["seed"])
    learner.load_state_dict(state["learner"])
    return learner.to(device)

