"""Checks of a command's options that need no torch, run by :func:`paper_repro.cli.main` (which
imports this module when a command runs, as it does the command's code) before the command's
code (and torch) loads: bad input is refused in a fraction of a second, with the
same one-line ValueError the command itself would raise after seconds of imports.

Each ``check_*`` takes the parsed ``argparse.Namespace``; what needs torch or the data (a
model's keyword arguments, a device's availability, whether a model takes its input) stays with
the command. Nothing here imports torch.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from . import notebooks
from .names import DATASETS, MODELS, SCHEDULE_ALIASES, SIMULATED_SCHEDULES, SWEEP_STUDIES, is_method

DEVICE = re.compile(r"cpu|mps|cuda(:\d+)?")


def check(args) -> None:
    """Run the checks of the command ``args`` were parsed for (none for a command without any)."""
    command = getattr(args, "command", None)
    sub = getattr(args, "bench_command", None) or getattr(args, "notebooks_command", None)
    fn = CHECKS.get(f"{command} {sub}" if sub else command)
    if fn is not None:
        fn(args)


# ------------------------------------------------------------------------------- pieces
def positive_int(key: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{key} must be a positive integer, got {value!r}")


def device(value: str, option: str = "device") -> None:
    """The syntax of a device name (whether this machine has it is the command's check)."""
    if not DEVICE.fullmatch(str(value)):
        raise ValueError(f"unknown {option} {value!r}; valid: cpu, cuda, cuda:N, mps")


def model(name: str) -> None:
    """A built-in model name, or one written package.module:function (imported by the command)."""
    if ":" in str(name):
        module, _, attr = str(name).partition(":")
        if not module or not attr or ":" in attr:
            raise ValueError(f"model {name!r}: a model factory is written package.module:function")
    elif name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid: {', '.join(MODELS)}, or your own as package.module:function")


def writable(path: str | None, option: str) -> None:
    """ValueError naming ``option`` and ``path`` when a file cannot be created there."""
    if not path:
        return
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


# ----------------------------------------------------------------------------- commands
def check_train(args) -> None:
    model(args.model)
    if args.method is not None and not is_method(args.method):
        raise ValueError(f"unknown method {args.method!r}; valid: backprop, greedy, overlapping, chunked-K (K a positive "
                         "integer, at most the number of blocks), chunked@A,B,... (the first blocks of chunks 2..K)")
    device(args.device)


def check_sweep(args) -> None:
    if (args.study is None) == (args.grid is None):
        raise ValueError("give exactly one of STUDY (choices: " + ", ".join(SWEEP_STUDIES) + ") or --grid FILE")
    if args.grid is not None:
        try:
            grid = json.loads(Path(args.grid).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"cannot read grid file {args.grid}: {e}") from None
        if not isinstance(grid, dict):
            raise ValueError(f"cannot read grid file {args.grid}: expected a JSON object, got {type(grid).__name__}")
    try:
        i, n = (int(part) for part in str(args.shard).split("/"))
    except ValueError:
        raise ValueError(f"shard must look like i/n (e.g. 0/4), got {args.shard!r}") from None
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"shard {args.shard!r}: need n >= 1 and 0 <= i < n (shards count from 0)")
    if args.workers < 0:
        raise ValueError(f"workers must be a non-negative integer, got {args.workers!r}")
    if args.threads is not None:
        positive_int("threads", args.threads)
    device(args.device)


def check_simulate(args) -> None:
    for name in ([args.schedule] if isinstance(args.schedule, str) else args.schedule):
        for s in (SIMULATED_SCHEDULES if name == "all" else [v.strip() for v in name.split(",") if v.strip()]):
            if s not in SIMULATED_SCHEDULES and SCHEDULE_ALIASES.get(s) not in SIMULATED_SCHEDULES:
                raise ValueError(f"unknown schedule {s!r}; valid: {', '.join(SIMULATED_SCHEDULES)}")
    model(args.model)
    if args.link is not None and not args.link[1] > 0:
        raise ValueError(f"link bandwidth must be > 0 bytes/s, got {args.link[1]!r}")
    if args.calibration and not Path(args.calibration).is_file():
        raise ValueError(f"calibration file {args.calibration!r} does not exist")
    for path, option in ((args.json, "--json"), (args.gantt, "--gantt"), (args.save_calibration, "--save-calibration")):
        writable(path, option)


def check_bench_pipeline(args) -> None:
    model(args.model)
    for key in ("stages", "micro_batches", "steps", "repeats", "dp"):
        positive_int(key, getattr(args, key))
    if args.warmup_steps < 0:
        raise ValueError(f"warmup_steps must be a non-negative integer, got {args.warmup_steps!r}")
    if args.dataset not in (*DATASETS, "synthetic"):
        raise ValueError(f"unknown dataset {args.dataset!r}; valid: {', '.join((*DATASETS, 'synthetic'))}")
    writable(args.json, "--json")


def check_bench_overhead(args) -> None:
    for key in ("batch_size", "steps", "repeats"):
        positive_int(key, getattr(args, key))
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be a positive integer, got {args.threads!r}")
    device(args.device)


def check_notebooks_run(args) -> None:
    for item in args.data_dir:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--data-dir expects DATASET=PATH (e.g. cifar10=/data/cifar10), got {item!r}")
    paths = notebooks.select_notebooks(notebooks.list_notebooks(args.notebooks_dir), args.only)
    if not paths:
        return
    parameters = {name: _json_or_text(value) for name, value in args.parameter}
    notebooks.check_parameter_names(paths, list(parameters))
    notebooks.check_parameter_values(paths, parameters)


def _json_or_text(text: str):
    """A ``-p NAME VALUE`` value as ``notebooks run`` reads it: JSON if it parses, else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


CHECKS = {"train": check_train, "sweep": check_sweep, "simulate": check_simulate, "bench pipeline": check_bench_pipeline,
          "bench overhead": check_bench_overhead, "notebooks run": check_notebooks_run}
