"""Faults: a sweep or benchmark killed or interrupted mid-run loses nothing finished.

Each test starts the real command (``python -m paper_repro ...``) as a subprocess in its own
session (process group), injects the fault with ``os.kill`` while a run is in progress, and
checks the store, the exit status and stderr. Resuming reruns the *same* command in-process
(``cli.main``), which saves a second torch import. The grid: a 2x32 MLP on digits, SGD,
methods backprop and greedy x learning rates 0.05 (about a second of training) and 1e9
(diverges within a few steps, so every test also sees diverged runs recorded mid-sweep).
See docs/reliability.md.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from paper_repro import cli, sweep

if not Path("/proc/self/stat").exists():
    pytest.skip("needs Linux /proc to find worker processes", allow_module_level=True)

STEPS = 2000
GRID = dict(name="faults", model="mlp", dataset="digits", model_kwargs=dict(depth=2, width=32),
            methods=["backprop", "greedy"], batch_sizes=[16], lrs=[0.05, 1e9], optimizer="sgd", steps=STEPS,
            eval_examples=100)
IDS = [p["point_id"] for p in sweep.Grid(**GRID).points()]  # backprop 0.05, backprop 1e9, greedy 0.05, greedy 1e9
START_TIMEOUT = 120  # a cold start imports torch: seconds on a loaded 2-core machine


def _sweep_argv(tmp_path, *extra):
    grid_file = tmp_path / "grid.json"
    grid_file.write_text(json.dumps(GRID))
    return ["sweep", "--grid", str(grid_file), "--results", str(tmp_path / "results"), "--threads", "1", *extra]


def _start(argv, tmp_path):
    """``python -m paper_repro ARGV`` in a new session, SIGINT at its default (a shell may have
    started the tests with SIGINT ignored, which Python would inherit); stdout/stderr to files."""
    out, err = open(tmp_path / "stdout.txt", "w"), open(tmp_path / "stderr.txt", "w")
    proc = subprocess.Popen([sys.executable, "-m", "paper_repro", *argv], stdout=out, stderr=err,
                            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    out.close()
    err.close()
    return proc


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def _wait_for(what, condition, proc, timeout=START_TIMEOUT):
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"the command ended (status {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.05)


def _points(tmp_path):
    return tmp_path / "results" / "faults" / "points"


def _saved(tmp_path):
    """{point id: (mtime_ns, bytes)} of the point files (temporary files are dot files ending in .tmp)."""
    return {f.name.removesuffix(".csv.gz"): (f.stat().st_mtime_ns, f.read_bytes())
            for f in _points(tmp_path).glob("*.csv.gz")}


def _cpu_seconds(pid):
    """CPU time (user + system) the process has used so far."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def _wait_mid_point(tmp_path, proc, done=2):
    """Wait until ``done`` points are saved (backprop at both rates), then until the sweep has
    computed for 0.3 s of CPU time on the next (greedy at lr 0.05, about a second long): CPU
    time, not wall time, so a loaded machine that runs the sweep slowly still lands mid-point."""
    _wait_for(f"{done} saved points", lambda: len(_saved(tmp_path)) >= done, proc)
    start = _cpu_seconds(proc.pid)
    _wait_for("0.3 s of CPU time into the next point", lambda: _cpu_seconds(proc.pid) - start >= 0.3, proc)


def _check_complete(tmp_path):
    """Every point file in the store is a whole run: parses, has every column, and ends at the
    last step (finished) or at the step where the loss went non-finite (diverged)."""
    files = sorted(_points(tmp_path).glob("*.csv.gz"))
    df = sweep.load_results(tmp_path / "results" / "faults") if files else pd.DataFrame()
    for pid, run in df.groupby("point_id"):
        assert run["step"].tolist() == list(range(1, len(run) + 1)), pid
        status = run["status"].iloc[0]
        if status == "finished":
            assert len(run) == STEPS and run["final_loss"].notna().all(), pid
        else:
            assert status == "diverged" and run["lr"].iloc[0] == 1e9 and len(run) < STEPS, pid
    return df


def _resume_and_check(tmp_path, argv, before, stopped_at, capsys):
    """Rerun the same command to the end: every point once, the saved ones untouched, the others new."""
    assert cli.main(argv) == 0
    assert "0 failed" in capsys.readouterr().out
    after = _saved(tmp_path)
    assert sorted(after) == sorted(IDS)
    for pid, (mtime, content) in before.items():
        assert after[pid] == (mtime, content), f"{pid} was rewritten by the rerun"
    for pid in set(IDS) - set(before):
        assert after[pid][0] >= stopped_at, f"{pid} was not rerun"
    df = _check_complete(tmp_path)
    assert not df.duplicated(["point_id", "step"]).any()
    assert df.groupby("point_id")["status"].first().to_dict() == {
        IDS[0]: "finished", IDS[1]: "diverged", IDS[2]: "finished", IDS[3]: "diverged"}
    assert not list(_points(tmp_path).glob(".*.tmp"))  # a killed writer's leftovers are cleaned up


# ------------------------------------------------------------------------------- SIGKILL
def test_sweep_killed_mid_point_resumes_without_loss_or_duplicates(tmp_path, capsys):
    argv = _sweep_argv(tmp_path, "--no-progress")
    proc = _start(argv, tmp_path)
    try:
        _wait_mid_point(tmp_path, proc)
        stopped_at = time.time_ns()
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        _kill_group(proc)
    before = _saved(tmp_path)
    assert set(IDS[:2]) <= set(before) and IDS[2] not in before  # killed while greedy lr=0.05 ran
    _check_complete(tmp_path)
    _resume_and_check(tmp_path, argv, before, stopped_at, capsys)


def _children(pid):
    """Pids of the processes whose parent is ``pid``."""
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def _alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has exited; only its parent's wait is missing


def _wait_all_gone(pids, timeout):
    deadline = time.monotonic() + timeout
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def test_workers_die_with_a_killed_sweep(tmp_path):
    """SIGKILL of the sweep alone (not its group: the OOM killer, ``kill -9 PID``): the
    workers notice and exit; nothing half written is left as a result."""
    proc = _start(_sweep_argv(tmp_path, "--no-progress", "--workers", "2"), tmp_path)
    try:
        _wait_for("saved point", lambda: len(_saved(tmp_path)) >= 1, proc)
        kids = _children(proc.pid)
        assert len(kids) >= 2, f"expected 2 workers, found children {kids}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        left = _wait_all_gone(kids, timeout=30)
        assert not left, f"processes {left} outlived the killed sweep by 30 s"
    finally:
        _kill_group(proc)
    _check_complete(tmp_path)


# -------------------------------------------------------------------------------- Ctrl-C
RESUME = "run the same command again to resume"


def _assert_clean_interrupt(proc, t_signal, tmp_path, message):
    rc = proc.wait(timeout=30)
    took = time.monotonic() - t_signal
    err = (tmp_path / "stderr.txt").read_text()
    assert rc == 130, err
    assert took < 30, f"took {took:.1f} s to stop after Ctrl-C"
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    last = re.split(r"[\r\n]", err.strip())[-1]
    assert re.fullmatch(message, last), err
    return err


def test_ctrl_c_stops_the_sweep_saves_finished_points_and_resumes(tmp_path, capsys):
    argv = _sweep_argv(tmp_path)  # with the progress bar, as a user runs it
    proc = _start(argv, tmp_path)
    try:
        _wait_mid_point(tmp_path, proc)
        t_signal, stopped_at = time.monotonic(), time.time_ns()
        os.kill(proc.pid, signal.SIGINT)
        _assert_clean_interrupt(proc, t_signal, tmp_path, r"interrupted: 2 of 4 points are saved in \S+; " + RESUME)
    finally:
        _kill_group(proc)
    before = _saved(tmp_path)
    assert sorted(before) == sorted(IDS[:2])
    _check_complete(tmp_path)
    _resume_and_check(tmp_path, argv, before, stopped_at, capsys)


def test_ctrl_c_in_a_terminal_stops_sweep_and_workers(tmp_path):
    """A terminal's Ctrl-C reaches the whole process group: the sweep exits 130 with one line,
    the workers print no tracebacks and are gone; the points they were running are not saved."""
    proc = _start(_sweep_argv(tmp_path, "--no-progress", "--workers", "2"), tmp_path)
    try:
        _wait_for("saved point", lambda: len(_saved(tmp_path)) >= 1, proc)
        kids = _children(proc.pid)
        t_signal = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        _assert_clean_interrupt(proc, t_signal, tmp_path, r"interrupted: [1-3] of 4 points are saved in \S+; " + RESUME)
        assert not _wait_all_gone(kids, timeout=5)
    finally:
        _kill_group(proc)
    assert 1 <= len(_check_complete(tmp_path).groupby("point_id")) <= 3


def test_ctrl_c_stops_the_overhead_bench_and_prints_what_it_measured(tmp_path):
    proc = _start(["bench", "overhead", "--model-kwargs", '{"depth": 2, "width": 32, "in_dim": 64}',
                   "--batch-size", "16", "--steps", "20", "--repeats", "100000", "--threads", "1"], tmp_path)
    try:
        _wait_for("finished repetition", lambda: re.search(
            r"\| *[1-9]\d*/100000", (tmp_path / "stderr.txt").read_text()), proc)
        t_signal = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        _assert_clean_interrupt(proc, t_signal, tmp_path, r"interrupted: [1-9]\d* of 100000 repetitions done; "
                                                          r"the numbers above are from those")
    finally:
        _kill_group(proc)
    out = (tmp_path / "stdout.txt").read_text()
    assert "plain PyTorch loop" in out and "learner (backprop)" in out and "ratio learner/plain" in out
    done = int(re.search(r"(\d+) interleaved repetitions", out).group(1))
    assert 1 <= done < 100000


# --------------------------------------------------------------- leftovers of killed writers
def test_leftovers_of_a_killed_writer_are_cleaned_and_never_block_a_resume(tmp_path):
    """A sweep killed while writing leaves a temporary dot file: the next run deletes those of
    dead processes of this host, keeps those of live processes and of other hosts, and a store
    killed while being created (only a temporary grid.json in it) still opens."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    grid = sweep.Grid(**GRID)
    root = tmp_path / "faults"
    root.mkdir()
    (root / f".grid.json.{sweep.store._HOST}.{dead.pid}.tmp").write_text('{"name": ')  # killed at creation
    sweep.open_store(root, grid)
    assert sorted(f.name for f in root.iterdir()) == ["grid.json", "points"]
    names = {"dead": f".{IDS[0]}.csv.{sweep.store._HOST}.{dead.pid}.tmp", "alive": f".{IDS[1]}.csv.{sweep.store._HOST}."
             f"{os.getpid()}.tmp", "other host": f".{IDS[2]}.csv.elsewhere.{dead.pid}.tmp"}
    for name in names.values():
        (root / "points" / name).write_text("step,exam")  # half a file
    assert sweep.finished_ids(root) == set()
    sweep.open_store(root, grid)
    assert sorted(f.name for f in (root / "points").iterdir()) == sorted([names["alive"], names["other host"]])
