"""Checks before a long run on a GPU server, and a plan of what the run will cost.

    report = preflight.check("full", data_dirs={"cifar10": "/data/cifar10",
                                               "imagenet": "/data/imagenet",
                                               "text": "/data/lm1b/train.txt"},
                             out_dir="results")
    report.problems   # one line per problem; empty: ready to start
    report.plan       # a table: notebook, workload, runs, training FLOPs, GPU-hours

Every check runs in seconds and before any training: CUDA and the number of GPUs, each
notebook's data present and readable (:func:`paper_repro.data.locate`, no decoding), the
output folder writable with enough free space. The plan's FLOPs come from the cost model
(:func:`paper_repro.sweep.grid_flops`: forward + backward of every block and head, every
step of every run), counted on PyTorch's meta device so no memory is allocated.

GPU-hours = FLOPs / sustained FLOP/s / 3600. The sustained rate is an assumption, not a
measurement: the default 100 TFLOP/s is roughly what an H100-class GPU sustains on large
bf16 matrix multiplies (about a tenth of its dense peak is lost to everything else at
best); small models and small batches run far below it, so the hours are a lower bound.
Evaluation passes, the probes' reference gradients and data loading are not counted.

``python -m paper_repro.preflight --profile full --data-dir cifar10=/data/cifar10 ...``
prints the problems and the plan and exits 1 when there is any problem.
"""
from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from . import data, settings
from .notebooks import COMPUTE_NOTEBOOK, NOTEBOOKS_DIR, notebook_runs
from .sweep import Grid, example_shape, grid_flops

DEFAULT_SUSTAINED_FLOPS = 100e12   # FLOP/s per GPU: an assumption (H100-class, bf16), see above
DEFAULT_MIN_FREE_GB = 20.0         # results stores, executed notebooks, figures, data caches
DATA_SETS = ("cifar10", "imagenet", "text")  # the ones read from a path (digits is built in)
TRAIN_SIZE = {"digits": 1437, "cifar10": 50_000, "imagenet": 1_281_167}
# notebooks outside the FLOP model, with what they do instead of training a grid
UNPLANNED_NOTEBOOKS = {
    "04_throughput_memory_communication": "pipeline benchmark (timed, not in the FLOP model)",
    "08_scaling": "pipeline simulation calibrated on the device (minutes, not in the FLOP model)",
    "09_your_model": "a small user model on sklearn digits (minutes, not in the FLOP model)",
    "10_time_to_target": "every strategy trained to a target on 2 processes (timed, not in the FLOP model)",
}


@dataclass
class Workload:
    """One notebook's training, as a grid the cost model can count."""
    notebook: str
    grid: Grid
    input_shape: tuple
    num_classes: int


@dataclass
class Report:
    problems: list
    plan: pd.DataFrame
    cuda_devices: int

    @property
    def ok(self) -> bool:
        return not self.problems


# -- checks: each returns a list of problems, one line each ------------------------------------
def check_cuda(min_devices: int = 1) -> tuple[list[str], int]:
    """(problems, number of visible CUDA devices)."""
    built = torch.version.cuda
    if not torch.cuda.is_available():
        why = (f"torch {torch.__version__} is built for CUDA {built}, but no GPU or NVIDIA driver is visible"
               if built else f"torch {torch.__version__} is a CPU-only build")
        return [f"CUDA is not available: {why}; the run needs {min_devices} GPU(s) "
                f"(driver >= 580 for CUDA 13; in Docker: docker run --gpus all)"], 0
    n = torch.cuda.device_count()
    if n < min_devices:
        return [f"{n} CUDA device(s) visible, {min_devices} needed (check CUDA_VISIBLE_DEVICES)"], n
    return [], n


def check_data(sources: dict, profile: str = "full") -> list[str]:
    """``sources``: {notebook: (data set, path or None)}. Each path is looked at once, not
    decoded; a problem names the data set, the notebooks that read it and the path."""
    readers = {}
    for notebook, (name, path) in sources.items():
        readers.setdefault((name, None if path is None else str(path)), []).append(notebook)
    problems = []
    for (name, path), notebooks in readers.items():
        who = f"{name} (read by {', '.join(notebooks)})"
        if name == "text" and path is None and profile == "full":
            problems.append(f"{who}: the full profile trains on a large text corpus and no text path is "
                            f"given; pass a text file (e.g. LM1B's training text) or a folder with train.txt")
            continue
        try:
            data.locate(name, path)
        except data.DataError as e:
            problems.append(f"{who}: {e}")
    return problems


def check_output(out_dir, min_free_gb: float = DEFAULT_MIN_FREE_GB) -> list[str]:
    """The folder (created if missing) takes a file, and its disk has ``min_free_gb`` free."""
    path = Path(out_dir).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".preflight-"):
            pass
    except OSError as e:
        return [f"output folder {path} is not writable ({type(e).__name__}: {e.strerror or e}); "
                f"pick another folder or mount a writable volume there"]
    free = shutil.disk_usage(path).free / 2 ** 30
    if free < min_free_gb:
        return [f"output folder {path} has {free:.1f} GiB free, {min_free_gb:g} GiB wanted"]
    return []


# -- the plan ---------------------------------------------------------------------------------
def workloads(profile: str = "full", study: str | None = None) -> list[Workload]:
    """Every trained workload of the notebooks at ``profile``, from the profiles' own settings.
    Notebook 01 runs once per study of :data:`~paper_repro.notebooks.RUN_PER_VALUE`, or once for
    ``study`` when one is given (as ``-p study`` does)."""
    if profile not in settings.PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid: {', '.join(settings.PROFILES)}")
    out = []
    q = settings.quickstart_config(profile, data_dir="planned")
    out.append(_workload("00_quickstart", Grid(
        name="quickstart", description="MLP {depth}x{width}, every method".format(**q.model_kwargs), model="mlp", dataset=q.dataset, methods=list(settings.QUICKSTART_METHODS),
        batch_sizes=[q.batch_size], lrs=[q.lr], steps=q.steps, model_kwargs=q.model_kwargs)))
    given = {} if study is None else {COMPUTE_NOTEBOOK: {"study": study}}
    for _, run, own in notebook_runs([NOTEBOOKS_DIR / f"{COMPUTE_NOTEBOOK}.ipynb"], profile, given):
        out.append(_workload(run, settings.compute_grid(own.get("study", study), profile)))
    g = settings.similarity_settings("gradient", profile)
    out.append(_workload("05_gradient_similarity", Grid(
        name="gradient", description=f"MLP {g.depth}x{g.width}, cosine to backprop", model="mlp", dataset=g.dataset,
        methods=g.methods, batch_sizes=[g.batch_size], lrs=[g.lr], seeds=g.seeds, steps=g.steps,
        data_kwargs=g.data_kwargs, model_kwargs=dict(depth=g.depth, width=g.width))))
    f = settings.similarity_settings("features", profile)
    out.append(_workload("06_feature_similarity", Grid(
        name="features", description=f"{f.model}, CKA and filters", model=f.model, dataset=f.dataset,
        methods=f.methods, batch_sizes=[f.batch_size], lrs=[f.lr], seeds=f.seeds, steps=f.steps,
        data_kwargs=f.data_kwargs, model_kwargs=f.model_kwargs)))
    r = settings.similarity_settings("random_labels", profile)
    for run in r.runs:
        n = min(TRAIN_SIZE[r.dataset], run.data_kwargs.get("max_train", math.inf))
        out.append(_workload("07_random_labels", Grid(
            name=run.label.replace(" ", "_"), model=run.model, dataset=r.dataset, methods=r.methods,
            batch_sizes=[run.batch_size], lrs=[run.lr], seeds=r.seeds if run.seeds is None else run.seeds,
            steps=run.epochs * math.ceil(n / run.batch_size), model_kwargs=run.model_kwargs,
            data_kwargs=run.data_kwargs, description=run.label)))
    return out


def _workload(notebook: str, grid: Grid) -> Workload:
    shape, classes = example_shape(grid)  # text: byte-level, so the vocabulary is 256
    return Workload(notebook, grid, shape, classes)


def _selected(run: str, notebooks) -> bool:
    """Whether the notebook of ``run`` (``<stem>`` or ``<stem>[<value>]``) is among ``notebooks``."""
    return notebooks is None or run.split("[")[0] in notebooks


def plan(profile: str = "full", sustained_flops: float = DEFAULT_SUSTAINED_FLOPS,
         notebooks: list[str] | None = None, study: str | None = None) -> pd.DataFrame:
    """One row per workload: runs, training FLOPs and GPU-hours at ``sustained_flops`` FLOP/s,
    then a total row. Notebooks that train no grid (:data:`UNPLANNED_NOTEBOOKS`) are listed
    without FLOPs. ``notebooks``: the names (stems) of the notebooks to plan (None: all); ``study``:
    notebook 01's, if one is given (:func:`workloads`)."""
    if not sustained_flops > 0:
        raise ValueError(f"sustained_flops must be > 0 FLOP/s, got {sustained_flops!r}")
    rows = []
    for w in workloads(profile, study):
        if not _selected(w.notebook, notebooks):
            continue
        with torch.device("meta"):  # shapes only: counts the FLOPs, allocates nothing
            flops = grid_flops(w.grid, w.input_shape, w.num_classes)["flops"]
        rows.append(dict(notebook=w.notebook, workload=w.grid.description or w.grid.name,
                         dataset=w.grid.dataset, runs=len(w.grid.points()), flops=flops,
                         gpu_hours=flops / sustained_flops / 3600))
    for nb, what in UNPLANNED_NOTEBOOKS.items():
        if (NOTEBOOKS_DIR / f"{nb}.ipynb").is_file() and _selected(nb, notebooks):
            rows.append(dict(notebook=nb, workload=what, dataset="", runs=0, flops=float("nan"),
                             gpu_hours=float("nan")))
    columns = ["notebook", "workload", "dataset", "runs", "flops", "gpu_hours"]
    table = pd.DataFrame(rows, columns=columns).sort_values("notebook", kind="stable").reset_index(drop=True)
    total = dict(notebook="total", workload=f"at {sustained_flops / 1e12:g} TFLOP/s sustained (assumed)",
                 dataset="", runs=int(table["runs"].sum()), flops=table["flops"].sum(),
                 gpu_hours=table["gpu_hours"].sum())
    return pd.concat([table, pd.DataFrame([total])], ignore_index=True)


def data_sources(profile: str, data_dirs: dict | None, notebooks: list[str] | None = None,
                 study: str | None = None) -> dict:
    """{notebook run: (data set, path)} for the notebook runs that read a data set from a path, among
    ``notebooks`` (names; None: all). A run is named by its notebook, or ``<notebook>[<study>]``
    for notebook 01's runs (:func:`workloads`; ``study``: its study, if one is given)."""
    data_dirs = dict(data_dirs or {})
    unknown = sorted(set(data_dirs) - set(DATA_SETS))
    if unknown:
        raise ValueError(f"unknown data set(s) {', '.join(unknown)} in data_dirs; valid: {', '.join(DATA_SETS)}")
    return {w.notebook: (w.grid.dataset, data_dirs.get(w.grid.dataset))
            for w in workloads(profile, study) if w.grid.dataset in DATA_SETS and _selected(w.notebook, notebooks)}


def check(profile: str = "full", data_dirs: dict | None = None, out_dir="results", *, min_devices: int = 1,
          min_free_gb: float = DEFAULT_MIN_FREE_GB, sustained_flops: float = DEFAULT_SUSTAINED_FLOPS,
          with_plan: bool = True, notebooks: list[str] | None = None, study: str | None = None) -> Report:
    """All checks, then the plan. ``data_dirs`` maps a data set (cifar10 | imagenet | text) to its
    path; ``min_devices=0`` skips the CUDA check; ``notebooks`` (names, e.g. ``["05_gradient_similarity"]``)
    limits the data checks and the plan to those notebooks (None: all); ``study``: notebook 01's
    study, if one is given (:func:`workloads`)."""
    problems, n = check_cuda(min_devices) if min_devices > 0 else ([], torch.cuda.device_count())
    problems += check_data(data_sources(profile, data_dirs, notebooks, study), profile)
    problems += check_output(out_dir, min_free_gb)
    table = plan(profile, sustained_flops, notebooks, study) if with_plan else pd.DataFrame()
    return Report(problems=problems, plan=table, cuda_devices=n)


def format_plan(table: pd.DataFrame) -> str:
    shown = table.assign(flops=table["flops"].map(lambda v: "" if math.isnan(v) else f"{v:.3g}"),
                         gpu_hours=table["gpu_hours"].map(lambda v: "" if math.isnan(v) else f"{v:.2f}"))
    return shown.to_string(index=False)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m paper_repro.preflight", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="full", choices=settings.PROFILES)
    p.add_argument("--data-dir", action="append", default=[], metavar="DATASET=PATH",
                   help=f"where a data set is ({' | '.join(DATA_SETS)}); repeat for each")
    p.add_argument("--out", default="results", help="output folder to check (default: results)")
    p.add_argument("--gpus", type=int, default=1, help="CUDA devices needed (0: skip the check)")
    p.add_argument("--min-free-gb", type=float, default=DEFAULT_MIN_FREE_GB)
    p.add_argument("--tflops", type=float, default=DEFAULT_SUSTAINED_FLOPS / 1e12,
                   help="assumed sustained TFLOP/s per GPU for the GPU-hour estimate (default: 100)")
    p.add_argument("--no-plan", action="store_true", help="checks only")
    args = p.parse_args(argv)
    dirs = {}
    for item in args.data_dir:
        name, sep, path = item.partition("=")
        if not sep or not path:
            p.error(f"--data-dir {item!r} is not DATASET=PATH (DATASET: {', '.join(DATA_SETS)})")
        dirs[name] = path
    try:
        report = check(args.profile, dirs, args.out, min_devices=args.gpus, min_free_gb=args.min_free_gb,
                       sustained_flops=args.tflops * 1e12, with_plan=not args.no_plan)
    except ValueError as e:
        p.error(str(e))
    if not args.no_plan:
        print(format_plan(report.plan))
    for line in report.problems:
        print(f"problem: {line}", file=sys.stderr)
    print(f"{len(report.problems)} problem(s); {report.cuda_devices} CUDA device(s)"
          + ("" if report.ok else "; fix the above before starting"), file=sys.stderr)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
