"""The configs a pipeline run's options expand to.

``expand`` turns one flat dict of settings into a config per (repeat, micro-batch size,
schedule); ``configs_from_args`` does it for the options parsed by :mod:`.arguments`, and
``configs_for`` for the pipeline settings of :mod:`paper_repro.settings`
(:class:`paper_repro.settings.types.PipelineSettings`) or a dict of the same keys.
"""
from __future__ import annotations

import dataclasses

from ..names import RUN_NAMES
from .config import PipelineConfig


def configs_from_args(args) -> list[PipelineConfig]:
    """One config per (repeat, micro-batch size, schedule[, update_every for local]), validated."""
    common = dict(model=args.model, model_kwargs=args.model_kwargs, method=args.method, stages=args.stages,
                  cut_at=args.cut_at, cut=args.cut, cut_at_blocks=args.cut_at_blocks, dp=args.dp, micro_batches=args.micro_batches, steps=args.steps,
                  warmup_steps=args.warmup_steps, dataset=args.dataset, data_dir=args.data_dir,
                  image_size=args.image_size, channels=args.channels, num_classes=args.num_classes,
                  seq_len=args.seq_len, input=getattr(args, "input", None), optimizer=args.optimizer, lr=args.lr, seed=args.seed,
                  dtype=args.dtype, device=args.device, threads=args.threads,
                  max_in_flight=args.max_in_flight, timeout=args.timeout,
                  heartbeat_timeout=args.heartbeat_timeout, init_timeout=args.init_timeout,
                  save_params=args.save_params, prefetch=args.prefetch)
    return expand(common, args.schedule, args.micro_batch, args.update_every, getattr(args, "repeats", 1))


def expand(common: dict, schedules, micro_batch_sizes, update_every=(1,), repeats: int = 1) -> list[PipelineConfig]:
    """Configs for every (repeat, micro-batch size, schedule) -- interleaved, so that a change in the
    machine's load touches every schedule alike -- with ``local`` once per ``update_every`` and
    ``local/M`` stepping once per step (``update_every = micro_batches``)."""
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
    bad = [s for s in schedules if s not in RUN_NAMES]
    if bad:
        raise ValueError(f"unknown schedule {bad[0]!r}; valid: {', '.join(RUN_NAMES)}")
    configs = []
    for _ in range(repeats):
        for b in micro_batch_sizes:
            for s in schedules:
                if s == "local/M":
                    everies, s = [common.get("micro_batches", PipelineConfig.micro_batches)], "local"
                else:
                    everies = update_every if s == "local" else (1,)
                configs += [PipelineConfig(schedule=s, micro_batch=b, update_every=u, **common).validate()
                            for u in everies]
    return configs


def settings_dict(settings) -> dict:
    """The keys and values of a settings dataclass of :mod:`paper_repro.settings.types` (or a
    copy of a dict of the same keys)."""
    return dataclasses.asdict(settings) if dataclasses.is_dataclass(settings) else dict(settings)


def configs_for(settings, schedules=None, **overrides) -> list[PipelineConfig]:
    """Configs for every micro-batch size in ``settings`` x schedule (see :func:`expand`).

    ``settings``: a :class:`~paper_repro.settings.types.PipelineSettings` (e.g.
    :func:`paper_repro.settings.pipeline_settings`) or a dict of its keys: ``micro_batch``
    (the list of sizes), optionally ``repeats``, ``schedules`` and ``local_update_every``,
    and fields of :class:`PipelineConfig`. ``overrides`` replace any of them. The run names are
    ``schedules`` if given, else the settings' ``schedules``, else every one (``RUN_NAMES``)."""
    fields = {**settings_dict(settings), **overrides}
    sizes = fields.pop("micro_batch")
    repeats = fields.pop("repeats", 1)
    chosen = fields.pop("schedules", None)
    update_every = fields.pop("local_update_every", (1,))
    return expand(fields, schedules or chosen or RUN_NAMES, sizes, update_every, repeats)
