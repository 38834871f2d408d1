"""The cluster recipes in cluster/: a sweep's shards run as the tasks of an array job (each task
runs cluster/sweep.sbatch itself, as Slurm would, with SLURM_ARRAY_TASK_ID / _COUNT set), all into
one results store, and the notebook step after them reads that store without training."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from paper_repro import cli, commands, notebooks, sweep
from paper_repro.sweep.store import point_files

REPO = Path(__file__).resolve().parent.parent
SWEEP = REPO / "cluster" / "sweep.sbatch"
NOTEBOOK = REPO / "cluster" / "notebook.sbatch"
SHARDS = 3
# 8 points of a tiny MLP on sklearn digits: shard 1 of 3 holds points 1, 4 and 7
GRID = dict(name="cluster", model="mlp", dataset="digits", model_kwargs=dict(depth=2, width=16),
            methods=["backprop", "greedy"], batch_sizes=[8, 32], lrs=[1e-2, 3e-2], steps=30, eval_examples=50)
MEASURED = ["wall_time"]  # seconds on the clock: the only column two identical runs may differ in


def _grid() -> sweep.Grid:
    return sweep.Grid(**GRID)


def _task_env(results: Path, grid_file: Path, task: int, count: int = SHARDS) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SHARD_"))}
    env.update(SLURM_ARRAY_TASK_ID=str(task), SLURM_ARRAY_TASK_COUNT=str(count), SLURM_ARRAY_TASK_MIN="0",
               GRID=str(grid_file), RESULTS=str(results), DEVICE="cpu", THREADS="1", PYTHON=sys.executable,
               OMP_NUM_THREADS="1")
    return env


def _start_task(results: Path, grid_file: Path, task: int, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:   # each task in its own session, as on its own node: killed as a group
        return subprocess.Popen(["bash", str(SWEEP)], cwd=REPO, env=_task_env(results, grid_file, task),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=30)


def _wait_all(procs, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    return [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]


def _store_frame(store: Path) -> pd.DataFrame:
    """Every point file of ``store`` as stored, in point-id order, the clock readings left out."""
    df = sweep.load_results(store)
    assert df[MEASURED].notna().all().all() and (df["wall_time"] >= 0).all()
    return df.drop(columns=MEASURED).sort_values(["point_id", "step"]).reset_index(drop=True)


def _shard_ids(i: int, n: int = SHARDS) -> set[str]:
    return {p["point_id"] for j, p in enumerate(_grid().points()) if j % n == i}


@pytest.fixture(scope="module")
def unsharded(tmp_path_factory) -> pd.DataFrame:
    """The same grid swept in one process, in a store of its own."""
    root = tmp_path_factory.mktemp("unsharded") / "cluster"
    report = sweep.run_sweep(_grid(), root, progress=False, threads=1)
    assert len(report.finished) == 8 and not report.failed
    return _store_frame(root)


@pytest.fixture()
def grid_file(tmp_path) -> Path:
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(GRID))
    return path


@pytest.mark.timeout(240)
def test_array_tasks_fill_one_store_with_exactly_the_unsharded_sweep(tmp_path, grid_file, unsharded):
    results = tmp_path / "shared"
    procs = []
    try:
        procs = [_start_task(results, grid_file, i, tmp_path / f"task{i}.log") for i in range(SHARDS)]
        codes = _wait_all(procs, 180)
    finally:
        for p in procs:
            _kill_group(p)
    logs = [(tmp_path / f"task{i}.log").read_text() for i in range(SHARDS)]
    assert codes == [0] * SHARDS, logs
    for i, log in enumerate(logs):   # each task ran its own shard, every point of it once
        assert f"--shard {i}/{SHARDS} " in log
        n = len(_shard_ids(i))
        assert f"{n} points: 0 already done, {n} finished, 0 diverged, 0 failed" in log, log
    store = results / "cluster"
    assert sum(len(_shard_ids(i)) for i in range(SHARDS)) == 8   # the shards partition the grid
    assert sweep.finished_ids(store) == {p["point_id"] for p in _grid().points()}
    assert len(point_files(store)) == 8 and not list(store.rglob("*.tmp"))
    pd.testing.assert_frame_equal(_store_frame(store), unsharded)


@pytest.mark.timeout(300)
def test_a_task_killed_mid_shard_and_run_again_completes_the_store_identically(tmp_path, grid_file, unsharded):
    results = tmp_path / "shared"
    store = results / "cluster"
    mine = _shard_ids(1)
    procs = []
    try:
        procs = [_start_task(results, grid_file, i, tmp_path / f"task{i}.log") for i in range(SHARDS)]
        deadline = time.monotonic() + 180
        while not (sweep.finished_ids(store) & mine):   # task 1 has saved a point of its shard: kill it
            assert procs[1].poll() is None and time.monotonic() < deadline, (tmp_path / "task1.log").read_text()
            time.sleep(0.02)
        os.killpg(procs[1].pid, signal.SIGKILL)
        assert procs[1].wait(timeout=30) == -signal.SIGKILL
        saved = sweep.finished_ids(store) & mine
        assert 1 <= len(saved) < len(mine)   # killed mid-shard: some of its points saved, not all
        assert _wait_all([procs[0], procs[2]], 180) == [0, 0]
        assert sweep.finished_ids(store) & mine == saved   # nobody else runs shard 1's points
        # the array task run again (sbatch --array=1 ...): only the missing points are trained
        rerun = _start_task(results, grid_file, 1, tmp_path / "task1-again.log")
        procs.append(rerun)
        assert _wait_all([rerun], 180) == [0], (tmp_path / "task1-again.log").read_text()
    finally:
        for p in procs:
            _kill_group(p)
    left = len(mine) - len(saved)
    assert (f"{len(mine)} points: {len(saved)} already done, {left} finished, 0 diverged, 0 failed"
            in (tmp_path / "task1-again.log").read_text())
    assert sweep.finished_ids(store) == {p["point_id"] for p in _grid().points()}
    assert len(point_files(store)) == 8 and not list(store.rglob("*.tmp"))
    pd.testing.assert_frame_equal(_store_frame(store), unsharded)


# ------------------------------------------------------------ the scripts' command lines
def _argv_of(script: Path, env: dict, tmp_path: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run ``script`` with PYTHON standing in for the interpreter: it records the arguments."""
    stub = tmp_path / "python"
    stub.write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" > {tmp_path / "argv"}\n')
    stub.chmod(0o755)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SHARD_"))}
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, env={**clean, "PYTHON": str(stub), **env},
                          capture_output=True, text=True, timeout=60)
    argv = (tmp_path / "argv").read_text().splitlines() if (tmp_path / "argv").exists() else []
    return proc, argv


def test_sweep_script_counts_shards_from_the_arrays_first_index_and_takes_any_scheduler(tmp_path):
    # sbatch --array=1-4: task ids 1..4 are shards 0..3
    proc, argv = _argv_of(SWEEP, dict(SLURM_ARRAY_TASK_ID="3", SLURM_ARRAY_TASK_COUNT="4",
                                      SLURM_ARRAY_TASK_MIN="1", STUDY="resnet", DATA_DIR="/data/c10"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert argv == ["-m", "paper_repro", "sweep", "resnet", "--profile", "full", "--shard", "2/4", "--results",
                    "results", "--device", "cuda", "--workers", "1", "--no-progress", "--data-dir", "/data/c10"]
    proc, argv = _argv_of(SWEEP, dict(SHARD_INDEX="5", SHARD_COUNT="6", PROFILE="cpu"), tmp_path)  # e.g. PBS
    assert proc.returncode == 0 and argv[3:8] == ["mlp", "--profile", "cpu", "--shard", "5/6"]
    (tmp_path / "argv").unlink()
    proc, argv = _argv_of(SWEEP, {}, tmp_path)          # not an array task: refused, nothing run
    assert proc.returncode != 0 and "not an array task" in proc.stderr and argv == []


def test_notebook_script_reads_the_store_without_training(tmp_path, monkeypatch, capsys):
    env = dict(STUDY="resnet", PROFILE="full", RESULTS="shared/results")
    proc, argv = _argv_of(NOTEBOOK, env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert argv[:2] == ["-m", "paper_repro"]
    assert argv[2:] == ["notebooks", "run", "--profile", "full", "--only", "01_compute_efficiency",
                        "--device", "cpu", "--figures", f"{tmp_path}/figures", "--out", f"{tmp_path}/out/notebooks",
                        "-p", "results_dir", f"{tmp_path}/shared/results", "-p", "train_missing", "false",
                        "-p", "study", "resnet"]
    # those arguments: the notebook gets train_missing=False, and no GPU or data check stands in the way
    seen = []
    monkeypatch.setattr(notebooks, "run_notebooks", lambda **kw: seen.append(kw) or [])
    monkeypatch.setattr(commands.preflight, "check", lambda *a, **k: pytest.fail("preflight ran"))
    assert cli.main(argv[2:]) == 0
    [kw] = seen
    assert kw["only"] == ["01_compute_efficiency"] and kw["profile"] == "full"
    assert kw["parameters"]["study"] == "resnet"
    assert kw["parameters"]["train_missing"] is False
    assert kw["parameters"]["results_dir"] == f"{tmp_path}/shared/results"
    proc, argv = _argv_of(NOTEBOOK, dict(STUDY="resnet-imagenet"), tmp_path)
    assert proc.returncode == 2 and "no notebook reads study 'resnet-imagenet'" in proc.stderr
    # the deep-MLP study is notebook 01 with its study parameter
    proc, argv = _argv_of(NOTEBOOK, dict(STUDY="mlp-deep", PROFILE="cpu"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "01_compute_efficiency" in argv and argv[-3:] == ["-p", "study", "mlp-deep"]


def test_the_notebook_step_and_submit_refuse_the_quick_profile_which_reads_no_store(tmp_path):
    # at quick the notebooks ignore results_dir and train_missing: the step would train every point again
    proc, argv = _argv_of(NOTEBOOK, dict(STUDY="mlp", PROFILE="quick", RESULTS="shared/results"), tmp_path)
    assert proc.returncode == 2 and argv == []                      # nothing run
    assert proc.stderr.startswith("error: PROFILE=quick: the notebook step reads a sweep's store at PROFILE=cpu "
                                  "or full only") and proc.stderr.count("\n") == 1
    # submit.sh refuses before the sweep is submitted (a stand-in sbatch records any call)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "sbatch_calls"
    (bin_dir / "sbatch").write_text(f'#!/bin/bash\necho "$@" >> {calls}\necho 42\n')
    (bin_dir / "sbatch").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "STUDY": "mlp"}
    submit = REPO / "cluster" / "submit.sh"
    proc = subprocess.run(["bash", str(submit), "2"], cwd=tmp_path, env={**env, "PROFILE": "quick"},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "PROFILE=quick" in proc.stderr and not calls.exists()
    proc = subprocess.run(["bash", str(submit), "2"], cwd=tmp_path, env={**env, "PROFILE": "cpu"},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert calls.read_text().splitlines() == ["--parsable --array=0-1 " + str(REPO / "cluster" / "sweep.sbatch"),
                                              "--parsable --dependency=afterok:42 " + str(NOTEBOOK)]
