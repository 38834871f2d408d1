"""What each ``paper-repro`` subcommand does, once :mod:`paper_repro.cli` has parsed its options.

Every ``run_*`` function takes the parsed ``argparse.Namespace`` and returns the exit status.
This module imports torch and the training code; :mod:`paper_repro.cli` loads it only when
a command runs, so ``paper-repro --help`` stays fast. Bad input raises ``ValueError`` (the
CLI prints it as one line, exit status 2). Ctrl-C and SIGTERM (see :mod:`paper_repro.signals`)
save what is finished and return 130 / 143.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pandas as pd
import torch

from . import checkpoint, datafiles, names, notebooks, overhead, preflight, race, settings, signals, studies, train
from .analysis import race as race_tables
from .precheck import writable as check_writable  # a ValueError naming the option when a file cannot be written
from .distributed.fields import TrainingFields
from .distributed.trainer import train_stages
from .distributed.config import PipelineConfig
from .distributed import bench
from .distributed.launch import PipelineError
from .distributed.options import configs_from_args
from .distributed.report import format_targets, median_records, targets, to_frame
from .names import MODELS
from .report_table import format_table
from .distributed.planning import write_json
from .sweep import (Grid, SweepInterrupted, cost_line, parse_shard, progress_line, remaining_line, run_sweep,
                    store_name)

# file extension -> (what it is, the modules of which at least one must be importable)
OUTPUT_FORMATS = {".csv": ("CSV", ()), ".json": ("JSON, a list of rows", ()),
                  ".parquet": ("Parquet", ("pyarrow", "fastparquet"))}


# ------------------------------------------------------------------------ output files
def check_output(path: str, option: str = "--out") -> None:
    """Fail now, not after hours of training, when ``path`` has an extension with no writer
    here (or whose library is not installed) or cannot be written."""
    out = Path(path)
    if out.is_dir():
        raise ValueError(f"{option} {path!r} is a directory; give a file name such as {str(out / 'records.csv')!r}")
    ext = out.suffix.lower()
    if ext not in OUTPUT_FORMATS:
        raise ValueError(f"{option} {path!r}: unknown output format {ext or '(no extension)'!r}; valid: "
                         + ", ".join(f"{e} ({what})" for e, (what, _) in OUTPUT_FORMATS.items()))
    what, needs = OUTPUT_FORMATS[ext]
    if needs and not any(importlib.util.find_spec(m) for m in needs):
        raise ValueError(f"{option} {path!r}: writing {what} needs {' or '.join(needs)}, and neither is "
                         f"installed (pip install {needs[0]}); or write .csv or .json")
    check_writable(path, option)


def write_table(frame: pd.DataFrame, path: str) -> Path:
    """Write ``frame`` in the format of ``path``'s extension (see :data:`OUTPUT_FORMATS`),
    atomically: to a temporary file next to it, then renamed, so a reader never sees half a file."""
    check_output(path)
    out = Path(path)
    tmp = out.with_name(out.name + ".tmp")
    ext = out.suffix.lower()
    if ext == ".csv":
        frame.to_csv(tmp, index=False)
    elif ext == ".json":
        frame.to_json(tmp, orient="records", indent=1)
    else:
        frame.to_parquet(tmp, index=False)
    tmp.replace(out)
    return out


# ---------------------------------------------------------------------------------- train
def _records_table(result: train.TrainResult) -> pd.DataFrame:
    cfg = result.config
    return result.records.assign(method=cfg.method, model=cfg.model, dataset=cfg.dataset, status=result.status)


def _print_summary(summary: dict) -> None:
    width = max(map(len, summary))
    for key, value in summary.items():
        print(f"{key:<{width}}  {value:.4f}" if isinstance(value, float) else f"{key:<{width}}  {value}")


def run_train(args) -> int:
    if args.out:
        check_output(args.out)
    if args.save:
        check_writable(args.save, "--save")
    if args.resume and not args.checkpoint:
        raise ValueError("--resume needs --checkpoint DIR (the folder the interrupted run saved its state in)")
    if args.stages > 1 or args.dp > 1:
        return run_train_stages(args)
    if args.schedule != "local" or args.checkpoint_every:
        what = f"--schedule {args.schedule}" if args.schedule != "local" else "--checkpoint-every"
        raise ValueError(f"{what} applies to several processes; add --stages S (S >= 2)")
    cfg = train.TrainConfig(model=args.model, method=args.method or "backprop", dataset=args.dataset,
                            data_dir=args.data_dir, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                            optimizer=args.optimizer, seed=args.seed, eval_every=args.eval_every,
                            eval_every_examples=args.eval_every_examples,
                            train_eval_examples=args.train_eval_examples, stop_loss=args.stop_loss,
                            micro_batches=args.micro_batches or 1, threads=args.threads, device=args.device,
                            model_kwargs=args.model_kwargs, data_kwargs=args.data_kwargs,
                            progress=not args.no_progress)
    cfg.validate()
    if args.download:
        datafiles.locate(cfg.dataset, cfg.data_dir, download=True)
    data = train.load_data(cfg)
    train.check_batch_fits(cfg.batch_size, data, "--batch-size")
    state = Path(args.checkpoint) / "train.pt" if args.checkpoint else None
    if state is not None and not args.resume:
        state.unlink(missing_ok=True)           # a fresh run: an old state there is not resumed
    elif state is not None and not state.is_file():
        raise ValueError(f"--resume: no checkpoint in {args.checkpoint} (no {state.name}); start without --resume")
    try:
        result = train.train(cfg, data=data, checkpoint=state)
    except train.TrainInterrupted as stop:
        done = len(stop.result.records)
        what = f"{signals.describe(stop)} after {done} of {cfg.steps} steps"
        if args.out and done:
            out = write_table(_records_table(stop.result), args.out)
            print(f"{what}: the records of the {done} finished steps are written to {out}", file=sys.stderr)
        elif args.out:
            print(f"{what}: no step finished, nothing written to {args.out}", file=sys.stderr)
        else:
            print(f"{what}: no --out given, the records are not saved", file=sys.stderr)
        return signals.exit_status(stop)
    _print_summary(result.summary())
    if args.out:
        print(f"records written to {write_table(_records_table(result), args.out)}")
    if args.save:
        path = checkpoint.save_learner(args.save, result.learner, model=cfg.model, model_kwargs=cfg.model_kwargs,
                                       dataset=cfg.dataset, seed=cfg.seed)
        print(f"trained learner written to {path}")
    return 0


def stages_config(args) -> PipelineConfig:
    """The pipeline config of ``paper-repro train --stages S``: ``--batch-size`` examples a step
    over all processes, in ``--micro-batches`` micro-batches (per replica with ``--dp``)."""
    M = args.micro_batches or PipelineConfig.micro_batches
    per_micro = M * args.dp
    if args.batch_size % per_micro:
        raise ValueError(f"--batch-size {args.batch_size} must be a multiple of --micro-batches {M} x --dp {args.dp}"
                         f" = {per_micro} (each micro-batch holds batch-size / {per_micro} examples)")
    schedule, every = ("local", M) if args.schedule == "local/M" else (args.schedule, 1)
    return PipelineConfig(model=args.model, model_kwargs=args.model_kwargs, method=args.method, stages=args.stages,
                          schedule=schedule, update_every=every, cut_at=args.cut_at, cut=args.cut,
                          cut_at_blocks=args.cut_at_blocks, dp=args.dp, micro_batch=args.batch_size // per_micro,
                          micro_batches=M, steps=args.steps, warmup_steps=0, dataset=args.dataset,
                          data_dir=args.data_dir, data_kwargs=args.data_kwargs, optimizer=args.optimizer,
                          lr=args.lr, seed=args.seed, device=args.device, threads=args.threads,
                          timeout=args.timeout).validate()


def run_train_stages(args) -> int:
    """``paper-repro train --stages S``: train on S processes of this machine."""
    cfg = stages_config(args)
    training = TrainingFields(eval_every=args.eval_every, eval_examples=args.eval_examples,
                              eval_every_examples=args.eval_every_examples,
                              train_eval_examples=args.train_eval_examples, stop_loss=args.stop_loss,
                              checkpoint=args.checkpoint, checkpoint_every=args.checkpoint_every,
                              resume=args.resume, save=args.save)
    if args.download:
        datafiles.locate(cfg.dataset, cfg.data_dir, download=True)
    try:
        result = train_stages(cfg, training, progress=not args.no_progress, timeout=args.launch_timeout)
    except PipelineError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as stop:             # every stage has stopped after a common step
        partial = getattr(stop, "result", None)
        done = len(partial.records) if partial is not None else 0
        what = f"{signals.describe(stop)} after {done} updates"
        kept = f"; the checkpoint in {args.checkpoint} resumes it (--resume)" if args.checkpoint and done else ""
        if args.out and done:
            out = write_table(_stages_table(partial), args.out)
            print(f"{what}: the records are written to {out}{kept}", file=sys.stderr)
        else:
            print(f"{what}: {'no --out given, the records are not saved' if done else 'nothing saved'}{kept}",
                  file=sys.stderr)
        return signals.exit_status(stop)
    _print_summary(result.summary())
    if args.out:
        print(f"records written to {write_table(_stages_table(result), args.out)}")
    if args.save:
        print(f"trained learner written to {args.save}")
    return 0


def _stages_table(result) -> pd.DataFrame:
    summary = result.summary()
    return result.records.assign(method=summary["method"], schedule=summary["schedule"],
                                 processes=summary["processes"], model=result.config.model,
                                 dataset=result.config.dataset, status=result.status)


# ---------------------------------------------------------------------------------- sweep
def run_sweep_command(args) -> int:
    if (args.study is None) == (args.grid is None):
        raise ValueError("give exactly one of STUDY (choices: " + ", ".join(names.SWEEP_STUDIES)
                         + ") or --grid FILE")
    reuse = []
    if args.grid is not None:
        try:
            grid = Grid.from_dict(json.loads(Path(args.grid).read_text()))
        except (OSError, json.JSONDecodeError, TypeError) as e:
            raise ValueError(f"cannot read grid file {args.grid}: {e}") from None
        grids = [grid]
    elif args.study in names.DEPTH_SERIES:  # one grid per depth, swept one after the other
        grids = list(settings.module_grids(args.profile, args.study).values())
        reuse = [Path(args.results) / store_name(g, args.data_dir)
                 for g in settings.module_sources(args.profile, args.study)]
    else:
        grids = [settings.compute_grid(args.study, args.profile)]
    if args.download:  # here, once, before any worker starts
        datafiles.locate(grids[0].dataset, args.data_dir, download=True)
    failed = 0
    for grid in grids:
        store = Path(args.results) / store_name(grid, args.data_dir)
        left = remaining_line(grid, store, max(1, args.workers), like=reuse)
        print(f"{cost_line(grid)}\n  {progress_line(grid, store, reuse)}" + (f"\n  {left}" if left else ""),
              file=sys.stdout if args.status else sys.stderr, flush=True)
        if args.status:
            continue
        try:
            report = run_sweep(grid, store, workers=args.workers, shard=parse_shard(args.shard), device=args.device,
                               data_dir=args.data_dir, progress=not args.no_progress, threads=args.threads,
                               reuse=reuse)
        except SweepInterrupted as stop:
            print(f"{signals.describe(stop)}: {stop}", file=sys.stderr)
            return signals.exit_status(stop)
        print(report)
        failed += len(report.failed)
    if args.status and args.study is not None:
        print("learning rates:\n" + "\n".join("  " + line for line in studies.lr_edge_report(
            args.study, args.profile, results_dir=args.results, data_dir=args.data_dir)))
    return 1 if failed else 0


# ---------------------------------------------------------------------------------- bench
def run_overhead(args) -> int:
    if not isinstance(args.model_kwargs, dict):
        raise ValueError(f"--model-kwargs must be a JSON object, got {args.model_kwargs!r}")
    train.check_device(args.device)
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be a positive integer, got {args.threads!r}")
        torch.set_num_threads(args.threads)
    try:
        r = overhead.overhead(args.model, args.model_kwargs, args.batch_size, args.steps, args.repeats,
                           device=args.device, progress=not getattr(args, "no_progress", False))
    except overhead.BenchInterrupted as stop:
        if stop.partial is not None:
            print(overhead.format_overhead(stop.partial))
        print(f"{signals.describe(stop)}: {stop}" + ("; the numbers above are from those" if stop.partial else
                                                    "; nothing measured yet"), file=sys.stderr)
        return signals.exit_status(stop)
    except KeyboardInterrupt as stop:  # while building the model or warming up
        print(f"{signals.describe(stop)} before timing started: nothing measured", file=sys.stderr)
        return signals.exit_status(stop)
    print(overhead.format_overhead(r))
    if args.max_ratio is not None and r["ratio"] > args.max_ratio:
        print(f"ratio {r['ratio']:.3f} is above --max-ratio {args.max_ratio}")
        return 1
    return 0


def _save_pipeline_records(records: list[dict], path: str) -> Path:
    write_json(records, path)
    csv = Path(path).with_suffix(".csv")
    to_frame(records).to_csv(csv, index=False)
    return csv


def run_pipeline_command(args) -> int:
    configs = configs_from_args(args)
    if args.comm_only:
        records = bench.comm_only(configs)
    else:
        try:
            records = bench.run_pipeline(configs, timeout=args.launch_timeout,
                                                  progress=not args.no_progress, keep_logs=True)
        except PipelineError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        except KeyboardInterrupt as stop:  # the launcher has stopped every stage process
            finished = getattr(stop, "partial_records", None) or []
            if not finished:
                print(f"{signals.describe(stop)}: every stage process is stopped; no run had finished, so "
                      "nothing is saved", file=sys.stderr)
                return signals.exit_status(stop)
            print(format_table(finished))
            where = "printed above"
            if args.json:
                csv = _save_pipeline_records(finished, args.json)
                where = f"saved in {args.json} and {csv}"
            print(f"{signals.describe(stop)}: every stage process is stopped; the {len(finished)} of "
                  f"{len(configs)} runs that had finished are {where}", file=sys.stderr)
            return signals.exit_status(stop)
    if args.repeats > 1 and not args.comm_only:
        records = median_records(records)
    print(format_table(records))
    # the project's own targets are about its built-in models; for any other model the table's
    # ratio columns say how the schedules compare
    if (len({r["schedule"] for r in records}) > 1 and not args.comm_only
            and (args.model in MODELS or getattr(args, "targets", False))):
        print()
        print(format_targets(targets(records)))
    if args.json:
        csv = _save_pipeline_records(records, args.json)
        print(f"results written to {args.json} and {csv} (one row per run and stage)")
    return 0


# ----------------------------------------------------------------------------------- race
def run_race_command(args) -> int:
    race_settings = settings.race_settings(args.profile)
    store = race.run_race(race_settings, args.results, data_dir=args.data_dir, threads=args.threads,
                          progress=not args.no_progress)
    ttt = race_tables.time_to_target(race_tables.load_race(store), race_settings.targets)
    table = race_tables.race_table(ttt)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(table[["target", "batch", "strategy", "update_batch", "seconds", "seconds_min", "seconds_max",
                     "reached", "samples_per_s", "reference", "speedup"]].round(3).to_string(index=False))
        print()
        print(race_tables.fastest_table(table, ttt).round(3).to_string(index=False))
    print(f"runs in {store}")
    return 0


# ------------------------------------------------------------------------------ notebooks
def _print_notebook_summary(results) -> None:
    for name, seconds, status in results:
        print(f"{name:<40} {seconds:8.1f} s  {status}")


def parse_data_dirs(items: list[str]) -> dict:
    """``["cifar10=/data/c10", ...]`` -> ``{"cifar10": "/data/c10"}``; a clear error otherwise."""
    dirs = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--data-dir expects DATASET=PATH (e.g. cifar10=/data/cifar10), got {item!r}")
        dirs[name] = path
    return dirs


def parse_value(text: str):
    """A ``-p NAME VALUE`` value: JSON if it parses (numbers, true/false, null, lists), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def run_notebooks_command(args) -> int:
    dirs = parse_data_dirs(args.data_dir)
    paths = notebooks.select_notebooks(notebooks.list_notebooks(args.notebooks_dir), args.only)
    chosen = [p.stem for p in paths]  # the checks and the plan cover these notebooks only
    parameters = {name: parse_value(value) for name, value in args.parameter}
    study = parameters.get("study") if isinstance(parameters.get("study"), str) else None
    sources = preflight.data_sources(args.profile, dirs, chosen, study)  # checks the data set names
    if paths:
        notebooks.check_parameter_names(paths, list(parameters))
    device = args.device or ("cuda" if args.profile == "full" else None)
    if device is not None:
        parameters["device"] = device
    if args.workers is not None:
        parameters["workers"] = args.workers
    if args.download:
        for name, path in dirs.items():
            datafiles.locate(name, path, download=True)
    on_cpu = device is not None and device.startswith("cpu")
    if args.profile == "full" and on_cpu:
        parameters["allow_cpu"] = True  # asked for explicitly: the notebooks may train on the CPU
    # reading stores only (-p train_missing false, e.g. after a cluster sweep) needs no GPU and no data
    reads_only = parameters.get("train_missing") is False
    if (args.profile == "full" and not reads_only) or args.dry_run:
        report = preflight.check(args.profile, dirs, notebooks.REPO_ROOT / "results", min_devices=0 if on_cpu else 1,
                                 sustained_flops=args.tflops * 1e12, notebooks=chosen, study=study)
        print(preflight.format_plan(report.plan))
        for problem in report.problems:
            print(f"problem: {problem}", file=sys.stderr)
        if not report.ok and not args.dry_run:
            print("error: the checks above failed; nothing was run (--device cpu runs the full profile on the "
                  "CPU on purpose)", file=sys.stderr)
            return 2
        if args.dry_run:
            return 0 if report.ok else 1
    per_notebook = {nb: {"data_dir": path} for nb, (_, path) in sources.items() if path is not None}
    try:
        results = notebooks.run_notebooks(profile=args.profile, only=args.only, out_dir=args.out,
                                          figures_dir=args.figures, timeout=args.timeout,
                                          notebooks_dir=args.notebooks_dir, parameters=parameters,
                                          per_notebook=per_notebook, progress=not args.no_progress)
    except notebooks.NotebooksInterrupted as stop:
        _print_notebook_summary(stop.results)
        print(f"{signals.describe(stop)}: {stop}", file=sys.stderr)
        return signals.exit_status(stop)
    except RuntimeError as e:
        _print_notebook_summary(getattr(e, "results", []))
        print(f"error: {e}", file=sys.stderr)
        return 1
    _print_notebook_summary(results)
    return 0
