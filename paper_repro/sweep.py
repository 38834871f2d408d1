"""Grids of training runs: resumable, shardable, parallel, with divergence recorded.

A :class:`Grid` is one model on one data set crossed with methods x batch sizes x
learning rates x seeds. Its results live in a *store*, a folder::

    results/<grid name>/grid.json               the grid definition
    results/<grid name>/points/<point id>.csv   one file per finished point

A point file holds the point's per-step records (``step``, ``examples``, ``final_loss``,
``eval_loss``, ``eval_acc``, ``wall_time``) with its configuration, ``status``
(``finished`` or ``diverged``) and the per-example FLOPs of :func:`paper_repro.cost.step_cost`
(``total_flops_pe``, ``critical_path_flops_pe``, ``fill_flops_pe``) as columns, so the
analysis is a pure function of the table. It is written to a temporary file in the same
folder and ``os.replace``-d into place: a point file is complete or absent, never half
written (temporary files are dot files ending in ``.tmp``, never read as results; those
left by killed processes of this host are deleted on the next run). A rerun skips the
point ids already present, so a sweep killed at any moment (Ctrl-C, SIGKILL, a lost node)
resumes without losing or duplicating a run. Ctrl-C stops a sweep at once, workers
included (exit status 130 from the CLI, one line saying how many points are saved); a
sweep killed outright takes its workers with it (each exits when its parent is gone).

A point id is ``<method>-b<batch>-lr<lr>-s<seed>-<hash>``, the hash taken over every
setting that changes the run (not ``data_dir`` or ``device``: the same point may run on
machines that keep the data in different places).

``run_sweep(grid, root, workers=N, shard=(i, n))`` runs the pending points of shard ``i``
of ``n`` (point ``j`` of the grid's fixed order belongs to shard ``j % n``), in-process or
in ``N`` spawned worker processes (one GPU each through ``CUDA_VISIBLE_DEVICES`` when the
device is CUDA, one CPU thread each otherwise). ``load_results(root)`` concatenates the
point files into one DataFrame.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import multiprocessing as mp
import os
import signal
import socket
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
from tqdm import std as tqdm_std
from tqdm.auto import tqdm

from . import cost, train

RECORD_COLUMNS = ("step", "examples", "final_loss", "eval_loss", "eval_acc", "wall_time")
CONFIG_COLUMNS = ("sweep", "point_id", "model", "dataset", "method", "batch_size", "lr", "seed", "steps",
                  "status", "num_modules", "total_flops_pe", "critical_path_flops_pe", "fill_flops_pe")
STATUSES = ("finished", "diverged")


@dataclass
class Grid:
    """One model x data set, swept over methods x batch sizes x learning rates x seeds.

    Each point trains ``steps_for(batch_size)`` steps: ``steps``, or, when ``examples`` is
    set, ``ceil(examples / batch_size)`` clipped to ``[min_steps, steps]`` (so small
    batches take more steps and large batches do not cost a fortune)."""

    name: str
    model: str
    dataset: str
    methods: list
    batch_sizes: list
    lrs: list
    seeds: list = field(default_factory=lambda: [0])
    steps: int = 200
    examples: int | None = None
    min_steps: int = 1
    model_kwargs: dict = field(default_factory=dict)
    data_kwargs: dict = field(default_factory=dict)
    optimizer: str = "adam"
    eval_every: int = 0
    eval_examples: int | None = 1000
    description: str = ""

    def validate(self) -> None:
        if not self.name or not all(c.isalnum() or c in "-_." for c in self.name):
            raise ValueError(f"grid name {self.name!r} must be non-empty and use only letters, digits, -, _ or .")
        for key in ("methods", "batch_sizes", "lrs", "seeds"):
            values = getattr(self, key)
            if not isinstance(values, (list, tuple)) or not values:
                raise ValueError(f"grid {key} must be a non-empty list, got {values!r}")
            if len(set(map(str, values))) != len(values):
                raise ValueError(f"grid {key} has repeated values: {values!r}")
        for b in self.batch_sizes:
            if not isinstance(b, int) or b < 1 or b & (b - 1):
                raise ValueError(f"batch sizes must be powers of 2, got {b!r} in {self.batch_sizes}")
        for key in ("steps", "min_steps") + (("examples",) if self.examples is not None else ()):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"grid {key} must be a positive integer, got {value!r}")
        for p in self.points():
            train.TrainConfig(**p["config"]).validate()

    def steps_for(self, batch_size: int) -> int:
        if self.examples is None:
            return self.steps
        return max(self.min_steps, min(self.steps, math.ceil(self.examples / batch_size)))

    def points(self) -> list[dict]:
        """Every point in a fixed order: ``{"point_id", "config"}`` (config = TrainConfig kwargs)."""
        out = []
        for method in self.methods:
            for batch in self.batch_sizes:
                for lr in self.lrs:
                    for seed in self.seeds:
                        config = dict(model=self.model, method=method, dataset=self.dataset,
                                      steps=self.steps_for(batch), batch_size=batch, lr=float(lr),
                                      optimizer=self.optimizer, seed=seed, eval_every=self.eval_every,
                                      eval_examples=self.eval_examples, model_kwargs=dict(self.model_kwargs),
                                      data_kwargs=dict(self.data_kwargs))
                        out.append({"point_id": point_id(config), "config": config})
        return out

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Grid:
        if not isinstance(d, dict):
            raise ValueError(f"a grid must be a JSON object (a dict) of Grid keys, got {type(d).__name__} {d!r:.80}")
        fields = dataclasses.fields(cls)
        known = {f.name for f in fields}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown grid keys {unknown}; valid: {sorted(known)}")
        required = [f.name for f in fields if f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING]
        missing = [k for k in required if k not in d]
        if missing:
            raise ValueError(f"grid lacks required keys {missing}; required: {required}")
        return cls(**d)


_DATASET_NAMES = {"digits": "sklearn digits", "cifar10": "CIFAR-10", "imagenet": "ImageNet", "text": "text"}


def describe(grid: Grid, data_source: str | None = None) -> tuple[str, str]:
    """(model label, data-set label) for figure titles, e.g. ``("MLP 6x512", "CIFAR-10
    (10000 train images, 16x16 px)")``; ``data_source`` names the text corpus."""
    kw, dk = grid.model_kwargs, grid.data_kwargs
    if grid.model == "mlp":
        model = f"MLP {kw.get('depth', 4)}x{kw.get('width', 256)}"
    elif grid.model == "transformer":
        model = f"Transformer {kw.get('n_layers', 4)} layers, d={kw.get('d_model', 128)}"
    else:
        model = grid.model.replace("resnet", "ResNet-") + (f" (width {kw['width']})" if "width" in kw else "")
    data = data_source if (grid.dataset == "text" and data_source) else _DATASET_NAMES.get(grid.dataset, grid.dataset)
    notes = []
    if dk.get("max_train"):
        notes.append(f"{dk['max_train']} train {'tokens' if grid.dataset == 'text' else 'images'}")
    if dk.get("image_size"):
        notes.append(f"{dk['image_size']}x{dk['image_size']} px")
    if grid.dataset == "text":
        notes.append(f"{dk.get('seq_len', 64)}-token windows")
    return model, data + (f" ({', '.join(notes)})" if notes else "")


def point_id(config: dict) -> str:
    """``<method>-b<batch>-lr<lr>-s<seed>-<8 hex>``: stable across machines and runs."""
    key = {k: v for k, v in config.items() if k not in ("data_dir", "device", "progress")}
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:8]
    return f"{config['method']}-b{config['batch_size']}-lr{config['lr']:g}-s{config['seed']}-{digest}"


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` -> ``(i, n)`` with ``0 <= i < n`` (shards are numbered from 0, like Slurm arrays)."""
    try:
        i, n = (int(part) for part in str(text).split("/"))
    except ValueError:
        raise ValueError(f"shard must look like i/n (e.g. 0/4), got {text!r}") from None
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"shard {text!r}: need n >= 1 and 0 <= i < n (shards count from 0)")
    return i, n


# ----------------------------------------------------------------------------- the store
_HOST = socket.gethostname().replace(".", "_")


def _tmp_path(path: Path) -> Path:
    """Where ``path`` is written before it is ``os.replace``-d into place: a dot file ending
    in ``.tmp`` (never taken for a result), named by host and process id."""
    return path.with_name(f".{path.name}.{_HOST}.{os.getpid()}.tmp")


def _is_tmp(path: Path) -> bool:
    return path.name.startswith(".") and path.name.endswith(".tmp")


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = _tmp_path(path)
    tmp.write_text(text)
    os.replace(tmp, path)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_tmp(root: str | os.PathLike) -> list[Path]:
    """Delete the temporary files that processes of this host killed mid-write left in the
    store (those of live processes, and of other hosts sharing the folder, are kept)."""
    removed = []
    for folder in (Path(root), Path(root) / "points"):
        for tmp in folder.glob(f".*.{_HOST}.*.tmp") if folder.is_dir() else ():
            pid = tmp.name[:-len(".tmp")].rsplit(".", 1)[-1]
            if pid.isdigit() and not _pid_alive(int(pid)):
                tmp.unlink(missing_ok=True)
                removed.append(tmp)
    return removed


def open_store(root: str | os.PathLike, grid: Grid) -> Path:
    """Create or reopen the store of ``grid`` at ``root``; a different grid there is an error."""
    root = Path(root)
    for parent in (root, *root.parents):
        if parent.exists() and not parent.is_dir():
            raise ValueError(f"sweep results folder {root} cannot be created: {parent} is a file, not a folder")
    spec = root / "grid.json"
    if spec.is_file():
        try:
            existing = json.loads(spec.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"cannot read {spec}: {err}") from None
        if existing != json.loads(json.dumps(grid.to_dict())):
            changed = sorted(k for k in set(existing) | set(grid.to_dict())
                             if existing.get(k) != json.loads(json.dumps(grid.to_dict())).get(k))
            raise ValueError(f"{root} holds a different sweep grid (differs in {changed}); "
                             f"use another results folder or grid name, or delete {root}")
    elif root.exists() and any(not _is_tmp(f) for f in root.iterdir()):
        raise ValueError(f"{root} is not empty and has no grid.json: not a sweep results folder")
    try:  # grid.json first: a store killed while being created is empty or has it
        root.mkdir(parents=True, exist_ok=True)
        if not spec.is_file():
            _atomic_write_text(spec, json.dumps(grid.to_dict(), indent=2, sort_keys=True) + "\n")
        (root / "points").mkdir(exist_ok=True)
    except OSError as err:
        raise ValueError(f"cannot write sweep results folder {root}: {err.strerror or err}") from None
    remove_stale_tmp(root)
    return root


def finished_ids(root: str | os.PathLike) -> set[str]:
    folder = Path(root) / "points"
    return {p.stem for p in folder.glob("*.csv")} if folder.is_dir() else set()


def load_grid(root: str | os.PathLike) -> Grid:
    spec = Path(root) / "grid.json"
    if not spec.is_file():
        raise ValueError(f"{root} is not a sweep results folder (no grid.json)")
    return Grid.from_dict(json.loads(spec.read_text()))


def load_results(root: str | os.PathLike) -> pd.DataFrame:
    """All finished points of the store at ``root`` as one DataFrame (records + config columns)."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"results folder {root} does not exist")
    load_grid(root)
    files = sorted((root / "points").glob("*.csv"))
    if not files:
        raise ValueError(f"results folder {root} has no finished points yet; run the sweep first")
    frames = [pd.read_csv(f) for f in files]
    for f, frame in zip(files, frames):
        missing = [c for c in CONFIG_COLUMNS + RECORD_COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"{f} is not a sweep point file (missing columns {missing})")
    return pd.concat(frames, ignore_index=True)


# ------------------------------------------------------------------------- one point
_DATA: dict = {}
_COSTS: dict = {}


def _data_for(config: dict, data_dir: str | None):
    key = json.dumps([config["dataset"], data_dir, config["data_kwargs"]], sort_keys=True)
    if key not in _DATA:
        _DATA[key] = train.load_data(train.TrainConfig(**config, data_dir=data_dir))
    return _DATA[key]


def run_point(point: dict, root: str, data_dir: str | None = None, device: str = "cpu",
              sweep_name: str = "") -> dict:
    """Train one point, write its file atomically, return a one-line summary dict."""
    config = point["config"]
    data = _data_for(config, data_dir)
    cfg = train.TrainConfig(**config, data_dir=data_dir, device=device, progress=False)
    learner = train.build_learner(cfg, data)
    key = json.dumps([config["model"], config["model_kwargs"], config["dataset"], config["data_kwargs"],
                      config["method"]], sort_keys=True)
    if key not in _COSTS:  # per example, so two examples of the real data measure it exactly
        x, y = data.batch("train", torch.arange(2))
        _COSTS[key] = cost.step_cost(learner, x.to(device), y.to(device))
    step_cost = _COSTS[key]
    t0 = time.perf_counter()
    result = train.train(cfg, data=data, learner=learner)
    records = result.records[list(RECORD_COLUMNS)].copy()
    meta = dict(sweep=sweep_name, point_id=point["point_id"], model=config["model"], dataset=config["dataset"],
                method=config["method"], batch_size=config["batch_size"], lr=config["lr"], seed=config["seed"],
                steps=config["steps"], status=result.status, num_modules=learner.num_modules,
                **step_cost.as_columns())
    for k, v in reversed(meta.items()):
        records.insert(0, k, v)
    path = Path(root) / "points" / f"{point['point_id']}.csv"
    tmp = _tmp_path(path)
    records.to_csv(tmp, index=False, float_format="%.6g")
    os.replace(tmp, path)
    return {"point_id": point["point_id"], "status": result.status, "seconds": time.perf_counter() - t0,
            "final_loss": float(records["final_loss"].iloc[-1])}


PARENT_POLL_S = 0.5  # how often a worker checks that the sweep that started it is alive


def _exit_when_orphaned(parent_pid: int) -> None:
    while True:
        time.sleep(PARENT_POLL_S)
        if os.getppid() != parent_pid:  # the sweep died (SIGKILL, OOM killer): nobody wants our result
            os._exit(1)


def _init_worker(gpu_ids, device: str, threads: int, parent_pid: int) -> None:
    # Ctrl-C reaches the whole process group: the parent stops the workers, they must not
    # each print a KeyboardInterrupt traceback. A parent killed outright (SIGKILL) cannot stop
    # them, so each worker also exits on its own within PARENT_POLL_S once its parent is gone.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True,
                     name="exit-when-orphaned").start()
    # tqdm's default lock is a multiprocessing semaphore, which a worker stopped by SIGTERM
    # cannot release (the resource tracker then warns of leaks); workers show no bars anyway
    tqdm_std.tqdm.set_lock(threading.RLock())
    if gpu_ids is not None:  # one GPU per worker, before anything touches CUDA
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu_ids.get(timeout=60))
    torch.set_num_threads(threads)


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_sweep`; the message says how many points are saved."""


# ------------------------------------------------------------------------- the sweep
@dataclass
class SweepReport:
    total: int                     # points in this shard
    skipped: int                   # already in the store
    finished: list = field(default_factory=list)
    diverged: list = field(default_factory=list)
    failed: list = field(default_factory=list)   # (point id, error) for runs that raised

    def __str__(self) -> str:
        return (f"{self.total} points: {self.skipped} already done, {len(self.finished)} finished, "
                f"{len(self.diverged)} diverged, {len(self.failed)} failed")


def run_sweep(grid: Grid, root: str | os.PathLike, *, workers: int = 1, shard: tuple[int, int] = (0, 1),
              device: str = "cpu", data_dir: str | None = None, progress: bool = True,
              threads: int | None = None) -> SweepReport:
    """Run the pending points of ``shard`` of ``grid``, saving each as it finishes.

    ``workers <= 1`` runs in this process; more spawn that many worker processes. A run
    that diverges is recorded (status ``diverged``); one that raises is listed in
    ``report.failed`` and retried by the next call. Ctrl-C stops at once (workers are
    terminated, the points they were running are lost and rerun next time) and raises
    :class:`SweepInterrupted` saying how many points are saved; saved points stay saved.
    Workers exit by themselves when this process is killed. ``threads``: torch CPU threads
    per run (workers default to 1; in-process runs keep the current setting unless given:
    on a busy small machine 1 is much faster than oversubscribed threads)."""
    grid.validate()
    train.check_device(device)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 0:
        raise ValueError(f"workers must be a non-negative integer, got {workers!r}")
    i, n = shard
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"shard {shard!r}: need n >= 1 and 0 <= i < n")
    root = open_store(root, grid)
    mine = [p for j, p in enumerate(grid.points()) if j % n == i]
    done = finished_ids(root)
    todo = [p for p in mine if p["point_id"] not in done]
    report = SweepReport(total=len(mine), skipped=len(mine) - len(todo))
    args = dict(root=str(root), data_dir=data_dir, device=device, sweep_name=grid.name)
    saved_threads = torch.get_num_threads()
    bar = None

    def record(pid, summary=None, error=None):
        if error is not None:
            report.failed.append((pid, error))
            tqdm.write(f"FAILED {pid}: {error}", file=sys.stderr)
        elif summary["status"] == "diverged":
            report.diverged.append(pid)
        else:
            report.finished.append(pid)
        bar.update(1)
        bar.set_postfix_str(f"{len(report.diverged)} diverged, {len(report.failed)} failed")

    try:
        if todo:  # load (and cache) the data here: a missing data set is one clear error, not N failures
            _data_for(todo[0]["config"], data_dir)
        if threads is not None and workers <= 1:
            torch.set_num_threads(threads)
        bar = tqdm(total=len(todo), desc=f"sweep {grid.name}" + (f" [{i}/{n}]" if n > 1 else ""), unit="pt",
                   disable=not progress)
        if workers <= 1 or not todo:
            for p in todo:
                try:
                    record(p["point_id"], run_point(p, **args))
                except (ValueError, RuntimeError, MemoryError) as e:
                    record(p["point_id"], error=f"{type(e).__name__}: {e}")
        else:
            _run_in_workers(todo, args, workers, device, threads, record)
    except KeyboardInterrupt:
        saved = len(finished_ids(root) & {p["point_id"] for p in mine})
        raise SweepInterrupted(f"{saved} of {len(mine)} points are saved in {root}; "
                               "run the same command again to resume") from None
    finally:
        if bar is not None:
            bar.close()
        torch.set_num_threads(saved_threads)
    return report


@contextlib.contextmanager
def _sigint_ignored_by_children():
    """Processes started inside start with SIGINT ignored (an ignored signal stays ignored
    across exec), so a Ctrl-C while they are still importing torch cannot make each print a
    traceback. Starting them takes milliseconds; outside the main thread, a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _run_in_workers(todo, args, workers, device, threads, record) -> None:
    ctx = mp.get_context("spawn")
    gpu_ids = None
    if str(device).startswith("cuda"):
        gpu_ids = ctx.Queue()
        count = torch.cuda.device_count()
        for w in range(workers):
            gpu_ids.put(w % count)
        args = dict(args, device="cuda")
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                               initargs=(gpu_ids, device, threads or 1, os.getpid()))
    try:
        with _sigint_ignored_by_children():  # submit starts the workers
            futures = {pool.submit(run_point, p, **args): p["point_id"] for p in todo}
        for fut in as_completed(futures):
            err = fut.exception()
            record(futures[fut], None if err else fut.result(),
                   error=None if err is None else f"{type(err).__name__}: {err}")
    except BaseException:
        # Ctrl-C (or any error here): drop the queued points and stop the running ones now
        # rather than wait for them to finish; their files are never half written.
        running = list((getattr(pool, "_processes", None) or {}).values())  # shutdown forgets them
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in running:
            proc.terminate()
        raise
    finally:
        pool.shutdown(wait=True)


# ------------------------------------------------------------------------------- CLI
def add_cli(subparsers):
    """``paper-repro sweep STUDY [--profile P] | --grid FILE  [--results DIR] [--workers N] [--shard i/n]``."""
    from . import profiles

    p = subparsers.add_parser("sweep", help="run a resumable grid of training runs (compute-efficiency study)")
    p.add_argument("study", nargs="?", choices=profiles.STUDIES,
                   help="a built-in compute-efficiency grid (or give --grid)")
    p.add_argument("--profile", default="quick", choices=profiles.PROFILES,
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
    p.set_defaults(func=_cmd_sweep)
    return p


def _cmd_sweep(args) -> int:
    from . import profiles

    if (args.study is None) == (args.grid is None):
        raise ValueError("give exactly one of STUDY (choices: " + ", ".join(profiles.STUDIES) + ") or --grid FILE")
    if args.grid is not None:
        try:
            grid = Grid.from_dict(json.loads(Path(args.grid).read_text()))
        except (OSError, json.JSONDecodeError, TypeError) as e:
            raise ValueError(f"cannot read grid file {args.grid}: {e}") from None
    else:
        grid = profiles.compute_grid(args.study, args.profile)
    try:
        report = run_sweep(grid, Path(args.results) / grid.name, workers=args.workers,
                           shard=parse_shard(args.shard), device=args.device, data_dir=args.data_dir,
                           progress=not args.no_progress, threads=args.threads)
    except SweepInterrupted as stop:
        print(f"interrupted: {stop}", file=sys.stderr)
        return 130
    print(report)
    return 1 if report.failed else 0
