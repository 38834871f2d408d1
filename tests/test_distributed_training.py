"""Training on several processes (``paper-repro train --stages S``) against single-process training.

The local schedule trains exactly the single-process learner: its records and parameters are
bitwise those of ``train.train`` over the same samples in the same order (per-micro-batch updates
against training at the micro-batch size; ``local/M`` against gradient accumulation at the same
batch). Pipelined backprop and DDP equal single-process backprop at the same batch within float
rounding. A stop rule stops every process after the same update; a run stopped by SIGKILL or
SIGTERM and resumed ends as the uninterrupted run; the saved learner reloads."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from paper_repro import checkpoint, cli, train
from paper_repro import data as data_mod
from paper_repro.distributed import PipelineConfig
from paper_repro.distributed.fields import TrainingFields
from paper_repro.distributed.launch import PipelineError
from conftest import FAULT_ENV, inject_fault
from paper_repro.distributed.trainer import train_many, train_stages

NET = dict(model="mlp", model_kwargs={"depth": 4, "width": 16})
DIGITS = data_mod.load("digits")


def single(method: str, batch: int, steps: int, **kw) -> train.TrainResult:
    cfg = train.TrainConfig(**NET, method=method, dataset="digits", batch_size=batch, steps=steps, lr=3e-3,
                            progress=False, **kw)
    return train.train(cfg, data=DIGITS)


def stages(schedule="local", method="greedy", **kw) -> PipelineConfig:
    return PipelineConfig(**{**NET, **kw.pop("net", {})}, dataset="digits", schedule=schedule, method=method,
                          cut="blocks", threads=1, **{"stages": 2, "lr": 3e-3, **kw})


def without_time(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=["wall_time"]).reset_index(drop=True)


def same_parameters(saved: Path, learner, exact: bool = True) -> None:
    mine = checkpoint.load_learner(saved, DIGITS).state_dict()
    theirs = learner.state_dict()
    assert set(mine) == set(theirs)
    for k in theirs:
        if exact:
            assert torch.equal(mine[k], theirs[k]), k
        else:
            torch.testing.assert_close(mine[k], theirs[k], rtol=1e-4, atol=1e-5)


def test_local_on_two_processes_is_single_process_training_at_the_micro_batch(tmp_path):
    """Per-micro-batch updates: every row and parameter as ``train`` at batch 8, bitwise; the
    saved learner gives the accuracy the run reported."""
    run = train_stages(stages(micro_batch=8, micro_batches=4, steps=5),
                       TrainingFields(eval_every=10, eval_every_examples=64, save=str(tmp_path / "m.pt")),
                       progress=False)
    ref = single("greedy", 8, 20, eval_every=10, eval_every_examples=64)
    assert run.status == "finished" and len(run.records) == 20
    pd.testing.assert_frame_equal(without_time(run.records), without_time(ref.records), check_exact=True)
    assert run.records["wall_time"].is_monotonic_increasing
    same_parameters(tmp_path / "m.pt", ref.learner)
    reloaded = checkpoint.load_learner(tmp_path / "m.pt", DIGITS)
    assert train.evaluate(reloaded.net, DIGITS, "test", 2000) == (run.summary()["eval_loss"],
                                                                   run.summary()["eval_acc"])


def test_local_M_on_three_processes_is_gradient_accumulation_and_stops_every_stage_together():
    """``local/M`` steps once per step: ``train`` with 4 micro-batches of the same batch, bitwise,
    including the stop at the first training-subset evaluation at or below the target."""
    net = {"model_kwargs": {"depth": 6, "width": 16}}
    cfg = stages(net=net, stages=3, micro_batch=8, micro_batches=4, update_every=4, steps=40, lr=1e-2)
    run = train_stages(cfg, TrainingFields(eval_every=0, eval_every_examples=64, stop_loss=2.1), progress=False)
    ref = train.train(train.TrainConfig(model="mlp", **net, method="greedy", dataset="digits", batch_size=32,
                                        micro_batches=4, steps=40, lr=1e-2, eval_every=0, eval_every_examples=64,
                                        stop_loss=2.1, progress=False), data=DIGITS)
    assert len(ref.records) < 40                               # the target stops it early
    pd.testing.assert_frame_equal(without_time(run.records), without_time(ref.records), check_exact=True)
    assert run.records["train_eval_loss"].dropna().iloc[-1] <= 2.1 < run.records["train_eval_loss"].dropna().iloc[-2]


def test_runs_in_one_launch_each_equal_their_own_after_one_stops_early():
    """``train_many``: a local run stopped early by its target (its stages drop the receive posted
    ahead) leaves the processes clean for the next run of the launch."""
    fast, slow = (stages(micro_batch=8, micro_batches=4, steps=10, lr=lr) for lr in (3e-2, 1e-4))
    training = TrainingFields(eval_every=0, eval_every_examples=32, stop_loss=2.1)
    runs = train_many([fast, slow], training, progress=False)
    for run, lr in zip(runs, (3e-2, 1e-4)):
        ref = train.train(train.TrainConfig(**NET, method="greedy", dataset="digits", batch_size=8, steps=40, lr=lr,
                                            eval_every=0, eval_every_examples=32, stop_loss=2.1, progress=False),
                          data=DIGITS)
        pd.testing.assert_frame_equal(without_time(run.records), without_time(ref.records), check_exact=True)
    assert len(runs[0].records) < 40 == len(runs[1].records)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "ddp"])
def test_pipelined_backprop_and_ddp_are_single_process_backprop_at_the_same_batch(schedule, tmp_path):
    run = train_stages(stages(schedule, method=None, micro_batch=8, micro_batches=4, steps=6),
                       TrainingFields(eval_every=3, save=str(tmp_path / "m.pt")), progress=False)
    ref = single("backprop", 32, 6, eval_every=3, micro_batches=4)
    assert run.method == "backprop" and list(run.records.columns) == list(ref.records.columns)
    pd.testing.assert_frame_equal(without_time(run.records), without_time(ref.records), check_exact=False,
                                  rtol=1e-4, atol=1e-5)
    same_parameters(tmp_path / "m.pt", ref.learner, exact=False)


def test_a_run_killed_by_sigkill_resumes_to_the_uninterrupted_records_and_parameters(tmp_path, monkeypatch):
    folder = tmp_path / "ckpt"
    cfg = stages(micro_batch=8, micro_batches=4, steps=6)
    training = TrainingFields(eval_every=6, checkpoint=str(folder), checkpoint_every=5)
    inject_fault(monkeypatch, "kill@1:2")                      # stage 1 dies after step 2 (update 12)
    with pytest.raises(PipelineError) as info:
        train_stages(cfg, training, progress=False, timeout=120)
    assert info.value.failed_stage == 1
    monkeypatch.delenv(FAULT_ENV)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["update"] == 10                            # the last checkpoint before the kill

    # a checkpoint of another run, or one missing a rank's file, is refused naming what differs
    with pytest.raises(ValueError, match="lr is 0.003 there, 0.01 here"):
        train_stages(stages(micro_batch=8, micro_batches=4, steps=6, lr=1e-2),
                     TrainingFields(checkpoint=str(folder), resume=True), progress=False)
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    (broken / "step10" / "rank1.pt").unlink()
    with pytest.raises(ValueError, match="the checkpoint of rank 1 is missing: .*rank1.pt"):
        train_stages(cfg, TrainingFields(checkpoint=str(broken), resume=True), progress=False)

    resumed = train_stages(cfg, TrainingFields(eval_every=6, checkpoint=str(folder), checkpoint_every=5,
                                               resume=True, save=str(tmp_path / "m.pt")), progress=False)
    ref = single("greedy", 8, 24, eval_every=6)
    pd.testing.assert_frame_equal(without_time(resumed.records), without_time(ref.records), check_exact=True)
    same_parameters(tmp_path / "m.pt", ref.learner)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_sigterm_checkpoints_every_stage_exits_143_and_the_run_resumes(tmp_path):
    """SIGTERM to ``paper-repro train --stages 2``: every stage stops after a common step and
    checkpoints, the command writes the finished records and exits 143 with no process left;
    ``--resume`` then ends as the uninterrupted run."""
    folder, out = tmp_path / "ckpt", tmp_path / "r.csv"
    args = ["train", "--model-kwargs", json.dumps(NET["model_kwargs"]), "--method", "greedy", "--stages", "2",
            "--cut", "blocks", "--batch-size", "32", "--micro-batches", "4", "--steps", "400", "--lr", "3e-3",
            "--eval-every", "0", "--threads", "1", "--checkpoint", str(folder), "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "paper_repro", *args, "--no-progress"],
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 60
    while len(_children(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    stagepids = _children(proc.pid)
    time.sleep(4)                                              # the stages are training
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 143, err
    assert "SIGTERM" in err or "terminated" in err.lower()
    for pid in stagepids:                                      # no stage process left
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    done = pd.read_csv(out)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert 0 < manifest["update"] == len(done) < 1600 and manifest["update"] % 4 == 0   # after a whole step
    resumed_out = tmp_path / "resumed.csv"
    steps = manifest["update"] // 4 + 2
    args[args.index("400")] = str(steps)
    args[args.index(str(out))] = str(resumed_out)
    assert cli.main([*args, "--resume", "--no-progress"]) == 0
    ref = single("greedy", 8, 4 * steps, eval_every=0)
    resumed = pd.read_csv(resumed_out)[list(ref.records.columns)]
    pd.testing.assert_frame_equal(without_time(resumed), without_time(ref.records), check_exact=False,
                                  rtol=0, atol=1e-12)                       # CSV round trip of float64


@pytest.mark.parametrize("argv,match", [
    (["--stages", "9"], "stages=9 is more than the 4 blocks"),
    (["--stages", "2", "--batch-size", "60"], "--batch-size 60 must be a multiple of --micro-batches 16"),
    (["--stages", "2", "--schedule", "ddp", "--dp", "2"], "dp=2 replicates pipeline stages"),
    (["--stages", "2", "--save", "/proc/no/model.pt"], "cannot write --save '/proc/no/model.pt'"),
    (["--stages", "2", "--resume"], "--resume needs --checkpoint DIR"),
    (["--schedule", "1f1b"], "--schedule 1f1b applies to several processes"),
])
def test_bad_training_settings_exit_2_with_one_line(argv, match, capsys, tmp_path):
    code = cli.main(["train", "--model-kwargs", json.dumps(NET["model_kwargs"]), "--no-progress",
                     "--out", str(tmp_path / "r.csv"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and match in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r.csv").exists()
