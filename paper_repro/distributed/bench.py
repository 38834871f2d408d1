"""The pipeline benchmark behind ``paper-repro bench pipeline``: throughput, busy time,
communication and memory per stage.

    paper-repro bench pipeline --model resnet34 --image-size 224 --stages 4 --micro-batch 8 \\
        --micro-batches 16 --schedule local --json out.json
    paper-repro bench pipeline --model resnet34 --image-size 224 --stages 4 --comm-only --schedule all

Training runs start ``--stages`` local processes through :func:`.launch.launch` (use
``torchrun -m paper_repro.distributed.run`` for several GPUs or nodes); ``--comm-only`` computes
the bytes from the boundary tensors' shapes and dtypes in this process without training, for
models too large for the machine at hand.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import multiprocessing

from .launch import check_gpus, launch
from .planning import prepare, timed_update_every
from ..names import MULTI_STAGE
from .config import PipelineConfig
from .inputs import label_info
from .options import configs_for, settings_dict
from .report import named
from ..report_table import ordered
from .cut import boundary_records, stage_boundaries
from .timing import predicted_comm


def run_pipeline(configs: PipelineConfig | list[PipelineConfig], *, timeout: float | None = None,
                 progress: bool = True, **launch_kwargs) -> list[dict]:
    """Train each config in ``stages`` local processes (one launch for all); one record each.

    The stage plan of every config is made here first, so bad settings (e.g. overlapping
    windows across stages) raise ValueError before any process starts, and a measured
    (time-balanced) cut is measured once, in this process, and handed to every process as an
    explicit ``method`` / ``cut_at`` / ``cut_at_blocks`` (the record's ``cut`` still says how
    it was found). A local pipeline stepping once per step is recorded as ``local/M``
    (:func:`.report.named`). The records come in the order of ``configs`` (one each); the
    printed table orders its rows itself (:func:`paper_repro.report_table.ordered`)."""
    configs = [configs] if isinstance(configs, PipelineConfig) else list(configs)
    if any(c.device == "cuda" for c in configs):    # before a measured cut touches the device
        check_gpus(max(c.validate().processes for c in configs if c.device == "cuda"))
    cuts: dict[tuple, tuple] = {}
    resolved = []
    for cfg in configs:
        cfg.validate()
        multi = cfg.schedule in MULTI_STAGE
        key = (cfg.model, str(cfg.model_kwargs), cfg.method, cfg.stages, cfg.dp, str(cfg.cut_at), cfg.cut,
               cfg.dtype, cfg.image_size, cfg.dataset, cfg.micro_batch, timed_update_every(cfg), cfg.optimizer,
               str(cfg.cut_at_blocks), multi and cfg.micro_batches, multi)
        if key not in cuts:
            cuts[key] = measured_cut(cfg)
        # measured cuts are fixed here, once, so that every process and every repeat uses the same one
        method, cut_at, blocks = cuts[key]
        resolved.append(dataclasses.replace(cfg, method=method, cut_at=cut_at, cut_at_blocks=blocks))
    try:
        return named(launch(resolved, timeout=timeout, progress=progress, **launch_kwargs))
    except KeyboardInterrupt as stop:      # Ctrl-C / SIGTERM: the runs that had finished, named alike
        named(getattr(stop, "partial_records", None) or [])
        raise


def _cut(cfg: PipelineConfig) -> tuple:
    plan = prepare(cfg)
    return plan.config.method, plan.cut_at, plan.cut_at_blocks


def measured_cut(cfg: PipelineConfig, apart: bool | None = None) -> tuple:
    """``(method, cut_at, cut_at_blocks)`` of ``cfg``'s stage plan, its cut measured on ``cfg``'s
    device. A GPU's cut is measured ``apart``, in a short-lived process: the launcher itself
    then holds no CUDA context, whose memory (and, where a GPU admits one process, the GPU
    itself) the first stage needs."""
    if not (cfg.device == "cuda" and cfg.cut == "time" if apart is None else apart):
        return _cut(cfg)
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        try:
            return pool.submit(_cut, cfg).result()
        except concurrent.futures.process.BrokenProcessPool as err:
            raise RuntimeError(f"the process measuring the stage cut of model {cfg.model!r} on {cfg.device} "
                               f"died before answering ({err})") from None


def comm_by_size(settings, processors=None, schedules=None) -> list[dict]:
    """:func:`comm_only` records for every number of ``processors`` x micro-batch size in
    ``settings`` x schedule. ``settings``: a
    :class:`~paper_repro.settings.types.CommunicationSettings` (its ``processors`` and
    ``schedules`` unless given here) or a dict of PipelineConfig fields with a ``micro_batch``
    list (schedules: local and 1f1b unless given)."""
    fields = settings_dict(settings)
    own_processors = fields.pop("processors", None)
    schedules = tuple(schedules or fields.get("schedules") or ("local", "1f1b"))
    records = []
    for p in own_processors if processors is None else processors:
        records += comm_only(configs_for(dict(fields, stages=p), schedules=schedules))
    return records


def comm_only(configs: PipelineConfig | list[PipelineConfig]) -> list[dict]:
    """Bytes crossing the stage boundaries per sample, per micro-batch and per step, from the
    boundary tensors' shapes and dtypes (no processes, no training); records named and ordered
    as :func:`run_pipeline`'s."""
    configs = [configs] if isinstance(configs, PipelineConfig) else list(configs)
    records = []
    cache = {}
    for cfg in configs:
        cfg.validate()
        key = (cfg.model, str(cfg.model_kwargs), cfg.local_method, cfg.stages, str(cfg.cut_at), cfg.dtype,
               cfg.image_size, cfg.schedule in MULTI_STAGE)
        if key not in cache:  # no training here, so no timing: the cut balances FLOPs
            probe = dataclasses.replace(cfg, cut="flops", method=cfg.local_method)
            planned = prepare(probe)
            spec, learner, infos, plan = planned.spec, planned.learner, planned.infos, planned.stages
            grad_bytes = sum(p.numel() * p.element_size() for p in learner.net.parameters())
            cache[key] = (spec, infos, plan, grad_bytes, planned.cut_at_blocks)
        spec, infos, plan, grad_bytes, cut_at_blocks = cache[key]
        cfg = dataclasses.replace(cfg, cut_at_blocks=cut_at_blocks)
        pred = predicted_comm(cfg, plan, infos, spec, grad_bytes)
        B, M = cfg.micro_batch, cfg.micro_batches
        lshape, ldtype = label_info(spec)
        records.append({
            "schedule": "local/M" if cfg.schedule == "local" and cfg.update_every == M > 1 else cfg.schedule,
            "comm_only": True, "update_every": cfg.update_every if cfg.schedule == "local" else None,
            "method": cfg.local_method if cfg.schedule == "local" else "backprop",
            "model": cfg.model, "model_kwargs": cfg.model_kwargs, "image_size": cfg.image_size,
            "stages": cfg.stages, "micro_batch": B, "micro_batches": M, "dtype": cfg.dtype,
            "samples_per_s": None, "busy_fraction_per_stage": None, "peak_mem_bytes_per_stage": None,
            "comm_bytes_per_sample": {"forward": pred["forward"], "backward": pred["backward"]},
            "comm_bytes_detail_per_sample": {k: v for k, v in pred.items() if k != "per_boundary"},
            "comm_bytes_per_micro_batch": {"forward": pred["forward"] * B, "backward": pred["backward"] * B},
            "comm_bytes_per_step": {"forward": pred["forward"] * B * M, "backward": pred["backward"] * B * M},
            "comm_bytes_predicted_per_boundary": pred["per_boundary"],
            "stage_plan": plan.to_dict(), "cut": "flops",     # how a cut not given by --cut-at is found here
            "boundaries": boundary_records(plan, infos, B, stage_boundaries(cfg, plan, len(infos))),
            "cut_at_blocks": cut_at_blocks,
            "labels": {"shape": [B, *lshape], "dtype": str(ldtype).replace("torch.", "")},
            "param_bytes": grad_bytes,
        })
    return ordered(records)
