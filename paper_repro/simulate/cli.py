"""``paper-repro simulate``: throughput, bubbles and memory of pipeline schedules at any scale.

    paper-repro simulate --model resnet34 --image-size 224 --num-classes 1000 --stages 4 \\
        --micro-batch 8 --micro-batches 16 --schedule all --json out.json --gantt gantt.png
    paper-repro simulate --stages 4 --micro-batches 8 --schedule 1f1b,gpipe --uniform-times 1,2
    paper-repro simulate --model resnet18 --model-kwargs '{"width": 16}' --stages 2 \\
        --micro-batch 8,16,32 --validate results/simulate/validation.md

Costs are calibrated per block on this machine (``--save-calibration`` keeps them,
``--calibration`` reuses them), or uniform (``--uniform-times F,B[,W]`` seconds per micro-batch
on every processor, communication free unless ``--link`` is given). ``--validate`` also runs
the real pipelines (``bench pipeline``) and writes both side by side.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import astuple
from pathlib import Path

from ..distributed import DEVICES, DTYPES, OPTIMIZERS, PipelineConfig
from . import api
from .costs import BALANCES
from .engine import Link
from .gantt import plot_gantt
from .linkcal import measure_link
from .schedules import SCHEDULES
from .validate import validate


def _floats(text: str, n_min: int, n_max: int, what: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: expected comma-separated numbers, got {text!r}") from None
    if not n_min <= len(values) <= n_max or any(not v >= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{what}: expected {n_min} to {n_max} non-negative numbers, got {text!r}")
    return values


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return values


def _json_dict(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r} ({err})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def add_cli(subparsers) -> argparse.ArgumentParser:
    d = PipelineConfig()
    p = subparsers.add_parser("simulate", help="simulate pipeline schedules: throughput, bubbles, memory",
                              description=__doc__.splitlines()[0])
    p.add_argument("--schedule", default="all", help=f"{' | '.join(SCHEDULES)}; a comma list or all")
    p.add_argument("--model", default=d.model, help="mlp | transformer | resnet18 | resnet34 | resnet50")
    p.add_argument("--model-kwargs", type=_json_dict, default={})
    p.add_argument("--image-size", type=int, default=d.image_size)
    p.add_argument("--num-classes", type=int, default=d.num_classes)
    p.add_argument("--seq-len", type=int, default=d.seq_len)
    p.add_argument("--stages", type=_ints, default=[d.stages], help="processors; a comma list runs each")
    p.add_argument("--micro-batch", type=_ints, default=[d.micro_batch], help="samples per micro-batch; a comma list")
    p.add_argument("--micro-batches", type=int, default=d.micro_batches, help="micro-batches per step")
    p.add_argument("--steps", type=int, default=d.steps, help="simulated timed steps")
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps, help="simulated steps before the timed ones")
    p.add_argument("--update-every", type=int, default=d.update_every, help="local: optimizer step every N micro-batches")
    p.add_argument("--max-in-flight", type=int, default=d.max_in_flight, help="local: unreceived sends per stage")
    p.add_argument("--optimizer", default=d.optimizer, choices=OPTIMIZERS)
    p.add_argument("--dtype", default=d.dtype, choices=sorted(DTYPES))
    p.add_argument("--device", default=d.device, choices=DEVICES, help="where to calibrate")
    p.add_argument("--threads", type=int, default=None, help="torch threads while calibrating (default cores / stages)")
    p.add_argument("--balance", default="blocks", choices=BALANCES,
                   help="cut: as many blocks per piece as chunked-K (like bench pipeline) or balanced calibrated time")
    p.add_argument("--uniform-times", type=lambda t: _floats(t, 2, 3, "--uniform-times"), default=None,
                   help="F,B[,W]: seconds per forward / whole backward (/ its weight half) of a micro-batch on every stage")
    p.add_argument("--link", type=lambda t: t if t == "auto" else _floats(t, 2, 2, "--link"), default=None,
                   help="LATENCY_S,BYTES_PER_S: each message takes latency + bytes / bandwidth; "
                        "auto: measure it between two local processes (gloo ping-pong)")
    p.add_argument("--calibration", default=None, help="read the per-block costs from this JSON instead of measuring")
    p.add_argument("--save-calibration", default=None, help="write the measured per-block costs here")
    p.add_argument("--calibrate-micro-batch", type=int, default=None,
                   help="measure at this micro-batch size and scale linearly (default: the first --micro-batch)")
    p.add_argument("--reps", type=int, default=3, help="calibration: best of this many runs per block")
    p.add_argument("--no-memory", action="store_true", help="skip the meta-device memory accounting")
    p.add_argument("--json", default=None, help="write the records here")
    p.add_argument("--gantt", default=None, help="draw one step of every simulated schedule here (PNG)")
    p.add_argument("--validate", default=None, metavar="PATH",
                   help="also run the real pipelines (bench pipeline) and write measured vs simulated here (.md + .csv)")
    p.add_argument("--repeats", type=int, default=1, help="--validate: real runs per configuration (medians)")
    p.add_argument("--validate-against", default=None, metavar="JSON",
                   help="--validate: take the real runs from this bench pipeline JSON instead of running them")
    p.set_defaults(func=_cmd)
    return p


def _cmd(args) -> int:
    schedules = api.parse_schedules(args.schedule)
    if args.link == "auto":
        args.link = astuple(measure_link())
        print(f"link measured between two local processes: latency {args.link[0] * 1e6:.1f} us, "
              f"bandwidth {args.link[1] / 1e9:.2f} GB/s")
    link = Link(*args.link) if args.link else None
    for path, option in ((args.json, "--json"), (args.gantt, "--gantt"), (args.save_calibration, "--save-calibration")):
        if path:
            _check_writable(path, option)
    if args.validate_against and not args.validate:
        raise ValueError("--validate-against needs --validate PATH (where the table goes)")
    if args.validate:
        return validate(args, schedules)
    records = []
    skipped = [] if args.schedule == "all" else None     # "all": leave out what cannot run, say so
    for S in args.stages:
        cfg = api.replace(PipelineConfig(), model=args.model, model_kwargs=args.model_kwargs, image_size=args.image_size,
                          num_classes=args.num_classes, seq_len=args.seq_len, stages=S,
                          micro_batch=args.calibrate_micro_batch or args.micro_batch[0],
                          micro_batches=args.micro_batches, steps=args.steps, warmup_steps=args.warmup_steps,
                          update_every=args.update_every, max_in_flight=args.max_in_flight,
                          optimizer=args.optimizer, dtype=args.dtype, device=args.device, threads=args.threads)
        bc = None
        if args.uniform_times is None:
            bc = api.calibration(cfg, args.calibration, reps=args.reps)
            if args.save_calibration:
                bc.save(args.save_calibration)
        records += api.run(cfg, schedules, args.micro_batch, block_costs=bc, uniform=args.uniform_times, link=link,
                           balance=args.balance, memory=not args.no_memory, keep=bool(args.gantt),
                           skipped=skipped)
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


def _check_writable(path: str, option: str) -> None:
    out = Path(path)
    if out.is_dir():
        raise ValueError(f"{option} {path!r} is a directory; give a file name")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        probe = out.with_name(out.name + ".tmp")
        probe.touch()
        probe.unlink()
    except OSError as err:
        raise ValueError(f"cannot write {option} {path!r}: {err.strerror or err}") from None
