"""SIGTERM is handled like Ctrl-C: every command saves what is finished, stops all of its child
processes and exits 143 (130 for Ctrl-C) with one line saying what happened. Each test starts
the real command (``python -m paper_repro ...``) as a subprocess, sends the signal to that
process alone with ``os.kill`` once work is under way, and checks the exit status, stderr,
the saved files and that no process it started outlives it."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pandas as pd
import psutil
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from paper_repro import signals, sweep

START_TIMEOUT = 120  # a cold start imports torch: seconds on a loaded 2-core machine
STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}
SAID = {signal.SIGINT: "interrupted", signal.SIGTERM: r"terminated \(SIGTERM\)"}


def _start(argv, tmp_path, env=None):
    out, err = open(tmp_path / "stdout.txt", "w"), open(tmp_path / "stderr.txt", "w")
    proc = subprocess.Popen([sys.executable, "-m", "paper_repro", *argv], stdout=out, stderr=err,
                            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    out.close()
    err.close()
    return proc


def _wait_for(what, condition, proc, timeout=START_TIMEOUT):
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"the command ended (status {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.05)


def _descendants(pid):
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _signal_and_check(proc, tmp_path, signum, message, kids):
    """Send ``signum`` to the command alone; check status, last stderr line, and that ``kids``
    (its descendants just before) are all gone."""
    t0 = time.monotonic()
    os.kill(proc.pid, signum)
    rc = proc.wait(timeout=60)
    took = time.monotonic() - t0
    err = (tmp_path / "stderr.txt").read_text()
    assert rc == STATUS[signum], err
    assert took < 30, f"took {took:.1f} s to stop"
    assert "Traceback" not in err, err
    last = re.split(r"[\r\n]", err.strip())[-1]
    assert re.fullmatch(SAID[signum] + message, last), err
    _, alive = psutil.wait_procs(kids, timeout=5)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"processes {[p.pid for p in alive]} outlived the command"
    return err


def _cleanup(proc):
    for p in _descendants(proc.pid) + [psutil.Process(proc.pid)] if proc.poll() is None else []:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait(timeout=30)


def test_exit_status_and_words_follow_the_signal_behind_an_interrupt():
    assert signals.exit_status(KeyboardInterrupt()) == 130
    assert signals.exit_status(signals.Terminated()) == 143
    try:
        try:
            raise signals.Terminated()
        except KeyboardInterrupt:
            raise sweep.SweepInterrupted("3 of 4 points are saved") from None
    except KeyboardInterrupt as wrapped:
        assert signals.exit_status(wrapped) == 143 and signals.describe(wrapped) == "terminated (SIGTERM)"
    assert signals.describe(KeyboardInterrupt()) == "interrupted"


# ---------------------------------------------------------------------------------- train
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_train_saves_the_finished_steps_to_out_on_a_signal(tmp_path, signum):
    out = tmp_path / "int.csv"
    proc = _start(["train", "--steps", "100000", "--eval-every", "0", "--model-kwargs", '{"depth": 2, "width": 16}',
                   "--out", str(out)], tmp_path)
    try:
        _wait_for("a progress bar past step 20", lambda: re.search(
            r"\| *([2-9]\d|\d{3,})/100000", (tmp_path / "stderr.txt").read_text()), proc)
        err = _signal_and_check(proc, tmp_path, signum,
                                r" after (\d+) of 100000 steps: the records of the \1 finished steps are "
                                rf"written to {re.escape(str(out))}", [])
    finally:
        _cleanup(proc)
    done = int(re.search(r"after (\d+) of", err).group(1))
    rec = pd.read_csv(out)
    assert rec["step"].tolist() == list(range(1, done + 1)) and done >= 20
    assert set(rec["status"]) == {"interrupted"} and rec["final_loss"].notna().all()
    assert not list(tmp_path.glob("*.tmp"))


# ---------------------------------------------------------------------------------- sweep
GRID = dict(name="sig", model="mlp", dataset="digits", model_kwargs=dict(depth=2, width=32),
            methods=["backprop", "greedy"], batch_sizes=[16], lrs=[0.05, 0.1], optimizer="sgd", steps=3000,
            eval_examples=100)


def test_sigterm_stops_the_sweep_and_its_workers_and_keeps_saved_points(tmp_path):
    grid_file = tmp_path / "grid.json"
    grid_file.write_text(json.dumps(GRID))
    points = tmp_path / "results" / "sig" / "points"
    proc = _start(["sweep", "--grid", str(grid_file), "--results", str(tmp_path / "results"), "--workers", "2",
                   "--no-progress"], tmp_path)
    try:
        _wait_for("a saved point", lambda: len(list(points.glob("*.csv.gz"))) >= 1, proc)
        kids = _descendants(proc.pid)
        assert len(kids) >= 2, kids  # two workers (and the resource tracker)
        _signal_and_check(proc, tmp_path, signal.SIGTERM,
                          r": [1-3] of 4 points are saved in \S+; run the same command again to resume", kids)
    finally:
        _cleanup(proc)
    saved = sweep.load_results(tmp_path / "results" / "sig")
    assert (saved.groupby("point_id")["step"].max() == GRID["steps"]).all()


# ---------------------------------------------------------------------------------- bench
def test_sigterm_stops_the_overhead_bench_and_prints_what_it_measured(tmp_path):
    proc = _start(["bench", "overhead", "--model-kwargs", '{"depth": 2, "width": 32, "in_dim": 64}',
                   "--batch-size", "16", "--steps", "20", "--repeats", "100000", "--threads", "1"], tmp_path)
    try:
        _wait_for("a finished repetition", lambda: re.search(
            r"\| *[1-9]\d*/100000", (tmp_path / "stderr.txt").read_text()), proc)
        _signal_and_check(proc, tmp_path, signal.SIGTERM,
                          r": [1-9]\d* of 100000 repetitions done; the numbers above are from those", [])
    finally:
        _cleanup(proc)
    assert "ratio learner/plain" in (tmp_path / "stdout.txt").read_text()


def test_sigterm_stops_the_pipeline_launcher_and_every_stage(tmp_path):
    proc = _start(["bench", "pipeline", "--stages", "2", "--model", "mlp", "--model-kwargs",
                   '{"depth": 4, "width": 32}', "--micro-batch", "4", "--micro-batches", "4", "--steps", "100000",
                   "--image-size", "6", "--timeout", "60", "--cut", "flops"], tmp_path)
    try:
        _wait_for("two training stages", lambda: re.search(r"\| *[1-9]\d*/", (tmp_path / "stderr.txt").read_text())
                  and len(_descendants(proc.pid)) >= 2, proc)
        kids = _descendants(proc.pid)
        _signal_and_check(proc, tmp_path, signal.SIGTERM, r": every stage process is stopped; no run had "
                          r"finished, so nothing is saved", kids)
    finally:
        _cleanup(proc)


# ------------------------------------------------------------------------------ notebooks
def test_sigterm_stops_the_notebook_batch_and_its_kernel(tmp_path):
    nb_dir = tmp_path / "nbs"
    nb_dir.mkdir()
    started = tmp_path / "b_slow_started"  # the slow cell touches it, then sleeps
    for name, body in (("a_quick", "print('done')"), ("b_slow", f"import pathlib, time\npathlib.Path({str(started)!r})"
                                                                 ".touch()\ntime.sleep(600)")):
        nb = new_notebook(cells=[new_code_cell('profile = "quick"\nfigures_dir = "f"',
                                               metadata={"tags": ["parameters"]}), new_code_cell(body)],
                          metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                   "language": "python"}})
        nbformat.write(nb, str(nb_dir / f"{name}.ipynb"))
    proc = _start(["notebooks", "run", "--notebooks-dir", str(nb_dir), "--out", str(tmp_path / "out"),
                   "--figures", str(tmp_path / "figs")], tmp_path)
    try:
        _wait_for("the slow notebook's sleeping cell", lambda: started.exists() and _descendants(proc.pid), proc)
        kids = _descendants(proc.pid)
        _signal_and_check(proc, tmp_path, signal.SIGTERM, r": stopped while running b_slow, whose kernel and "
                          r"processes are stopped; 1 of 2 notebooks had ended \(their figures are in \S+\)", kids)
    finally:
        _cleanup(proc)
    assert re.search(r"a_quick +[\d.]+ s  ok", (tmp_path / "stdout.txt").read_text())
