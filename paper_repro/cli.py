"""paper-repro: train, sweep, benchmark and run the notebooks of the local-updates reproduction.

commands (each has its own --help):
  train      train one model with one method (backprop, greedy, overlapping, chunked-K) on one data set
  sweep      run a resumable grid of training runs (a built-in compute-efficiency study, or a grid.json)
  bench      overhead: the learner against a plain PyTorch loop; pipeline: the multi-process pipeline
  race       every strategy trained to the same target loss on the same processes: who is first
  notebooks  run the figure notebooks with Papermill
  simulate   simulate pipeline schedules at any scale: throughput, bubbles, memory per processor

examples:
  paper-repro train --model mlp --method chunked-2 --steps 500 --out records.csv
  paper-repro sweep mlp --profile quick --workers 2
  paper-repro bench pipeline --model resnet18 --stages 2 --schedule local,1f1b
  paper-repro notebooks run --profile quick --only 00
  paper-repro simulate --stages 4 --micro-batches 8 --schedule 1f1b,gpipe --uniform-times 1,2

Bad input prints one line "error: ..." and exits with status 2. Ctrl-C (exit status 130) and
SIGTERM (143) save the work that is finished (a sweep's points, train's records with --out)
and stop every child process.
"""
from __future__ import annotations

# This module only builds the parser: it imports neither torch nor the training code, so
# `paper-repro --help` answers at once. A command's work lives in paper_repro.commands, which
# is imported (through HANDLERS, with importlib) only when the command runs. The choices come
# from paper_repro.names, where the working modules take them from too.
import argparse
import dataclasses
import importlib
import shlex
import sys

from . import signals
from .cliargs import add_renamed, float_list, int_list, json_dict, positive_float, positive_int
from .distributed.arguments import add_arguments as add_pipeline_arguments
from .distributed.fields import PipelineFields, TrainingFields
from .fields import TrainFields
from .notebooks import NOTEBOOKS_DIR
from .names import (CUT_HELP, CUTS, DATASETS, DEFAULT_CUT, DEPTH_SERIES, DEVICES, DTYPES, MODELS, OPTIMIZERS,
                    PROFILES, RUN_NAMES, SIMULATED_SCHEDULES, SWEEP_STUDIES)

# the defaults of a pipeline run (paper_repro.distributed.PipelineConfig) that `simulate` shows
PIPELINE_DEFAULTS = dataclasses.asdict(PipelineFields())
SIMULATED_INPUTS = ("image", "text")        # paper_repro.simulate.inputs.KINDS

# command -> "module:function" run with the parsed arguments
HANDLERS = {
    "train": "paper_repro.commands:run_train",
    "sweep": "paper_repro.commands:run_sweep_command",
    "bench overhead": "paper_repro.commands:run_overhead",
    "bench pipeline": "paper_repro.commands:run_pipeline_command",
    "race": "paper_repro.commands:run_race_command",
    "notebooks run": "paper_repro.commands:run_notebooks_command",
    "simulate": "paper_repro.simulate.command:run_simulate_command",
}

# help for the pipeline options that paper_repro.distributed.arguments defines without one
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


# the checks of every command's options that need no torch (paper_repro.precheck), run first
PRECHECK = Handler("paper_repro.precheck:check")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default after its help."""


def _parser(subparsers, name: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
    return subparsers.add_parser(name, help=help, description=description or help[0].upper() + help[1:] + ".",
                                 formatter_class=HelpFormatter)


# ---------------------------------------------------------------------------------- train
def add_train(subparsers) -> None:
    # one statement per option, in the order --help lists them: long because the command has many
    p = _parser(subparsers, "train", "train one model with one method on one data set, on one process or several",
                "Train one model with one local-learning method on one data set, in this process or on "
                "several (--stages); print a summary and optionally write one row per step (--out).")
    t = TrainFields()
    p.add_argument("--model", default=t.model,
                   help=f"a built-in model ({' | '.join(MODELS)}) or your own as package.module:function "
                        "(importable: installed or on PYTHONPATH; its keyword arguments from --model-kwargs) "
                        "returning an nn.Sequential, one block per entry, or a BlockNet")
    p.add_argument("--method", default=None,
                   help="backprop | greedy | overlapping | chunked-K (K contiguous chunks, K <= number of blocks) "
                        "| chunked@A,B,... (chunks that start at blocks A, B, ...: chunked@4 is two chunks, "
                        "blocks 0-3 and 4 to the last; the cut the pipeline balances by measured time). "
                        "Default: backprop in one process; on several, the local schedules' chunked-STAGES "
                        "cut by --cut (the other schedules train with backprop)")
    p.add_argument("--dataset", default=t.dataset, choices=DATASETS,
                   help="digits and text need no download; cifar10 and imagenet need --data-dir")
    p.add_argument("--data-dir", default=None, help="where the data set lives (see README: Data)")
    p.add_argument("--download", action="store_true",
                   help="fetch a missing CIFAR-10 into --data-dir first (torchvision's downloader)")
    p.add_argument("--steps", type=positive_int, default=t.steps,
                   help="optimizer steps (several processes: steps of --batch-size examples)")
    p.add_argument("--batch-size", type=positive_int, default=t.batch_size,
                   help="examples per step (at most the training set's size)")
    p.add_argument("--lr", type=positive_float, default=t.lr, help="learning rate")
    p.add_argument("--optimizer", default=t.optimizer, choices=OPTIMIZERS, help="optimizer over all parameters")
    p.add_argument("--seed", type=int, default=t.seed, help="seed of the weights and of the batch order")
    p.add_argument("--eval-every", type=int, default=t.eval_every,
                   help="steps between test-set evaluations (0: only at the end)")
    p.add_argument("--device", default=t.device, help="cpu, cuda, cuda:N or mps")
    p.add_argument("--model-kwargs", type=json_dict, default={},
                   help='the model\'s keyword arguments as JSON, e.g. \'{"depth": 4, "width": 256}\'')
    p.add_argument("--data-kwargs", type=json_dict, default={},
                   help='keyword arguments of paper_repro.data.load as JSON, e.g. \'{"max_train": 5000}\'')
    p.add_argument("--out", default=None,
                   help="write the per-step records here; the format follows the extension: .csv, .json, "
                        ".parquet (needs pyarrow). Also written on Ctrl-C / SIGTERM, with the finished steps")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    tr = TrainingFields()
    p.add_argument("--threads", type=positive_int, default=t.threads,
                   help="torch threads per process (default: torch's own for one process; cores / processes "
                        "for several). On a shared or small machine 1 is often much faster")
    p.add_argument("--eval-every-examples", type=int, default=t.eval_every_examples,
                   help="evaluate the net on a fixed training subset each time the examples seen cross a "
                        "multiple of this (0: off); --stop-loss compares with it")
    p.add_argument("--train-eval-examples", type=positive_int, default=None,
                   help="size of that training subset (default: the whole training split)")
    p.add_argument("--stop-loss", type=float, default=None,
                   help="stop at the first training-subset evaluation at or below this loss "
                        "(needs --eval-every-examples)")
    p.add_argument("--save", default=None, metavar="FILE",
                   help="write the trained learner (net and heads) here as one state dict "
                        "(paper_repro.checkpoint.load_learner reads it)")
    p.add_argument("--checkpoint", default=None, metavar="DIR",
                   help="save the run's state in DIR (one process: every minute; several: every "
                        "--checkpoint-every updates and on Ctrl-C / SIGTERM); --resume goes on from it")
    p.add_argument("--checkpoint-every", type=int, default=tr.checkpoint_every,
                   help="several processes: updates between checkpoints (0: only on Ctrl-C / SIGTERM)")
    p.add_argument("--resume", action="store_true", help="go on from the checkpoint in --checkpoint DIR")
    g = p.add_argument_group("several processes (one per pipeline stage, or DDP replicas)")
    d = PipelineFields()
    g.add_argument("--stages", type=positive_int, default=1,
                   help="processes: 1 trains here; S > 1 launches S processes on this machine (the same "
                        "worker runs under torchrun across nodes: python -m paper_repro.distributed.run "
                        "--training FILE)")
    g.add_argument("--schedule", default="local", choices=RUN_NAMES,
                   help="local: every stage steps its optimizer after each micro-batch; local/M: once per "
                        "step; gpipe, 1f1b, ... : pipelined backprop (torch.distributed.pipelining); ddp: "
                        "whole-model replicas, the step's micro-batches split between them")
    g.add_argument("--micro-batches", type=positive_int, default=None,
                   help=f"micro-batches per step (default: {d.micro_batches} on several processes; 1 in one, "
                        "where more accumulate the gradients of the step's micro-batches); --batch-size is "
                        "the step's examples over all processes")
    g.add_argument("--dp", type=positive_int, default=d.dp, help="replicas per pipeline stage")
    cut_at = g.add_argument("--cut-at", dest="cut_at", type=int_list, default=None, metavar="A,B,...",
                            help="first local module of stages 1..S-1 (default: the --cut rule)")
    cut = g.add_argument("--cut", dest="cut", default=d.cut, choices=CUTS,
                         help="without --cut-at: " + CUT_HELP)
    cut_blocks = g.add_argument("--cut-at-blocks", dest="cut_at_blocks", type=int_list, default=None, metavar="A,B,...",
                                help="two-stages-per-process schedules: first block of stages 1..2S-1")
    for old, new in (("--split", cut_at), ("--balance", cut), ("--block-split", cut_blocks)):
        add_renamed(g, old, new)
    g.add_argument("--timeout", type=positive_float, default=d.timeout, help="seconds any one message may take")
    g.add_argument("--launch-timeout", type=positive_float, default=None,
                   help="seconds the whole run may take (default: no limit)")
    p.set_defaults(func=Handler(HANDLERS["train"]), eval_examples=tr.eval_examples)


# ---------------------------------------------------------------------------------- sweep
def add_sweep(subparsers) -> None:
    p = _parser(subparsers, "sweep", "run a resumable grid of training runs (compute-efficiency study)",
                "Run a grid of training runs, saving each as it finishes; run the same command again "
                "to resume after an interruption.")
    p.add_argument("study", nargs="?", choices=SWEEP_STUDIES,
                   help=f"a built-in compute-efficiency grid, or a depth series ({', '.join(DEPTH_SERIES)}: one "
                        "grid per depth) (or give --grid)")
    p.add_argument("--profile", default="quick", choices=PROFILES,
                   help="quick: CPU minutes on offline data; cpu: hours to days on a CPU (the committed "
                        "results/); full: paper scale, GPU")
    p.add_argument("--grid", metavar="FILE", help="a grid.json (the keys of paper_repro.sweep.Grid) instead of STUDY")
    p.add_argument("--results", default="results", metavar="DIR",
                   help="parent folder of the store; the store is DIR/<grid name>")
    p.add_argument("--data-dir", default=None, help="where the data set lives (e.g. a CIFAR-10 folder)")
    p.add_argument("--download", action="store_true",
                   help="fetch a missing CIFAR-10 into --data-dir first (torchvision's downloader)")
    p.add_argument("--workers", type=int, default=1, help="parallel worker processes (one per GPU on CUDA)")
    p.add_argument("--shard", default="0/1", help="run only shard i of n (i counts from 0), e.g. 2/8")
    p.add_argument("--device", default="cpu", help="cpu, cuda or mps")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads per run (None: 1 per worker, unchanged in-process)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--status", action="store_true",
                   help="train nothing: say how far the store is, how long the rest will take and, for a "
                        "built-in study, where a best learning rate sits at its grid's edge")
    p.set_defaults(func=Handler(HANDLERS["sweep"]))


# ---------------------------------------------------------------------------------- bench
def add_bench(subparsers) -> None:
    """``bench overhead`` and ``bench pipeline``. The pipeline's options come from
    :mod:`paper_repro.distributed.arguments` (shared with the torchrun worker; torch-free)."""
    group = _parser(subparsers, "bench", "benchmarks: learner overhead, pipeline throughput")
    sub = group.add_subparsers(dest="bench_command", metavar="{overhead,pipeline}")
    sub.required = True
    p = _parser(sub, "overhead", "time a backprop step of the learner against a plain PyTorch loop")
    p.add_argument("--model", default="mlp", choices=MODELS, help="built-in model")
    p.add_argument("--model-kwargs", type=json_dict, default={},
                   help='the model\'s keyword arguments as JSON, e.g. \'{"depth": 8, "width": 2048}\' '
                        "(default {}: a shape chosen per model in paper_repro.overhead)")
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
                "arguments from --model-kwargs), returning a BlockNet or an nn.Sequential. The table's "
                "columns are those of estimate and simulate (a legend under it).")
    add_pipeline_arguments(p)
    for action in p._actions:
        if action.help is None and action.dest in PIPELINE_HELP:
            action.help = PIPELINE_HELP[action.dest]
    p.add_argument("--comm-only", action="store_true",
                   help="only compute the bytes from the boundary shapes (no processes, no training)")
    p.add_argument("--targets", action="store_true",
                   help="also check the reproduction's own throughput, busy, bytes and memory targets (always "
                        "done for the built-in models; a model of your own gets the table's ratios alone)")
    p.add_argument("--launch-timeout", type=float, default=None,
                   help="kill the run after this many seconds (None: no limit)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=Handler(HANDLERS["bench pipeline"]))


# ----------------------------------------------------------------------------------- race
def add_race(subparsers) -> None:
    p = _parser(subparsers, "race", "train every strategy to the same target loss on the same processes",
                "Train the same model to the same targets with every strategy (one process, DDP, pipelined "
                "backprop, the local pipeline) on the same processes, and print who gets there first "
                "(notebook 10's race; resumable: run the same command again after an interruption).")
    p.add_argument("--profile", default="quick", choices=PROFILES,
                   help="quick: a small MLP on the digits (seconds); cpu: the deep MLP on CIFAR-10 at 8 px, "
                        "2 CPU processes (hours); full: the same on 2 GPUs")
    p.add_argument("--results", default="results", metavar="DIR",
                   help="the store is DIR/<race name>; the learning rates come from DIR's committed study")
    p.add_argument("--data-dir", default=None, help="cpu and full: where CIFAR-10 is")
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads per process")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=Handler(HANDLERS["race"]))


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
    run.add_argument("--data-dir", action="append", default=[], metavar="DATASET=PATH",
                     help="where a data set lives, e.g. cifar10=/data/cifar10, imagenet=/data/imagenet, "
                          "text=/data/lm1b.txt (repeatable); passed as data_dir to the notebooks that read it")
    run.add_argument("--download", action="store_true",
                     help="fetch a missing CIFAR-10 into its --data-dir (torchvision) before running")
    run.add_argument("--device", default=None,
                     help="passed to every notebook that has a device parameter (None: cuda for the full "
                          "profile, each notebook's own default otherwise)")
    run.add_argument("--workers", type=positive_int, default=None,
                     help="parallel sweep workers of the notebooks that have them (None: their default)")
    run.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                     help="any notebook parameter (VALUE read as JSON, else as a string), to every notebook "
                          "that declares it (repeatable)")
    run.add_argument("--dry-run", action="store_true",
                     help="check CUDA, data and the output folder and print the plan (FLOPs, GPU-hours) of the "
                          "notebooks --only selects; train nothing")
    run.add_argument("--tflops", type=positive_float, default=100.0,
                     help="assumed sustained TFLOP/s per GPU for the plan's GPU-hours (full profile, --dry-run)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.set_defaults(func=Handler(HANDLERS["notebooks run"]))


# ------------------------------------------------------------------------------- simulate
def add_simulate(subparsers) -> None:
    p = _parser(subparsers, "simulate", "simulate pipeline schedules: throughput, bubbles, memory",
                "Simulate pipeline schedules at any number of processors and micro-batch size: samples/s, "
                "bubble fraction, busy time and peak memory per processor (see docs/simulate.md). Costs are "
                "calibrated per block on this machine (--save-calibration keeps them, --calibration reuses "
                "them) or uniform (--uniform-times); memory is counted exactly on the meta device.")
    d = PIPELINE_DEFAULTS
    p.add_argument("--schedule", default="all",
                   help=f"{' | '.join(SIMULATED_SCHEDULES)}; a comma list, or all (all leaves out, and names, "
                        "those that cannot run the settings). The names are bench pipeline's; the former "
                        "local-per-step and zb-interleaved still work, with a warning")
    p.add_argument("--model", default=d["model"],
                   help=f"a built-in model ({' | '.join(MODELS)}) or your own as package.module:function, "
                        "its keyword arguments from --model-kwargs (as in bench pipeline)")
    p.add_argument("--model-kwargs", type=json_dict, default={},
                   help='the model\'s keyword arguments as JSON, e.g. \'{"width": 16}\'')
    p.add_argument("--input", default=None, choices=SIMULATED_INPUTS,
                   help="the synthetic input the model takes: image (CHANNELS x IMAGE_SIZE x IMAGE_SIZE, NUM_CLASSES "
                        "classes) or text (SEQ_LEN token ids from a vocabulary of NUM_CLASSES, next-token targets), "
                        "the kinds of the data sets of train and bench (None: text for the built-in transformer, "
                        "image for every other model; give text for your own token model)")
    p.add_argument("--image-size", type=positive_int, default=d["image_size"], help="synthetic image side (pixels)")
    p.add_argument("--channels", type=positive_int, default=d["channels"], help="synthetic image channels")
    p.add_argument("--num-classes", type=positive_int, default=d["num_classes"],
                   help="classes (the vocabulary size of text input)")
    p.add_argument("--seq-len", type=positive_int, default=d["seq_len"], help="tokens per window of text input")
    p.add_argument("--stages", type=int_list, default=[d["stages"]], help="processors; a comma list runs each")
    p.add_argument("--micro-batch", type=int_list, default=[d["micro_batch"]],
                   help="samples per micro-batch; a comma list runs each")
    p.add_argument("--micro-batches", type=positive_int, default=d["micro_batches"], help="micro-batches per step")
    p.add_argument("--steps", type=positive_int, default=d["steps"], help="simulated timed steps")
    p.add_argument("--warmup-steps", type=int, default=d["warmup_steps"], help="simulated steps before the timed ones")
    p.add_argument("--update-every", type=positive_int, default=d["update_every"],
                   help="local: optimizer step every N micro-batches")
    p.add_argument("--max-in-flight", type=positive_int, default=d["max_in_flight"],
                   help="local: unreceived sends per stage")
    p.add_argument("--optimizer", default=d["optimizer"], choices=OPTIMIZERS, help="optimizer of every stage")
    p.add_argument("--dtype", default=d["dtype"], choices=DTYPES, help="dtype of the weights and activations")
    p.add_argument("--device", default=d["device"], choices=DEVICES, help="where to calibrate")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="torch threads while calibrating (None: cores / stages)")
    add_renamed(p, "--balance", p.add_argument("--cut", dest="cut", default=DEFAULT_CUT, choices=CUTS,
                                               help=CUT_HELP + " (here: time and FLOPs from the calibration)"))
    p.add_argument("--uniform-times", type=float_list(2, 3), default=None, metavar="F,B[,W]",
                   help="seconds per forward / whole backward (/ its weight half) of a micro-batch on every "
                        "processor, instead of calibrating (None: calibrate)")
    p.add_argument("--link", type=float_list(2, 2), default=None, metavar="LATENCY_S,BYTES_PER_S",
                   help="each message takes latency + bytes / bandwidth; None: communication is free")
    p.add_argument("--calibration", default=None, metavar="JSON",
                   help="read the per-block costs from this file instead of measuring them")
    p.add_argument("--save-calibration", default=None, metavar="JSON", help="write the measured per-block costs here")
    p.add_argument("--calibrate-micro-batch", type=positive_int, default=None,
                   help="measure at this micro-batch size and scale linearly (None: the first --micro-batch)")
    p.add_argument("--reps", type=positive_int, default=3, help="calibration: best of this many runs per block")
    p.add_argument("--no-memory", action="store_true", help="skip the meta-device memory accounting")
    p.add_argument("--json", default=None, help="write the records here")
    p.add_argument("--gantt", default=None, metavar="PNG", help="draw one step of every simulated schedule here")
    p.set_defaults(func=Handler(HANDLERS["simulate"]))


# ---------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    """The ``paper-repro`` parser (every command's options; no torch)."""
    parser = argparse.ArgumentParser(prog="paper-repro", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="command", required=True,
                                       metavar="{train,sweep,bench,race,notebooks,simulate}")
    add_train(subparsers)
    add_sweep(subparsers)
    add_bench(subparsers)
    add_race(subparsers)
    add_notebooks(subparsers)
    add_simulate(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.command_line = "paper-repro " + shlex.join(argv)     # for notes that say how a file was made
    with signals.sigterm_as_interrupt():
        try:
            PRECHECK(args)            # what needs no torch is refused before the command loads it
            return int(args.func(args) or 0)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        except KeyboardInterrupt as stop:
            print(f"{signals.describe(stop)}: stopped", file=sys.stderr)
            return signals.exit_status(stop)


if __name__ == "__main__":
    sys.exit(main())
