"""The GPU self-check, run here on CPU: every piece that can run without a GPU runs for
real (gloo processes for the pipeline), and the report machinery (one process per piece,
time limits, JSON) is exercised end to end."""
import dataclasses
import json

import pytest
import torch

from paper_repro import selfcheck
from paper_repro.distributed.planning import prepare

pytestmark = pytest.mark.timeout(300)


def test_environment_and_overhead_on_cpu():
    env = selfcheck.run_piece("environment", "cpu")
    assert env["status"] == "pass" and env["numbers"]["torch"] == torch.__version__
    r = selfcheck.run_piece("overhead", "cpu")
    assert r["status"] == "pass", r["error"]
    assert r["numbers"]["device"] == "cpu" and r["numbers"]["repeats"] == 3
    assert r["numbers"]["ratio_min"] <= r["numbers"]["ratio"] <= r["numbers"]["ratio_max"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_asked_for_without_a_gpu_fails_with_a_reason():
    r = selfcheck.run_piece("environment", "cuda")
    assert r["status"] == "fail" and "sees no GPU" in r["error"] and "--gpus all" in r["error"]


def test_pipeline_and_memory_with_gloo():
    r = selfcheck.run_piece("pipeline", "cpu")
    assert r["status"] == "pass", r["error"]
    n = r["numbers"]
    assert n["backend"] == "gloo" and n["stages"] == 2
    for schedule in ("local", "1f1b-recompute"):
        assert n[schedule]["samples_per_s"] > 0 and len(n[schedule]["memory_per_stage"]) == 2
    assert selfcheck.baseline(r)["status"] == "pass"
    one_gpu = dict(r, numbers={k: v for k, v in n.items() if k != "1f1b-recompute"} | {"stages": 1})
    skipped = selfcheck.baseline(one_gpu)
    assert skipped["status"] == "skip" and "1 GPU(s) here" in skipped["error"]
    mem = selfcheck.memory(r, "cpu")
    assert mem["status"] == "skip" and "allocator" in mem["error"]
    stages = mem["numbers"]["stages"]
    for row, st in zip(stages, n["local"]["memory_per_stage"]):
        # the meta-device accounting the GPU's peak is checked against counts what the run metered
        assert row["accounted_saved_for_backward"] == st["saved_for_backward"] > 0
        assert row["accounted_bytes"] > row["params"] > 0 and row["optimizer"] == 2 * row["params"]  # Adam


def test_memory_verdict_on_cuda_numbers():
    cut = [[0, 1], [2, 3]]
    accounted = [st["peak_bytes"] for st in selfcheck.local_accounting(2, cut, "cuda")]
    stage = {"saved_for_backward": 0, "params": 100, "grads": 100, "optimizer": 200, "method": "cuda"}
    fake = {"piece": "pipeline", "status": "skip", "error": None, "numbers": {"stages": 2, "local": {
        "cut": cut, "memory_per_stage": [dict(stage, peak_bytes=int(1.5 * accounted[0])),
                                         dict(stage, peak_bytes=10 * accounted[1])]}}}
    mem = selfcheck.memory(fake, "cuda")
    assert mem["status"] == "fail"
    assert f"stage 1: measured peak {10 * accounted[1]} B / accounted {accounted[1]} B = 10.00" in mem["error"]
    assert [round(row["ratio"], 2) for row in mem["numbers"]["stages"]] == [1.5, 10.0]
    failed = {"piece": "pipeline", "status": "fail", "error": "TimeoutError: x", "numbers": {}}
    assert selfcheck.memory(failed, "cuda")["status"] == "skip"


def test_bf16_training_learns_on_cpu():
    r = selfcheck.run_piece("bf16", "cpu")
    assert r["status"] == "pass", r["error"]
    for label in ("float32", "bf16"):
        assert r["numbers"][label]["last_loss"] < r["numbers"][label]["first_loss"]
    assert r["numbers"]["float32"]["last_loss"] != r["numbers"]["bf16"]["last_loss"]  # autocast did act


def test_notebook_runs_through_papermill_on_cpu():
    r = selfcheck.run_piece("notebook", "cpu")
    assert r["status"] == "pass", r["error"]
    assert r["numbers"]["notebook"] == selfcheck.NOTEBOOK and r["numbers"]["figures"]


def test_command_writes_the_report_and_times_out_pieces(tmp_path, capsys):
    out = tmp_path / "report.json"
    rc = selfcheck.main(["--device", "cpu", "--only", "environment", "--json", str(out), "--time-limit", "120"])
    assert rc == 0  # the piece itself ran in a child process: python -m paper_repro.selfcheck --piece ...
    report = json.loads(out.read_text())
    assert report["ok"] and [p["piece"] for p in report["pieces"]] == ["environment"]
    assert report["pieces"][0]["numbers"]["torch"] == torch.__version__
    assert "self-check passed" in capsys.readouterr().out
    # one second is not enough to even start a piece: it is killed and reported, not waited for
    slow = selfcheck.selfcheck("cpu", time_limit=1, pieces=["bf16"])
    assert not slow["ok"] and slow["pieces"][0]["error"].startswith("timed out after 1 s")
    with pytest.raises(ValueError, match="unknown piece.*'gpu-burn'.*valid: environment"):
        selfcheck.selfcheck("cpu", pieces=["gpu-burn"])
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        selfcheck.selfcheck("tpu")


@pytest.mark.parametrize("stages", [1, 2, 4, 8])
def test_pipeline_configs_fit_any_number_of_gpus(stages):
    """What the pipeline piece would launch on 1, 2, 4 or 8 GPUs is a valid cut (checked on CPU)."""
    configs = selfcheck.pipeline_configs("cuda", stages)
    assert [c.schedule for c in configs] == ["local"] + (["1f1b-recompute"] if stages > 1 else [])
    for cfg in configs:
        assert cfg.device == "cuda" and cfg.validate() is cfg
        plan = prepare(dataclasses.replace(cfg, device="cpu")).stages
        assert len(plan.modules) == stages


def test_every_piece_gets_a_floor_of_time_while_time_is_left(monkeypatch):
    # a share of a short limit (5% of 40 s) is less than a first CUDA start takes
    limits = {}

    def fake(name, device, limit):
        limits[name] = limit
        return {"piece": name, "status": "pass", "seconds": 0.0, "numbers": {}, "error": None}

    monkeypatch.setattr(selfcheck, "_in_subprocess", fake)
    report = selfcheck.selfcheck("cpu", time_limit=40, pieces=("environment", "overhead"))
    assert report["ok"]
    assert limits["environment"] >= selfcheck.MIN_PIECE_S > 40 * selfcheck.SHARE["environment"]
    assert limits["overhead"] <= 40


def test_one_gpu_still_times_a_two_stage_cut_on_the_gpu(monkeypatch):
    """With one GPU the pipeline runs as one stage, which needs no cut; the piece times a
    two-stage cut on that GPU anyway, so a lent single GPU checks the measured cut too."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    ran, timed = [], []
    monkeypatch.setattr(selfcheck, "run_pipeline", lambda configs, **kw: ran.extend(configs) or [
        {"schedule": c.schedule, "samples_per_s": 1.0, "busy_fraction_per_stage": [1.0],
         "memory_per_stage": [{}], "stage_plan": {"blocks": [[0, 1, 2, 3]]}} for c in configs])
    monkeypatch.setattr(selfcheck, "chunk_cut", lambda cfg, spec: timed.append(cfg) or [1])
    numbers = selfcheck.pipeline("cuda")
    assert [c.stages for c in ran] == [1] and numbers["two_stage_cut_timed_on_device"] == [1]
    assert [(c.device, c.stages, c.cut) for c in timed] == [("cuda", 2, "time")]
