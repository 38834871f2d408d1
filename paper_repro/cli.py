"""paper-repro: train, sweep, benchmark and run the notebooks of the local-updates reproduction.

    paper-repro train      one model x method x data set in one process
    paper-repro sweep      a resumable grid of runs (a study of paper_repro.settings, or a grid.json)
    paper-repro bench      overhead: the learner vs a plain loop; pipeline: the multi-process pipeline
    paper-repro notebooks  run the figure notebooks with Papermill

Bad input (``ValueError``, including ``DataError``) becomes one line ``error: ...`` and exit
status 2, Ctrl-C exit status 130. The work itself lives in the modules each handler calls.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from . import bench, data, models, notebooks, settings, train
from .cliargs import json_dict, positive_float, positive_int
from .distributed import bench as pipeline_bench
from .distributed.launch import PipelineError
from .distributed.options import add_arguments as add_pipeline_arguments
from .distributed.options import configs_from_args
from .distributed.report import format_table, format_targets, median_records, targets, to_frame
from .distributed.run import write_json
from .sweep import Grid, SweepInterrupted, cost_line, parse_shard, run_sweep


# ---------------------------------------------------------------------------------- train
def add_train(subparsers) -> None:
    p = subparsers.add_parser("train", help="train one model x method x data set in one process")
    p.add_argument("--model", default="mlp", choices=models.MODELS)
    p.add_argument("--method", default="backprop", help="backprop | greedy | overlapping | chunked-K")
    p.add_argument("--dataset", default="digits", choices=data.DATASETS)
    p.add_argument("--data-dir", default=None, help="where the data set lives (see README: Data)")
    p.add_argument("--steps", type=positive_int, default=500)
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--lr", type=positive_float, default=1e-3)
    p.add_argument("--optimizer", default="adam", choices=train.OPTIMIZERS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--device", default="cpu")
    p.add_argument("--model-kwargs", type=json_dict, default={}, help='JSON, e.g. \'{"depth": 4, "width": 256}\'')
    p.add_argument("--data-kwargs", type=json_dict, default={}, help='JSON, e.g. \'{"max_train": 5000}\'')
    p.add_argument("--out", default=None, help="write the per-step records here (.csv)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run_train)


def _check_writable(path: str, option: str) -> None:
    """Fail now, not after hours of training, when ``path`` cannot be written."""
    out = Path(path)
    if out.is_dir():
        raise ValueError(f"{option} {path!r} is a directory; give a file name such as {str(out / 'records.csv')!r}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        probe = out.with_name(out.name + ".tmp")
        probe.touch()
        probe.unlink()
    except OSError as err:
        raise ValueError(f"cannot write {option} {path!r}: {err.strerror or err}") from None


def run_train(args) -> int:
    if args.out:
        _check_writable(args.out, "--out")
    cfg = train.TrainConfig(model=args.model, method=args.method, dataset=args.dataset, data_dir=args.data_dir,
                            steps=args.steps, batch_size=args.batch_size, lr=args.lr, optimizer=args.optimizer,
                            seed=args.seed, eval_every=args.eval_every, device=args.device,
                            model_kwargs=args.model_kwargs, data_kwargs=args.data_kwargs,
                            progress=not args.no_progress)
    result = train.train(cfg)
    summary = result.summary()
    width = max(map(len, summary))
    for key, value in summary.items():
        print(f"{key:<{width}}  {value:.4f}" if isinstance(value, float) else f"{key:<{width}}  {value}")
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        result.records.assign(method=cfg.method, model=cfg.model, dataset=cfg.dataset,
                              status=result.status).to_csv(tmp, index=False)
        tmp.replace(out)
        print(f"records written to {out}")
    return 0


# ---------------------------------------------------------------------------------- sweep
def add_sweep(subparsers) -> None:
    """``paper-repro sweep STUDY [--profile P] | --grid FILE  [--results DIR] [--workers N] [--shard i/n]``."""
    p = subparsers.add_parser("sweep", help="run a resumable grid of training runs (compute-efficiency study)")
    p.add_argument("study", nargs="?", choices=settings.COMPUTE_STUDIES,
                   help="a built-in compute-efficiency grid (or give --grid)")
    p.add_argument("--profile", default="quick", choices=settings.PROFILES,
                   help="quick: CPU minutes on offline data; cpu: an afternoon on CPU; full: paper scale, GPU")
    p.add_argument("--grid", metavar="FILE", help="a grid.json (the keys of paper_repro.sweep.Grid) instead of STUDY")
    p.add_argument("--results", default="results", metavar="DIR",
                   help="parent folder of the store (default: results); the store is DIR/<grid name>")
    p.add_argument("--data-dir", default=None, help="where the data set lives (e.g. a CIFAR-10 folder)")
    p.add_argument("--workers", type=int, default=1, help="parallel worker processes (one per GPU on CUDA)")
    p.add_argument("--shard", default="0/1", help="run only shard i of n (i counts from 0), e.g. 2/8")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads per run (workers: default 1)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run_sweep_command)


def run_sweep_command(args) -> int:
    if (args.study is None) == (args.grid is None):
        raise ValueError("give exactly one of STUDY (choices: " + ", ".join(settings.COMPUTE_STUDIES)
                         + ") or --grid FILE")
    if args.grid is not None:
        try:
            grid = Grid.from_dict(json.loads(Path(args.grid).read_text()))
        except (OSError, json.JSONDecodeError, TypeError) as e:
            raise ValueError(f"cannot read grid file {args.grid}: {e}") from None
    else:
        grid = settings.compute_grid(args.study, args.profile)
    print(cost_line(grid), file=sys.stderr, flush=True)
    try:
        report = run_sweep(grid, Path(args.results) / grid.name, workers=args.workers,
                           shard=parse_shard(args.shard), device=args.device, data_dir=args.data_dir,
                           progress=not args.no_progress, threads=args.threads)
    except SweepInterrupted as stop:
        print(f"interrupted: {stop}", file=sys.stderr)
        return 130
    print(report)
    return 1 if report.failed else 0


# ---------------------------------------------------------------------------------- bench
def add_bench(subparsers) -> None:
    """``bench overhead`` and ``bench pipeline``."""
    group = subparsers.add_parser("bench", help="benchmarks: learner overhead, pipeline throughput")
    sub = group.add_subparsers(dest="bench_command", metavar="{overhead,pipeline}")
    sub.required = True
    p = sub.add_parser("overhead", help="time a backprop step of the learner against a plain PyTorch loop")
    p.add_argument("--model", default="mlp", choices=models.MODELS)
    p.add_argument("--model-kwargs", type=json_dict, default={}, help='JSON, e.g. \'{"depth": 8, "width": 2048}\'')
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=10, help="steps per timed repetition")
    p.add_argument("--repeats", type=int, default=15, help="interleaved repetitions per side")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: unchanged)")
    p.add_argument("--max-ratio", type=float, default=None,
                   help="exit with status 1 when the median ratio is above this (e.g. 1.05)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run_overhead)

    p = sub.add_parser("pipeline", help="local-parallel pipeline vs pipelined backprop vs DDP",
                       description="Throughput, busy time, communication and memory per stage "
                       "of the local pipeline and its baselines.")
    add_pipeline_arguments(p)
    p.add_argument("--comm-only", action="store_true",
                   help="only compute the bytes from the boundary shapes (no processes, no training)")
    p.add_argument("--launch-timeout", type=float, default=None, help="kill the run after this many seconds")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run_pipeline_command)


def run_overhead(args) -> int:
    if not isinstance(args.model_kwargs, dict):
        raise ValueError(f"--model-kwargs must be a JSON object, got {args.model_kwargs!r}")
    train.check_device(args.device)
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be a positive integer, got {args.threads!r}")
        torch.set_num_threads(args.threads)
    try:
        r = bench.overhead(args.model, args.model_kwargs, args.batch_size, args.steps, args.repeats,
                           device=args.device, progress=not getattr(args, "no_progress", False))
    except bench.BenchInterrupted as stop:
        if stop.partial is not None:
            print(bench.format_overhead(stop.partial))
        print(f"interrupted: {stop}" + ("; the numbers above are from those" if stop.partial else
                                        "; nothing measured yet"), file=sys.stderr)
        return 130
    except KeyboardInterrupt:  # while building the model or warming up
        print("interrupted before timing started: nothing measured", file=sys.stderr)
        return 130
    print(bench.format_overhead(r))
    if args.max_ratio is not None and r["ratio"] > args.max_ratio:
        print(f"ratio {r['ratio']:.3f} is above --max-ratio {args.max_ratio}")
        return 1
    return 0


def run_pipeline_command(args) -> int:
    configs = configs_from_args(args)
    if args.comm_only:
        records = pipeline_bench.comm_only(configs)
    else:
        try:
            records = pipeline_bench.run_pipeline(configs, timeout=args.launch_timeout,
                                                  progress=not args.no_progress, keep_logs=True)
        except PipelineError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    if args.repeats > 1 and not args.comm_only:
        records = median_records(records)
    print(format_table(records))
    if len({r["schedule"] for r in records}) > 1 and not args.comm_only:
        print()
        print(format_targets(targets(records)))
    if args.json:
        write_json(records, args.json)
        csv = Path(args.json).with_suffix(".csv")
        to_frame(records).to_csv(csv, index=False)
        print(f"results written to {args.json} and {csv} (one row per run and stage)")
    return 0


# ------------------------------------------------------------------------------ notebooks
def add_notebooks(subparsers) -> None:
    """``notebooks run [--profile P] [--only NAME] [--out DIR] [--figures DIR]``."""
    nb = subparsers.add_parser("notebooks", help="run the figure notebooks with Papermill")
    nb_sub = nb.add_subparsers(dest="notebooks_command", metavar="{run}")
    nb_sub.required = True
    run = nb_sub.add_parser("run", help="execute notebooks/*.ipynb, writing figures/")
    run.add_argument("--profile", default="quick", choices=settings.PROFILES,
                     help="quick: CPU minutes (default); cpu: longer CPU runs; full: paper scale, GPU")
    run.add_argument("--only", action="append", metavar="NAME",
                     help="run only notebooks whose name is or contains NAME (repeatable)")
    run.add_argument("--out", default="out/notebooks", metavar="DIR",
                     help="where executed notebooks go (default: out/notebooks)")
    run.add_argument("--figures", default="figures", metavar="DIR",
                     help="where notebooks write figures (default: figures)")
    run.add_argument("--timeout", type=float, default=None, metavar="S",
                     help="per-cell timeout in seconds (default: none)")
    run.add_argument("--notebooks-dir", default=str(notebooks.NOTEBOOKS_DIR), metavar="DIR",
                     help="directory holding the notebooks (default: the repo's notebooks/)")
    run.set_defaults(func=run_notebooks_command)


def _print_notebook_summary(results) -> None:
    for name, seconds, status in results:
        print(f"{name:<40} {seconds:8.1f} s  {status}")


def run_notebooks_command(args) -> int:
    try:
        results = notebooks.run_notebooks(profile=args.profile, only=args.only, out_dir=args.out,
                                          figures_dir=args.figures, timeout=args.timeout,
                                          notebooks_dir=args.notebooks_dir)
    except RuntimeError as e:
        _print_notebook_summary(getattr(e, "results", []))
        print(f"error: {e}", file=sys.stderr)
        return 1
    _print_notebook_summary(results)
    return 0


# ---------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="paper-repro", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for add in (add_train, add_sweep, add_bench, add_notebooks):
        add(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished work was saved", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
