"""One call from settings to simulated records: what ``paper-repro simulate`` and the notebook use.

A record has the keys of ``bench pipeline``'s records that a simulation can fill, under the same
names (``schedule``, ``stages``, ``micro_batch``, ``micro_batches``, ``samples_per_s``,
``busy_fraction_per_stage``, ``peak_mem_bytes_per_stage``, ``memory_per_stage``,
``comm_bytes_per_sample``, the cut rule ``cut`` and the cut it gives, ``stage_plan``:
``{"blocks": [...]}``, one list per piece) plus ``makespan_s``, ``bubble_fraction`` and where the costs came from (``costs``:
``calibrated`` with the calibration's hardware, or ``uniform``). ``busy_per_stage`` repeats
``busy_fraction_per_stage`` under its former name for one release. Records come in the row order
of every tool's table (:func:`paper_repro.report_table.ordered`).
"""
from __future__ import annotations

import dataclasses

from ..distributed.config import PipelineConfig
from ..names import DEFAULT_CUT, former_cut
from ..report_table import format_table as _format_table
from ..report_table import ordered
from .calibrate import BlockCosts, measure
from .costs import fresh_share, pieces, schedule_costs, uniform_costs
from .engine import Link, Result, simulate
from .memory import MetaNet, stage_memory
from .schedules import SCHEDULES, base_schedule, check_schedule, stages_per_rank


def parse_schedules(text: str | list[str]) -> list[str]:
    """``"all"``, a comma list or a list of schedule names -> validated list."""
    values = list(SCHEDULES) if text == "all" else (text.split(",") if isinstance(text, str) else list(text))
    values = [v.strip() for v in values if v.strip()]
    if not values:
        raise ValueError(f"no schedule given; valid: {', '.join(SCHEDULES)}, a comma list of them, or all")
    return [check_schedule(v) for v in values]


def calibration(cfg: PipelineConfig, path: str | None = None, reps: int = 3, input: str | None = None) -> BlockCosts:
    """Per-block costs of ``cfg``'s model: loaded from ``path`` (checked against ``cfg``) or measured
    on synthetic inputs of kind ``input`` (:func:`.inputs.input_spec`)."""
    if path is None:
        return measure(cfg, reps=reps, input=input)
    bc = BlockCosts.load(path)
    if bc.model != cfg.model or bc.model_kwargs != cfg.model_kwargs or bc.image_size != cfg.image_size:
        raise ValueError(f"calibration {path!r} is for model {bc.model} {bc.model_kwargs} at image size "
                         f"{bc.image_size}, not {cfg.model} {cfg.model_kwargs} at {cfg.image_size}")
    return bc


def run(cfg: PipelineConfig, schedules: list[str], micro_batch_sizes: list[int], *,
        block_costs: BlockCosts | None = None, uniform: tuple[float, ...] | None = None,
        link: Link | None = None, cut: str = DEFAULT_CUT, memory: bool = True, keep: bool = False,
        meta: MetaNet | None = None, skipped: list[str] | None = None, input: str | None = None,
        balance: str | None = None) -> list[dict]:
    """Simulate every (micro-batch size, schedule) on ``cfg.stages`` processors.

    Costs come from ``block_costs`` (scaled to each micro-batch size) or ``uniform`` = (F, B[, W])
    seconds per micro-batch on every processor. ``memory``: add the meta-device memory of every
    stage (model settings of ``cfg``; not with uniform costs). ``keep``: add the simulation
    ``Result`` (with its intervals, for Gantt charts) under ``"result"``. ``skipped``: a list to
    collect the schedules that cannot run these settings (e.g. torch refuses too few
    micro-batches, or the net has too few blocks for the pieces) instead of raising. ``input``:
    the kind of synthetic input the memory accounting feeds the model (:func:`.inputs.input_spec`).
    ``cut``: how the pieces are cut (one of ``CUTS``; ``balance``: its former name, for one release)."""
    cut = former_cut(cut, balance, "run")
    if (block_costs is None) == (uniform is None):
        raise ValueError("give exactly one of block_costs (calibrated) or uniform times (F,B[,W])")
    records = []
    S, M = cfg.stages, cfg.micro_batches
    if block_costs is not None and S > block_costs.blocks:
        raise ValueError(f"model {cfg.model} has {block_costs.blocks} blocks and cannot be cut into {S} stages "
                         f"(a stage holds one block at least); use at most {block_costs.blocks} stages")
    if memory and uniform is None and meta is None:
        meta = MetaNet(cfg, input)
    for B in micro_batch_sizes:
        bc = block_costs.scaled(B) if block_costs is not None else None
        for schedule in schedules:
            try:
                if bc is not None:
                    blocks = pieces(bc, S * stages_per_rank(schedule), cut)
                    costs = schedule_costs(bc, schedule, S, blocks=blocks,
                                           fresh=fresh_share(schedule, M, cfg.update_every))
                else:
                    blocks = None
                    costs = uniform_costs(schedule, S, *uniform)
                result = simulate(schedule, costs, M, B, link=link, steps=cfg.steps,
                                  warmup_steps=cfg.warmup_steps, update_every=cfg.update_every,
                                  max_in_flight=cfg.max_in_flight)
            except ValueError as err:
                if skipped is None:
                    raise
                skipped.append(f"{schedule} (stages={S}, micro_batch={B}): {err}")
                continue
            record = _record(cfg, result, bc)
            if blocks is not None:
                record["comm_bytes_per_sample"] = comm_per_sample(bc, schedule, S, blocks)
                record["cut"] = cut
                record["stage_plan"] = {"blocks": blocks}
            if blocks is not None and memory:
                mem = stage_memory(meta, schedule, S, B, M, blocks, cfg.optimizer, cfg.max_in_flight)
                record["memory_per_stage"] = mem
                record["peak_mem_bytes_per_stage"] = [m["peak_bytes"] for m in mem]
            if keep:
                record["result"] = result
            records.append(record)
    return ordered(records)


def _record(cfg: PipelineConfig, result: Result, bc: BlockCosts | None) -> dict:
    record = {**result.to_dict(), "model": cfg.model, "model_kwargs": cfg.model_kwargs,
              "image_size": cfg.image_size, "steps": cfg.steps, "warmup_steps": cfg.warmup_steps,
              "peak_mem_bytes_per_stage": None, "memory_per_stage": None}
    if bc is None:
        record["costs"] = "uniform"
    else:
        record["costs"] = "calibrated"
        record["calibration"] = {"hardware": bc.hardware, "device": bc.device, "threads": bc.threads,
                                 "measured_at_micro_batch": bc.micro_batch}
    return record


def comm_per_sample(bc: BlockCosts, schedule: str, stages: int, cut: list[list[int]]) -> dict:
    """Bytes per sample crossing from one processor to another under ``schedule`` (``bc`` at
    the simulated micro-batch size): the local schedules send each boundary's activations and
    the labels forward; pipelined backprop sends the activations forward and their gradients
    back, and the labels once to the last stage (not for V schedules, whose first and last
    stages share processor 0)."""
    base, _ = base_schedule(schedule)
    k = stages_per_rank(schedule)
    if k == 1:
        rank = list(range(stages))
    elif base.startswith("interleaved"):
        rank = [v % stages for v in range(stages * k)]
    else:
        rank = [v if v < stages else 2 * stages - 1 - v for v in range(stages * k)]
    acts = [bc.out_bytes[cut[v][-1]] for v in range(len(cut) - 1) if rank[v] != rank[v + 1]]
    B = bc.micro_batch
    if base.startswith("local"):
        return {"forward": (sum(acts) + len(acts) * bc.label_bytes) / B, "backward": 0.0}
    labels = 0 if base in ("zbv", "dualpipev") else bc.label_bytes
    return {"forward": (sum(acts) + labels) / B, "backward": sum(acts) / B}


def format_table(records: list[dict]) -> str:
    """The records as the result table of every tool (:func:`paper_repro.report_table.format_table`)."""
    return _format_table(records)


def ratios(records: list[dict], reference: str = "1f1b") -> list[dict]:
    """samples/s of every schedule / the ``reference`` schedule's, per (stages, micro-batch size)."""
    ref = {(r["stages"], r["micro_batch"]): r["samples_per_s"] for r in records if r["schedule"] == reference}
    return [{"schedule": r["schedule"], "stages": r["stages"], "micro_batch": r["micro_batch"],
             "ratio": r["samples_per_s"] / ref[(r["stages"], r["micro_batch"])]}
            for r in records if (r["stages"], r["micro_batch"]) in ref]


def replace(cfg: PipelineConfig, **changes) -> PipelineConfig:
    """``cfg`` with ``changes``, validated (so bad values fail here with their name)."""
    return dataclasses.replace(cfg, **changes).validate()

