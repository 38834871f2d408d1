"""Running a sweep: pending points of a shard, in-process or in spawned worker processes.

``run_sweep(grid, root, workers=N, shard=(i, n))`` runs the pending points of shard ``i``
of ``n`` (point ``j`` of the grid's fixed order belongs to shard ``j % n``), in-process or
in ``N`` spawned worker processes (one GPU each through ``CUDA_VISIBLE_DEVICES`` when the
device is CUDA, one CPU thread each otherwise). A rerun skips the point ids already in the
store, so a sweep killed at any moment (Ctrl-C, SIGKILL, a lost node) resumes without
losing or duplicating a run; a point that was running resumes from its checkpoint (saved
every ``CHECKPOINT_EVERY_S`` seconds, :mod:`paper_repro.checkpoint`) with the records of an
uninterrupted run. Ctrl-C or SIGTERM stops a sweep at once, workers included; a
sweep killed outright (SIGKILL) takes its workers with it (each exits when its parent is gone).
"""
from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from pathlib import Path
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field

import torch
from tqdm import std as tqdm_std
from tqdm.auto import tqdm

from .. import checkpoint, cost, datafiles, signals, train
from ..hardware import MACHINE_COLUMNS, machine_columns
from .grid import Grid
from .store import (OPTIONAL_RECORD_COLUMNS, RECORD_COLUMNS, adopt_points, check_writable, damaged_points,
                    finished_ids, open_store, partial_path, set_aside, write_point)

CHECKPOINT_EVERY_S = 60.0  # a point stopped mid-run resumes from its last checkpoint, at most this old

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
    partial = partial_path(root, point["point_id"])
    result = train.train(cfg, data=data, learner=learner, checkpoint=partial, checkpoint_every_s=CHECKPOINT_EVERY_S)
    columns = list(RECORD_COLUMNS) + [c for c in OPTIONAL_RECORD_COLUMNS if config.get("eval_every_examples")]
    records = result.records[columns].copy()
    meta = dict(sweep=sweep_name, point_id=point["point_id"], model=config["model"], dataset=config["dataset"],
                method=config["method"], batch_size=config["batch_size"], lr=config["lr"], seed=config["seed"],
                steps=config["steps"], status=result.status, num_modules=learner.num_modules,
                **step_cost.as_columns(), **machine_columns(device))
    for k, v in reversed(meta.items()):
        records.insert(0, k, v)
    write_point(records, root, point["point_id"])
    checkpoint.remove(partial)
    return {"point_id": point["point_id"], "status": result.status, "seconds": time.perf_counter() - t0,
            "final_loss": float(records["final_loss"].iloc[-1])}


def point_machines(df) -> "pd.DataFrame":
    """One row per point of a sweep table (:func:`~paper_repro.sweep.load_results`): its
    ``hardware`` and ``torch_version`` as the point recorded them (:func:`run_point` records
    both), ``"not recorded"`` for points written before points recorded their machine."""
    import pandas as pd
    cols = [c for c in ("point_id", "method", "batch_size", "lr", "seed") if c in df.columns]
    out = df.groupby("point_id", sort=True).first().reset_index()
    for c in MACHINE_COLUMNS:
        out[c] = out[c].fillna("not recorded") if c in out.columns else "not recorded"
    return out[[*cols, *MACHINE_COLUMNS]]


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
    datafiles.show_progress_bars(False)   # nor does decoding a data set (the sweep has decoded it once)
    if gpu_ids is not None:  # one GPU per worker, before anything touches CUDA
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu_ids.get(timeout=60))
    torch.set_num_threads(threads)


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during :func:`run_sweep`; the message says how many points are saved."""


# ------------------------------------------------------------------------- the sweep
@dataclass
class SweepReport:
    total: int                     # points in this shard
    skipped: int                   # already in the store
    finished: list = field(default_factory=list)
    diverged: list = field(default_factory=list)
    failed: list = field(default_factory=list)   # (point id, error) for runs that raised
    reused: dict = field(default_factory=dict)   # {other store: points copied from it} (counted in skipped)
    damaged: dict = field(default_factory=dict)  # {damaged point file: where it was moved}; trained again

    def __str__(self) -> str:
        reused = "".join(f", {n} of them copied from {src}" for src, n in self.reused.items())
        damaged = f" ({len(self.damaged)} damaged point files set aside and trained again)" if self.damaged else ""
        return (f"{self.total} points: {self.skipped} already done{reused}, {len(self.finished)} finished, "
                f"{len(self.diverged)} diverged, {len(self.failed)} failed{damaged}")


@signals.sigterm_as_interrupt()  # SIGTERM takes the Ctrl-C path: workers stopped, saved points kept
def run_sweep(grid: Grid, root: str | os.PathLike, *, workers: int = 1, shard: tuple[int, int] = (0, 1),
              device: str = "cpu", data_dir: str | None = None, progress: bool = True,
              threads: int | None = None, reuse=()) -> SweepReport:
    """Run the pending points of ``shard`` of ``grid``, saving each as it finishes.

    ``reuse``: other stores whose finished points with this grid's point ids are copied in
    first instead of being trained again (the same id is the same run).

    ``workers <= 1`` runs in this process; more spawn that many worker processes. A run
    that diverges is recorded (status ``diverged``); one that raises is listed in
    ``report.failed`` and retried by the next call. Ctrl-C or SIGTERM stops at once (workers are
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
    root, mine, todo, report = _pending(grid, root, shard, reuse)
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
            with datafiles.progress_bars(progress):
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


def _pending(grid: Grid, root, shard: tuple[int, int], reuse) -> tuple[Path, list, list, SweepReport]:
    """Open the store and find the shard's points still to train: (store, the shard's points,
    those to train, the report so far). Points of ``reuse`` stores are copied in first; a damaged
    point file is set aside (and named) so that its point is trained again."""
    i, n = shard
    root = open_store(root, grid)
    mine = [p for j, p in enumerate(grid.points()) if j % n == i]
    reused = adopt_points(root, [p["point_id"] for p in mine], reuse)
    damaged = damaged_points(root, [p["point_id"] for p in mine])
    damaged_ids = {f.name.removesuffix(".gz").removesuffix(".csv") for f in damaged}
    done = finished_ids(root) - damaged_ids
    todo = [p for p in mine if p["point_id"] not in done]
    if todo:  # before anything trains: a read-only store fails now, in one line
        check_writable(root)
    moved = {}
    for f, problem in damaged.items():
        moved[f] = set_aside(root, f)
        print(f"damaged point file {f} {problem}: moved to {moved[f]}; the point is trained again",
              file=sys.stderr, flush=True)
    return root, mine, todo, SweepReport(total=len(mine), skipped=len(mine) - len(todo), reused=reused,
                                         damaged=moved)


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
