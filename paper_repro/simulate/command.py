"""``paper-repro simulate`` (options: :func:`paper_repro.cli.add_simulate`): print the simulated
records as a table; optionally write them as JSON or draw a Gantt chart.

    paper-repro simulate --model resnet34 --image-size 224 --num-classes 1000 --stages 4 \\
        --micro-batch 8 --micro-batches 16 --schedule all --json out.json --gantt gantt.png
    paper-repro simulate --stages 4 --micro-batches 8 --schedule 1f1b,gpipe --uniform-times 1,2

This module imports matplotlib (for ``--gantt``), so :mod:`paper_repro.cli` names it in its
handler table and imports it only when ``simulate`` runs. Bad input raises ``ValueError``.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..commands import check_writable
from ..distributed.config import PipelineConfig
from ..plots.simulate import plot_gantt
from ..report_table import ordered
from . import api
from .engine import Link


def run_simulate_command(args) -> int:
    schedules = api.parse_schedules(args.schedule)
    link = Link(*args.link) if args.link else None
    for path, option in ((args.json, "--json"), (args.gantt, "--gantt"), (args.save_calibration, "--save-calibration")):
        if path:
            check_writable(path, option)
    records = []
    skipped = [] if args.schedule == "all" else None     # "all": leave out what cannot run, say so
    for S in args.stages:
        cfg = api.replace(PipelineConfig(), model=args.model, model_kwargs=args.model_kwargs, image_size=args.image_size,
                          num_classes=args.num_classes, seq_len=args.seq_len, channels=args.channels, stages=S,
                          micro_batch=args.calibrate_micro_batch or args.micro_batch[0],
                          micro_batches=args.micro_batches, steps=args.steps, warmup_steps=args.warmup_steps,
                          update_every=args.update_every, max_in_flight=args.max_in_flight,
                          optimizer=args.optimizer, dtype=args.dtype, device=args.device, threads=args.threads)
        bc = None
        if args.uniform_times is None:
            bc = api.calibration(cfg, args.calibration, reps=args.reps, input=args.input)
            if args.save_calibration:
                bc.save(args.save_calibration)
        records += api.run(cfg, schedules, args.micro_batch, block_costs=bc, uniform=args.uniform_times, link=link,
                           cut=args.cut, memory=not args.no_memory, keep=bool(args.gantt),
                           skipped=skipped, input=args.input)
    records = ordered(records)
    print(api.format_table(records))
    for line in skipped or []:
        print(f"not simulated: {line}")
    if args.gantt:
        fig = plot_gantt([r.pop("result") for r in records], title=f"{args.model}: one simulated step")
        fig.savefig(args.gantt, dpi=120, bbox_inches="tight")
        print(f"Gantt chart written to {args.gantt}")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))
        print(f"records written to {args.json}")
    return 0
