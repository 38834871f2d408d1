"""The race predicted for more devices: time to target = steps to target x step time. A prediction.

Steps come from a committed compute study (median over seeds at the best learning rate, per
method, batch and target: the ``steps_vs_batch`` tables), of the net each device count trains;
step times from the simulator on per-block costs calibrated on this machine
(:class:`.calibrate.BlockCosts`). On ``S`` devices, global batch ``b``, ``M`` micro-batches a step:

* **one process**: one device computes every block and head at batch ``b``
  (``sum(forward + backward + optimizer)`` of the blocks and the net's head, scaled to ``b``);
* **ddp**: each device computes the step at batch ``b / S``, then the gradients are all-reduced:
  a ring all-reduce of ``P`` parameter bytes takes ``2 (S-1) (latency + P / (S bandwidth))``
  on the link, not overlapped with the backward (a stated formula: the simulator has no model
  of data parallelism);
* **pipelined backprop** (``gpipe``, ``1f1b``, ``1f1b-recompute``, ``zbv``): the simulator's
  schedule on ``S`` stages at micro-batch ``b / M``, backprop's steps at batch ``b``;
* **local** (every stage steps after each micro-batch): the simulator's ``local`` schedule on
  ``S`` stages; the method's updates at batch ``b / M`` (each update a micro-batch), so its time
  is ``updates x (b / M) / samples_per_s``;
* **local/M** (one step per step): the simulator's ``local`` stepping once per step, the method's
  steps at batch ``b``.

The simulator's local schedule puts one head on each stage's last block; greedy's other heads
(a linear layer each on these nets) are left out. Where the study did not train a (method, batch)
its steps are interpolated between the studied batches on either side (``steps_from`` says so),
else the prediction is NaN.
"""
from __future__ import annotations

import math

import pandas as pd

from ..settings.types import RaceStrategy
from .calibrate import BlockCosts
from .costs import fresh_share, pieces, schedule_costs
from .engine import Link, simulate
from .schedules import stages_per_rank


def one_device_step(bc: BlockCosts, batch: int) -> float:
    """Seconds of one step at ``batch`` on one device: every block's forward, backward and
    optimizer step and the net's head (its forward includes the loss)."""
    c = bc.scaled(batch)
    blocks = sum(c.forward) + sum(c.backward) + sum(c.optimizer)
    return blocks + c.head_forward[-1] + c.head_backward[-1] + c.head_optimizer[-1]


def param_bytes(bc: BlockCosts, float_bytes: int = 4) -> float:
    """Bytes of the net's parameters, from the calibration's FLOPs: a linear block of ``n``
    multiply-adds per sample holds ``n`` weights (``flops = 2 n``); biases and norms are left
    out. Needs ``bc.flops``; for nets other than MLPs give the bytes to :func:`ddp_step` yourself."""
    if not bc.flops:
        raise ValueError("the calibration has no FLOPs per block: give the parameter bytes")
    return sum(bc.flops) / 2 * float_bytes


def ddp_step(bc: BlockCosts, batch: int, devices: int, link: Link, grad_bytes: float) -> float:
    """Seconds of one data-parallel step (see the module docstring)."""
    S = devices
    allreduce = 2 * (S - 1) * (link.latency + grad_bytes / (S * link.bandwidth)) if S > 1 else 0.0
    return one_device_step(bc, max(1, batch // S)) + allreduce


def pipeline_samples_per_s(bc: BlockCosts, schedule: str, devices: int, micro_batch: int, micro_batches: int,
                           link: Link, update_every: int = 1) -> float:
    """The simulator's samples/s of ``schedule`` on ``devices`` stages (pieces cut by calibrated
    time); NaN where the schedule cannot run these settings."""
    c = bc.scaled(micro_batch)
    count = devices * stages_per_rank(schedule)
    if count > c.blocks:
        return math.nan
    try:
        costs = schedule_costs(c, schedule, devices, blocks=pieces(c, count, "time"),
                               fresh=fresh_share(schedule, micro_batches, update_every))
        return simulate(schedule, costs, micro_batches, micro_batch, link=link, steps=2, warmup_steps=1,
                        update_every=update_every).samples_per_s
    except ValueError:
        return math.nan


def study_steps(steps: pd.DataFrame, depth: int, method: str, batch: int, target: float) -> tuple[float, str]:
    """(steps to ``target`` at ``batch``, where they come from): the study's own where it trained
    that batch; else interpolated in log steps against log batch between the studied batches on
    either side (named, e.g. ``interpolated 32-128``); else NaN (``not studied``)."""
    rows = steps[(steps["depth"] == depth) & (steps["method"] == method)
                 & ((steps["target"] - target).abs() < 1e-9)].dropna(subset=["step"])
    exact = rows[rows["batch_size"] == batch]
    if len(exact):
        return float(exact["step"].iloc[0]), "study"
    below, above = rows[rows["batch_size"] < batch], rows[rows["batch_size"] > batch]
    if below.empty or above.empty:
        return math.nan, "not studied"
    lo, hi = below.loc[below["batch_size"].idxmax()], above.loc[above["batch_size"].idxmin()]
    w = (math.log(batch) - math.log(lo["batch_size"])) / (math.log(hi["batch_size"]) - math.log(lo["batch_size"]))
    value = math.exp((1 - w) * math.log(lo["step"]) + w * math.log(hi["step"]))
    return value, f"interpolated {int(lo['batch_size'])}-{int(hi['batch_size'])}"


def predict(steps: pd.DataFrame, costs: dict[int, BlockCosts], devices: dict[int, int], strategies: list[RaceStrategy],
            batches, targets, micro_batches: int, link: Link) -> pd.DataFrame:
    """One row per (devices, strategy, batch, target): ``depth`` (the net trained on that many
    devices: ``devices[S]``), ``steps`` (the study's; updates for ``local``), ``step_seconds``,
    ``seconds`` (their product: the predicted time to target, no evaluation, no start-up) and
    ``kind = "prediction"``. ``steps``: columns depth, method, batch_size, target, step;
    ``costs``: depth -> calibration of that net."""
    rows = []
    for S, depth in devices.items():
        bc = costs[depth]
        grad = param_bytes(bc)
        for s in strategies:
            method = s.method or "backprop"
            for b in batches:
                mb = b // micro_batches
                if s.schedule == "single":
                    per_step, study_batch = one_device_step(bc, b), b
                elif s.schedule == "ddp":
                    per_step, study_batch = ddp_step(bc, b, S, link, grad), b
                elif s.schedule in ("local", "local/M"):
                    every = micro_batches if s.schedule == "local/M" else 1
                    sps = pipeline_samples_per_s(bc, "local", S, mb, micro_batches, link, every)
                    study_batch = b if every > 1 else mb
                    per_step = study_batch / sps
                else:
                    per_step, study_batch = b / pipeline_samples_per_s(bc, s.schedule, S, mb, micro_batches, link), b
                for t in targets:
                    n, source = study_steps(steps, depth, method, study_batch, t)
                    rows.append({"devices": S, "depth": depth, "strategy": s.name, "schedule": s.schedule,
                                 "method": method, "batch": b, "update_batch": study_batch, "target": t,
                                 "steps": n, "steps_from": source, "step_seconds": per_step,
                                 "seconds": n * per_step, "kind": "prediction"})
    return pd.DataFrame(rows)


def prediction_error(predicted: pd.DataFrame, measured: pd.DataFrame, devices: int = 2) -> pd.DataFrame:
    """The prediction at ``devices`` beside the measured race (:func:`paper_repro.analysis.race.race_table`):
    per (strategy, batch, target) the predicted seconds, the measured ones without evaluation (the
    prediction has none) and ``error`` = predicted / measured - 1."""
    p = predicted[predicted["devices"] == devices][["strategy", "batch", "target", "seconds"]]
    m = measured.assign(seconds=measured["seconds"] - measured["eval_seconds"])[["strategy", "batch", "target",
                                                                                  "seconds"]]
    out = p.merge(m, on=["strategy", "batch", "target"], suffixes=("_predicted", "_measured"))
    return out.assign(error=out["seconds_predicted"] / out["seconds_measured"] - 1)
