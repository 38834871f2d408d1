"""paper-repro: train, sweep, benchmark and run the notebooks of the local-updates reproduction.

commands (each has its own --help):
  train      train one model with one method (backprop, greedy, overlapping, chunked-K) on one data set
  sweep      run a resumable grid of training runs (a built-in compute-efficiency study, or a grid.json)
  bench      overhead: the learner against a plain PyTorch loop; pipeline: the multi-process pipeline
  notebooks  run the figure notebooks with Papermill

examples:
  paper-repro train --model mlp --method chunked-2 --steps 500 --out records.csv
  paper-repro sweep mlp --profile quick --workers 2
  paper-repro bench pipeline --model resnet18 --stages 2 --schedule local,1f1b
  paper-repro notebooks run --profile quick --only 00

Bad input prints one line "error: ..." and exits with status 2. Ctrl-C (exit status 130) and
SIGTERM (143) save the work that is finished (a sweep's points, train's records with --out)
and stop every child process.
"""
from __future__ import annotations

# This module only builds the parser: it imports neither torch nor the training code, so
# `paper-repro --help` answers at once. A command's work lives in paper_repro.commands, which
# is imported (through HANDLERS, with importlib) only when the command runs. The choices
# below repeat names defined in the torch-importing modules; tests/test_cli.py checks that
# they agree.
import argparse
import importlib
import sys
from pathlib import Path

from . import signals
from .cliargs import json_dict, positive_float, positive_int

MODELS = ("mlp", "transformer", "resnet18", "resnet34", "resnet50")       # paper_repro.models.MODELS
DATASETS = ("digits", "cifar10", "imagenet", "text")                      # paper_repro.data.DATASETS
OPTIMIZERS = ("adam", "sgd")                                              # paper_repro.config.OPTIMIZERS
PROFILES = ("quick", "cpu", "full")                                       # paper_repro.settings.PROFILES
COMPUTE_STUDIES = ("mlp", "transformer", "resnet", "resnet-imagenet")     # paper_repro.settings.COMPUTE_STUDIES
NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"      # paper_repro.notebooks.NOTEBOOKS_DIR

# command -> "module:function" run with the parsed arguments
HANDLERS = {
    "train": "paper_repro.commands:run_train",
    "sweep": "paper_repro.commands:run_sweep_command",
    "bench overhead": "paper_repro.commands:run_overhead",
    "bench pipeline": "paper_repro.commands:run_pipeline_command",
    "notebooks run": "paper_repro.commands:run_notebooks_command",
}

# help for the pipeline options that paper_repro.distributed.options defines without one
PIPELINE_HELP = {
    "data_dir": "where --dataset lives (not needed for synthetic inputs)",
    "optimizer": "optimizer of every stage",
    "lr": "learning rate",
    "seed": "seed of the weights and of the inputs",
    "dtype": "dtype of the weights and activations",
    "device": "cpu (gloo) or cuda (nccl; each process uses cuda:LOCAL_RANK)",
}


class Handler:
    """A command's handler named as ``"module:function"``, imported when first called."""

    def __init__(self, target: str):
        self.target = target

    def __call__(self, args) -> int:
        module, function = self.target.split(":")
        return getattr(importlib.import_module(module), function)(args)

    def __repr__(self) -> str:
        return f"Handler({self.target!r})"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default after its help."""


def _parser(subparsers, name: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
    return subparsers.add_parser(name, help=help, description=description or help[0].upper() + help[1:] + ".",
                                 formatter_class=HelpFormatter)


# ---------------------------------------------------------------------------------- train
def add_train(subparsers) -> None:
    p = _parser(subparsers, "train", "train one model with one method on one data set, in one process",
                "Train one model with one local-learning method on one data set, in one process; print a "
                "summary and optionally write one row per step (--out).")
    p.add_argument("--model", default="mlp", choices=MODELS, help="built-in model")
    p.add_argument("--method", default="backprop",
                   help="backprop | greedy | overlapping | chunked-K (K contiguous chunks, K <= number of blocks)")
    p.add_argument("--dataset", default="digits", choices=DATASETS,
                   help="digits and text need no download; cifar10 and imagenet need --data-dir")
    p.add_argument("--data-dir", default=None, help="where the data set lives (see README: Data)")
    p.add_argument("--steps", type=positive_int, default=500, help="optimizer steps")
    p.add_argument("--batch-size", type=positive_int, default=64,
                   help="examples per step (at most the training set's size)")
    p.add_argument("--lr", type=positive_float, default=1e-3, help="learning rate")
    p.add_argument("--optimizer", default="adam", choices=OPTIMIZERS, help="optimizer over all parameters")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and of the batch order")
    p.add_argument("--eval-every", type=int, default=100,
                   help="steps between test-set evaluations (0: only at the end)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps")
    p.add_argument("--model-kwargs", type=json_dict, default={},
                   help='the model\'s keyword arguments as JSON, e.g. \'{"depth": 4, "width": 256}\'')
    p.add_argument("--data-kwargs", type=json_dict, default={},
                   help='keyword arguments of paper_repro.data.load as JSON, e.g. \'{"max_train": 5000}\'')
    p.add_argument("--out", default=None,
                   help="write the per-step records here; the format follows the extension: .csv, .json, "
                        ".parquet (needs pyarrow). Also written on Ctrl-C / SIGTERM, with the finished steps")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=Handler(HANDLERS["train"]))


# ---------------------------------------------------------------------------------- sweep
def add_sweep(subparsers) -> None:
    p = _parser(subparsers, "sweep", "run a resumable grid of training runs (compute-efficiency study)",
                "Run a grid of training runs, saving each as it finishes; run the same command again "
                "to resume after an interruption.")
    p.add_argument("study", nargs="?", choices=COMPUTE_STUDIES, help="a built-in compute-efficiency grid (or give --grid)")
    p.add_argument("--profile", default="quick", choices=PROFILES,
                   help="quick: CPU minutes on offline data; cpu: an afternoon on CPU; full: paper scale, GPU")
    p.add_argument("--grid", metavar="FILE", help="a grid.json (the keys of paper_repro.sweep.Grid) instead of STUDY")
    p.add_argument("--results", default="results", metavar="DIR",
                   help="parent folder of the store; the store is DIR/<grid name>")
    p.add_argument("--data-dir", default=None, help="where the data set lives (e.g. a CIFAR-10 folder)")
    p.add_argument("--workers", type=int, default=1, help="parallel worker processes (one per GPU on CUDA)")
    p.add_argument("--shard", default="0/1", help="run only shard i of n (i counts from 0), e.g. 2/8")
    p.add_argument("--device", default="cpu", help="cpu, cuda or mps")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads per run (None: 1 per worker, unchanged in-process)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=Handler(HANDLERS["sweep"]))


# ---------------------------------------------------------------------------------- bench
def add_bench(subparsers, pipeline_options: bool = True) -> None:
    """``bench overhead`` and ``bench pipeline``. The pipeline's options come from
    :mod:`paper_repro.distributed.options` (shared with the torchrun worker), which imports
    torch: ``pipeline_options=False`` leaves them out, for a parser that will not run it."""
    group = _parser(subparsers, "bench", "benchmarks: learner overhead, pipeline throughput")
    sub = group.add_subparsers(dest="bench_command", metavar="{overhead,pipeline}")
    sub.required = True
    p = _parser(sub, "overhead", "time a backprop step of the learner against a plain PyTorch loop")
    p.add_argument("--model", default="mlp", choices=MODELS, help="built-in model")
    p.add_argument("--model-kwargs", type=json_dict, default={},
                   help='the model\'s keyword arguments as JSON, e.g. \'{"depth": 8, "width": 2048}\' '
                        "(default {}: a shape chosen per model in paper_repro.bench)")
    p.add_argument("--batch-size", type=int, default=128, help="examples per step")
    p.add_argument("--steps", type=int, default=10, help="steps per timed repetition")
    p.add_argument("--repeats", type=int, default=15, help="interleaved repetitions per side")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (None: unchanged)")
    p.add_argument("--max-ratio", type=float, default=None,
                   help="exit with status 1 when the median ratio is above this (e.g. 1.05)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=Handler(HANDLERS["bench overhead"]))

    p = _parser(sub, "pipeline", "local-parallel pipeline vs pipelined backprop vs DDP",
                "Throughput, busy time, communication and memory per stage of the local pipeline and "
                "its baselines, one local process per stage. --model takes a built-in name or your "
                "own model as package.module:function (importable by every stage process; its keyword "
                "arguments from --model-kwargs), returning a BlockNet or an nn.Sequential.")
    if pipeline_options:
        importlib.import_module("paper_repro.distributed.options").add_arguments(p)
        for action in p._actions:
            if action.help is None and action.dest in PIPELINE_HELP:
                action.help = PIPELINE_HELP[action.dest]
    p.add_argument("--comm-only", action="store_true",
                   help="only compute the bytes from the boundary shapes (no processes, no training)")
    p.add_argument("--launch-timeout", type=float, default=None,
                   help="kill the run after this many seconds (None: no limit)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=Handler(HANDLERS["bench pipeline"]))


# ------------------------------------------------------------------------------ notebooks
def add_notebooks(subparsers) -> None:
    nb = _parser(subparsers, "notebooks", "run the figure notebooks with Papermill")
    nb_sub = nb.add_subparsers(dest="notebooks_command", metavar="{run}")
    nb_sub.required = True
    run = _parser(nb_sub, "run", "execute notebooks/*.ipynb, writing the figures",
                  "Execute the notebooks with Papermill (the executed copies go to --out, the figures to "
                  "--figures); a failing notebook does not stop the others.")
    run.add_argument("--profile", default="quick", choices=PROFILES,
                     help="quick: CPU minutes; cpu: longer CPU runs; full: paper scale, GPU")
    run.add_argument("--only", action="append", metavar="NAME",
                     help="run only notebooks whose name is or contains NAME (repeatable; None: all)")
    run.add_argument("--out", default="out/notebooks", metavar="DIR", help="where executed notebooks go")
    run.add_argument("--figures", default="figures", metavar="DIR", help="where notebooks write figures")
    run.add_argument("--timeout", type=float, default=None, metavar="S",
                     help="per-cell timeout in seconds (None: no limit)")
    run.add_argument("--notebooks-dir", default=str(NOTEBOOKS_DIR), metavar="DIR",
                     help="directory holding the notebooks")
    run.set_defaults(func=Handler(HANDLERS["notebooks run"]))


# ---------------------------------------------------------------------------------- main
def _runs_pipeline(argv: list[str]) -> bool:
    words = [a for a in argv if not a.startswith("-")]
    return words[:2] == ["bench", "pipeline"]


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The ``paper-repro`` parser. With ``argv``, the pipeline's options (whose module imports
    torch) are added only when ``argv`` runs ``bench pipeline``; without it, always."""
    parser = argparse.ArgumentParser(prog="paper-repro", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="{train,sweep,bench,notebooks}")
    add_train(subparsers)
    add_sweep(subparsers)
    add_bench(subparsers, pipeline_options=argv is None or _runs_pipeline(argv))
    add_notebooks(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    with signals.sigterm_as_interrupt():
        try:
            return int(args.func(args) or 0)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        except KeyboardInterrupt as stop:
            print(f"{signals.describe(stop)}: stopped", file=sys.stderr)
            return signals.exit_status(stop)


if __name__ == "__main__":
    sys.exit(main())
