"""The results store of a sweep: a folder written so that no result is ever half written.

    <store>/grid.json               the grid definition
    <store>/points/<point id>.csv.gz   one gzipped CSV per finished point
    <store>/partial/<point id>.pt      the checkpoint of a point in progress (deleted when it finishes;
                                       never a result, and not for version control)

Files are written to a temporary dot file ending in ``.tmp`` in the same folder (named by
host and process id) and ``os.replace``-d into place: a point file is complete or absent.
Temporary files left by killed processes of this host are deleted when the store is
reopened; those of live processes, and of other hosts sharing the folder, are kept.
A point file damaged afterwards (truncated by a full disk, a copy cut short) is found by
:func:`check_point_file` when the sweep resumes, moved to ``<store>/damaged/`` and trained
again (:func:`set_aside`).
"""
from __future__ import annotations

import csv
import gzip
import json
import zlib
import os
import shutil
import socket
import sys
from pathlib import Path

import pandas as pd

from .grid import Grid

RECORD_COLUMNS = ("step", "examples", "final_loss", "eval_loss", "eval_acc", "wall_time")
CONFIG_COLUMNS = ("sweep", "point_id", "model", "dataset", "method", "batch_size", "lr", "seed", "steps",
                  "status", "num_modules", "total_flops_pe", "critical_path_flops_pe", "fill_flops_pe")
OPTIONAL_RECORD_COLUMNS = ("train_eval_loss",)  # present when the grid evaluates a training subset
STATUSES = ("finished", "diverged")

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
    for folder in (Path(root), Path(root) / "points", Path(root) / "partial"):
        for tmp in folder.glob(f".*.{_HOST}.*.tmp") if folder.is_dir() else ():
            pid = tmp.name[:-len(".tmp")].rsplit(".", 1)[-1]
            if pid.isdigit() and not _pid_alive(int(pid)):
                tmp.unlink(missing_ok=True)
                removed.append(tmp)
    return removed


def open_store(root: str | os.PathLike, grid: Grid) -> Path:
    """Create or reopen the store of ``grid`` at ``root``.

    A grid that only adds points to the store's (a learning rate added at an edge, a seed, a
    batch size) takes its place in ``grid.json``, and the change is printed: a point id is the
    whole training configuration, so every saved point keeps its meaning. Any other
    difference is an error, naming the keys that differ."""
    root = Path(root)
    for parent in (root, *root.parents):
        if parent.exists() and not parent.is_dir():
            raise ValueError(f"sweep results folder {root} cannot be created: {parent} is a file, not a folder")
    spec = root / "grid.json"
    if spec.is_file():
        try:  # through Grid, so that a grid.json written before a setting existed gets its default
            old = Grid.from_dict(json.loads(spec.read_text()))
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"cannot read {spec}: {err}") from None
        existing, wanted = (json.loads(json.dumps(g.to_dict())) for g in (old, grid))
        if existing != wanted:
            changed = sorted(k for k in set(existing) | set(wanted) if existing.get(k) != wanted.get(k))
            added = _added_points(old, grid)
            if added is None:
                raise ValueError(f"{root} holds a different sweep grid (differs in {changed}); "
                                 f"use another results folder or grid name, or delete {root}")
            _write_grid(spec, grid)
            print(f"{spec}: the grid gained {added} point(s) (changed: {', '.join(changed)}); "
                  "every point of the old grid is still in it", file=sys.stderr, flush=True)
    elif root.exists() and any(not _is_tmp(f) for f in root.iterdir()):
        raise ValueError(f"{root} is not empty and has no grid.json: not a sweep results folder")
    try:  # grid.json first: a store killed while being created is empty or has it
        root.mkdir(parents=True, exist_ok=True)
        if not spec.is_file():
            _write_grid(spec, grid)
        (root / "points").mkdir(exist_ok=True)
    except OSError as err:
        raise ValueError(f"cannot write sweep results folder {root}: {err.strerror or err}") from None
    remove_stale_tmp(root)
    return root


def _write_grid(spec: Path, grid: Grid) -> None:
    _atomic_write_text(spec, json.dumps(grid.to_dict(), indent=2, sort_keys=True) + "\n")


def _added_points(old: Grid, new: Grid) -> int | None:
    """How many points ``new`` adds to ``old``; None when ``new`` is not ``old`` plus points
    (it drops or changes one of them, or has another name)."""
    if old.name != new.name:
        return None
    old_ids = {p["point_id"] for p in old.points()}
    new_ids = {p["point_id"] for p in new.points()}
    return len(new_ids - old_ids) if old_ids <= new_ids else None


def point_files(root: str | os.PathLike) -> list[Path]:
    """The finished point files of the store at ``root`` (``<id>.csv.gz``, or ``<id>.csv``
    as stores written before compression have them), sorted."""
    folder = Path(root) / "points"
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if not _is_tmp(p) and p.name.endswith((".csv", ".csv.gz")))


def finished_ids(root: str | os.PathLike) -> set[str]:
    return {p.name.removesuffix(".gz").removesuffix(".csv") for p in point_files(root)}


def check_point_file(path: str | os.PathLike) -> str | None:
    """What is wrong with the point file at ``path`` (None: nothing): it must decompress to the
    end, start with a header holding every column a point has, hold at least one row and end
    with a whole row (a truncated plain CSV ends mid-row). Reads the file, parses no numbers."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as err:   # gzip.BadGzipFile is an OSError
        return f"cannot be read ({type(err).__name__}: {err})"
    lines = text.splitlines()
    if not lines:
        return "is empty"
    header = next(csv.reader([lines[0]]))
    missing = [c for c in CONFIG_COLUMNS + RECORD_COLUMNS if c not in header]
    if missing:
        return f"has no columns {missing}"
    if len(lines) < 2:
        return "has a header and no rows"
    if not text.endswith("\n") or len(next(csv.reader([lines[-1]]))) != len(header):
        return "ends in the middle of a row (truncated)"
    return None


def damaged_points(root: str | os.PathLike, ids) -> dict[Path, str]:
    """``{point file: what is wrong}`` over the store's finished points among ``ids``."""
    wanted = set(ids)
    out = {}
    for f in point_files(root):
        if f.name.removesuffix(".gz").removesuffix(".csv") in wanted:
            problem = check_point_file(f)
            if problem is not None:
                out[f] = problem
    return out


def set_aside(root: str | os.PathLike, path: Path) -> Path:
    """Move the damaged point file ``path`` to ``<root>/damaged/`` (kept for inspection, no longer
    a finished point); return where it went."""
    folder = Path(root) / "damaged"
    folder.mkdir(exist_ok=True)
    dest = folder / path.name
    n = 1
    while dest.exists():
        dest, n = folder / f"{path.name}.{n}", n + 1
    os.replace(path, dest)
    return dest


def check_writable(root: str | os.PathLike) -> None:
    """ValueError naming the store when a point file cannot be written into it (a read-only
    file system, no permission): found before a point trains, not after."""
    probe = _tmp_path(Path(root) / "points" / "write-check")
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ValueError(f"cannot write to sweep results folder {root}: {err.strerror or err}; "
                         "give a writable --results folder") from None


def adopt_points(root: str | os.PathLike, ids, sources) -> dict[str, int]:
    """Copy into the store at ``root`` the finished points among ``ids`` that it lacks and a
    store in ``sources`` holds; return ``{source: points copied}``. A point id hashes every
    setting of its run, so a file of that id anywhere is that run's result. Sources that do
    not exist are skipped."""
    have, copied = finished_ids(root), {}
    wanted = set(ids) - have
    for source in sources:
        if not wanted or not (Path(source) / "points").is_dir() or Path(source).resolve() == Path(root).resolve():
            continue
        for f in point_files(source):
            pid = f.name.removesuffix(".gz").removesuffix(".csv")
            if pid in wanted:
                dest = Path(root) / "points" / f.name
                tmp = _tmp_path(dest)
                shutil.copyfile(f, tmp)
                os.replace(tmp, dest)
                wanted.discard(pid)
                copied[str(source)] = copied.get(str(source), 0) + 1
    return copied


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
    files = point_files(root)
    if not files:
        raise ValueError(f"results folder {root} has no finished points yet; run the sweep first")
    frames = []
    for f in files:
        try:
            frames.append(pd.read_csv(f))
        except (OSError, EOFError, zlib.error, UnicodeDecodeError, pd.errors.ParserError,
                pd.errors.EmptyDataError) as err:
            raise ValueError(f"cannot read sweep point file {f}: {type(err).__name__}: {err}; run the sweep "
                             "again to set it aside and train the point again") from None
    for f, frame in zip(files, frames):
        missing = [c for c in CONFIG_COLUMNS + RECORD_COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"{f} is not a sweep point file (missing columns {missing})")
    return pd.concat(frames, ignore_index=True)


def progress_line(grid: Grid, root: str | os.PathLike, reuse=()) -> str:
    """Where a sweep of ``grid`` into the store at ``root`` stands, for the console before it
    starts: points saved, points another store (``reuse``) holds and will be copied, points
    to train and how many of those resume from a checkpoint in ``partial/``."""
    ids = [p["point_id"] for p in grid.points()]
    saved = finished_ids(root) & set(ids)
    copied = set().union(*(finished_ids(r) for r in reuse)) & set(ids) - saved
    todo = [i for i in ids if i not in saved and i not in copied]
    resuming = sum(partial_path(root, i).is_file() for i in todo)
    return (f"{len(saved)} of {len(ids)} points saved" + (f", {len(copied)} to copy" if copied else "")
            + f", {len(todo)} to train" + (f" ({resuming} resume from partial/)" if resuming else ""))


def partial_path(root: str | os.PathLike, point_id: str) -> Path:
    """Where the checkpoint of point ``point_id`` in progress is kept."""
    return Path(root) / "partial" / f"{point_id}.pt"


def write_point(records: pd.DataFrame, root: str | os.PathLike, point_id: str) -> Path:
    """Write one finished point's table into the store at ``root``, atomically."""
    path = Path(root) / "points" / f"{point_id}.csv.gz"
    tmp = _tmp_path(path)
    records.to_csv(tmp, index=False, float_format="%.6g", compression={"method": "gzip", "mtime": 0})
    os.replace(tmp, path)
    return path
