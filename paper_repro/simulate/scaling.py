"""Tables of the scaling study: memory per processor and throughput ratios, at paper scale.

* :func:`memory_table`: peak bytes of every stage under each schedule, for every number of
  processors and micro-batch size (meta device; nothing runs for real).
* :func:`ratio_table`: simulated samples/s of the local schedule over each pipelined-backprop
  schedule, for every number of processors and of micro-batches per step, from calibrated
  per-block costs.
* :func:`paper_setting`: those ratios in one setting, with each of several calibrations (how
  much the answer moves when the costs are measured again).
* :func:`models_and_costs`, :func:`load_costs`, :func:`memory_model`, :func:`one_step`,
  :func:`gpipe_bubble`: what the notebook needs besides: the two models' configs and per-block
  costs (cached or measured), the meta-device net, one step of chosen schedules, and the GPipe
  bubble the closed form predicts is simulated.

The notebook's sizes per profile are :func:`paper_repro.settings.scaling_settings`.
"""
from __future__ import annotations

import pandas as pd

from pathlib import Path

from .. import methods
from ..distributed.config import PipelineConfig
from ..settings.types import ScalingSettings
from .calibrate import BlockCosts, measure
from .costs import fresh_share, pieces, schedule_costs, uniform_costs
from .engine import Link, simulate
from .memory import MetaNet, stage_memory
from .schedules import stages_per_rank


def memory_table(meta: MetaNet, stages: list[int], micro_batch_sizes: list[int], schedules: list[str],
                 micro_batches: int = 16, optimizer: str = "adam", first_step_inference: bool = False) -> pd.DataFrame:
    """One row per (stages, micro-batch size, schedule, stage): the memory record of that stage;
    the net is cut as ``bench pipeline`` cuts it (chunked, as many blocks per piece as can be).
    ``first_step_inference``: add what torch.distributed.pipelining's first-step metadata
    inference keeps on stage 0 (off: the schedules' own needs, whatever the implementation)."""
    rows = []
    for S in stages:
        for schedule in schedules:
            k = stages_per_rank(schedule)
            if S * k > meta.blocks:
                raise ValueError(f"{meta.cfg.model} has {meta.blocks} blocks: schedule {schedule!r} cannot "
                                 f"run on {S} processors ({S * k} pieces)")
            cut = methods.module_blocks(f"chunked-{S * k}", meta.blocks)
            for B in micro_batch_sizes:
                for s, rec in enumerate(stage_memory(meta, schedule, S, B, max(micro_batches, S), cut, optimizer,
                                                               first_step_inference=first_step_inference)):
                    rows.append({"stages": S, "micro_batch": B, "schedule": schedule, "stage": s, **rec})
    return pd.DataFrame(rows)


def ratio_table(bc: BlockCosts, stages: list[int], micro_batches: list[int], baselines: list[str],
                micro_batch: int, local: str = "local", cut: str = "time", link: Link | None = None,
                steps: int = 2, warmup_steps: int = 1) -> pd.DataFrame:
    """One row per (stages, micro-batches per step, baseline): simulated samples/s of ``local``
    and of the baseline, and their ratio. Pieces are cut by calibrated time by default (the best
    cut each schedule could get). Combinations a schedule cannot run (too few blocks for the
    pieces, or torch refusing the micro-batch count) are left out."""
    bc = bc.scaled(micro_batch)
    rows = []
    for S in stages:
        for M in micro_batches:
            speed = {}
            for schedule in [local, *baselines]:
                count = S * stages_per_rank(schedule)
                if count > bc.blocks:
                    continue
                try:
                    costs = schedule_costs(bc, schedule, S, blocks=pieces(bc, count, cut),
                                           fresh=fresh_share(schedule, M))
                    speed[schedule] = simulate(schedule, costs, M, micro_batch, link=link, steps=steps,
                                               warmup_steps=warmup_steps).samples_per_s
                except ValueError:      # e.g. 1F1B with fewer micro-batches than stages
                    continue
            for schedule in baselines:
                if local in speed and schedule in speed:
                    rows.append({"stages": S, "micro_batches": M, "micro_batch": micro_batch, "baseline": schedule,
                                 "local_samples_per_s": speed[local], "baseline_samples_per_s": speed[schedule],
                                 "ratio": speed[local] / speed[schedule]})
    return pd.DataFrame(rows)


def paper_setting(calibrations: list[BlockCosts], stages: int, micro_batches: int, baselines: list[str],
                  micro_batch: int, cut: str = "blocks") -> pd.DataFrame:
    """:func:`ratio_table`'s rows for one setting, once per calibration (column ``calibration``:
    its index in ``calibrations``)."""
    if not calibrations:
        raise ValueError("paper_setting needs at least one calibration")
    return pd.concat([ratio_table(bc, [stages], [micro_batches], baselines, micro_batch, cut=cut)
                      .assign(calibration=i) for i, bc in enumerate(calibrations)], ignore_index=True)


def paper_setting_ratios(calibrations: list[BlockCosts], s: ScalingSettings) -> dict[str, list[float]]:
    """The paper's setting of the scaling settings ``s`` (``paper_stages``, ``paper_micro_batches``,
    ``paper_micro_batch``, ``baselines``), simulated once per calibration with ``bench pipeline``'s
    cut: baseline -> local's samples/s over the baseline's, one ratio per calibration."""
    t = paper_setting(calibrations, s.paper_stages, s.paper_micro_batches, s.baselines, s.paper_micro_batch)
    return t.groupby("baseline", sort=False).ratio.apply(list).to_dict()


def spread(ratios: dict[str, list[float]]) -> pd.DataFrame:
    """Median, min and max of each baseline's ratios (:func:`paper_setting_ratios`)."""
    return pd.DataFrame({b: pd.Series(v).agg(["median", "min", "max"]) for b, v in ratios.items()}).T


def models_and_costs(settings: ScalingSettings, calibration_dir) -> tuple[dict, dict]:
    """``({name: PipelineConfig}, {name: BlockCosts})`` of the study's models (``settings.models``:
    "resnet", "transformer"): the costs cached in ``calibration_dir`` when
    ``settings.calibrations`` names files, else measured on ``settings.device`` now."""
    configs = {name: PipelineConfig(**model.config_fields(), micro_batch=settings.micro_batch, device=settings.device)
               for name, model in settings.models.items()}
    if settings.calibrations:
        costs = {name: BlockCosts.load(Path(calibration_dir) / file) for name, file in settings.calibrations.items()}
    else:
        costs = {name: measure(cfg) for name, cfg in configs.items()}
    return configs, costs


def load_costs(calibration_dir, files: list[str], without_input: bool = False) -> list[BlockCosts]:
    """Cached per-block costs; ``without_input``: as if a data loader supplied the input."""
    costs = [BlockCosts.load(Path(calibration_dir) / file) for file in files]
    return [c.without_input() for c in costs] if without_input else costs


def memory_model(cfg: PipelineConfig) -> MetaNet:
    """The meta-device net whose bytes :func:`memory_table` counts."""
    return MetaNet(cfg)


def one_step(bc: BlockCosts, schedules: list[str], stages: int, micro_batches: int, micro_batch: int) -> list:
    """One simulated step of each schedule on a time-balanced cut (for the Gantt charts)."""
    return [simulate(s, schedule_costs(bc, s, stages, cut="time"), micro_batches, micro_batch)
            for s in schedules]


def gpipe_bubble(stages: int, micro_batches: int) -> float:
    """The idle share of GPipe on equal stages (forward 1, backward 2), as simulated; the
    closed form is ``(stages - 1) / (micro_batches + stages - 1)``."""
    return simulate("gpipe", uniform_costs("gpipe", stages, 1.0, 2.0), micro_batches).bubble_fraction
