"""A stage that raises, is killed or hangs makes every other stage exit non-zero quickly with a
message naming it; a stage that cannot reach its peers at start-up fails within the start-up
timeout with one line saying what it tried to reach; bad combinations are refused before any
process starts."""
import dataclasses
import datetime
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from paper_repro import cli
from paper_repro.distributed import comm
from paper_repro.distributed.bench import run_pipeline
from paper_repro.distributed.comm import EXIT_FAILED, EXIT_PEER_FAILED
from paper_repro.distributed.launch import PipelineError
from conftest import inject_fault
from paper_repro.distributed import PipelineConfig

TINY = dict(model="mlp", model_kwargs={"depth": 4, "width": 16}, image_size=4, micro_batch=2, micro_batches=4,
            steps=2, warmup_steps=1)


def _fail(stages, fault, launch_kwargs=(), **kw):
    cfg = PipelineConfig(schedule="local", stages=stages, **{**TINY, **kw})
    t0 = time.monotonic()
    with pytest.MonkeyPatch.context() as mp, pytest.raises(PipelineError) as info:
        inject_fault(mp, fault)               # the stage processes inherit it
        run_pipeline(cfg, timeout=120, progress=False, **dict(launch_kwargs))
    return info.value, time.monotonic() - t0


@pytest.mark.parametrize("stages", [2, 3])
def test_a_stage_that_raises_stops_the_others_within_60s(stages):
    err, seconds = _fail(stages, "raise@1:1")
    others = [r for r in range(stages) if r != 1]
    assert err.failed_stage == 1
    assert err.exit_codes[1] == EXIT_FAILED and all(err.exit_codes[r] == EXIT_PEER_FAILED for r in others)
    assert str(err).startswith("pipeline failed: stage 1 failed: RuntimeError: injected fault after step 1")
    for rank in others:
        assert "stopping because stage 1 failed" in err.logs[rank]
    assert seconds < 60  # includes the start-up of the interpreters


@pytest.mark.parametrize("stages,via", [(2, "cli"), (3, "api")])
def test_a_killed_stage_stops_the_others_within_60s(stages, via, capsys, monkeypatch):
    others = [r for r in range(stages) if r != 1]
    if via == "api":
        err, seconds = _fail(stages, "kill@1:1")
        assert err.failed_stage == 1
        assert err.exit_codes[1] == -9 and all(err.exit_codes[r] == EXIT_PEER_FAILED for r in others)
        message, logs = str(err), err.logs
    else:  # paper-repro bench pipeline: exit status 1, the launcher's message on stderr
        inject_fault(monkeypatch, "kill@1:1")
        t0 = time.monotonic()
        code = cli.main(["bench", "pipeline", "--stages", str(stages), "--model", "mlp", "--model-kwargs",
                           '{"depth": 4, "width": 16}', "--image-size", "4", "--micro-batch", "2",
                           "--micro-batches", "4", "--steps", "2",
                           "--launch-timeout", "120", "--no-progress"])
        seconds = time.monotonic() - t0
        assert code == 1
        message = capsys.readouterr().err
        kept = re.findall(r"last lines of its log (\S+):", message)  # the CLI keeps a failed run's logs
        assert len(kept) == stages
        logs = [Path(path).read_text() for path in kept]
        shutil.rmtree(Path(kept[0]).parent)
        assert message.startswith("error: pipeline failed: stage 1 (pid")
        for rank in others:
            assert f"--- stage {rank} (exited with status {EXIT_PEER_FAILED})" in message
        assert "--- stage 1 (was killed by signal SIGKILL)" in message
    assert "stage 1 (pid" in message and "killed by signal SIGKILL" in message
    for rank in others:
        assert "stopping because stage 1" in logs[rank]
    assert seconds < 60


def test_without_the_launcher_heartbeats_name_the_killed_stage():
    # what happens on another node under torchrun: nobody reports the exit, the heartbeats do
    err, seconds = _fail(2, "kill@0:1", launch_kwargs={"report_exits": False}, heartbeat_timeout=3.0)
    assert err.exit_codes == [-9, EXIT_PEER_FAILED]
    assert "stopping because stage 0 stopped responding: no heartbeat" in err.logs[1]
    assert seconds < 60


def test_a_hung_stage_makes_its_neighbour_time_out_naming_it():
    err, seconds = _fail(2, "hang@1:0", timeout=5.0)
    # stage 0 cannot hand its activations to stage 1: its bounded wait ends and names stage 1
    assert err.exit_codes[0] == EXIT_FAILED
    assert "stage 0 failed: RuntimeError: sending to stage 1 failed" in str(err) and "Timed out" in str(err)
    assert err.exit_codes[1] == EXIT_PEER_FAILED  # the hung stage's watchdog ended it
    assert seconds < 60


def _stage_env(monkeypatch, rank, world, port, agent_store=False):
    for key, value in dict(RANK=rank, WORLD_SIZE=world, LOCAL_RANK=rank, MASTER_ADDR="127.0.0.1",
                           MASTER_PORT=port, TORCHELASTIC_USE_AGENT_STORE=agent_store).items():
        monkeypatch.setenv(key, str(value))
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)


def test_a_stage_whose_store_nobody_hosts_fails_within_the_init_timeout(monkeypatch, free_port):
    port = free_port  # nobody listens here
    _stage_env(monkeypatch, 1, 2, port)
    t0 = time.monotonic()
    with pytest.raises(comm.StartupError) as info:
        comm.init("cpu", timeout=60, init_timeout=2.0)
    seconds = time.monotonic() - t0
    assert seconds < 60  # the 2 s timeout, generously: a loaded machine may be slow to notice it
    message = str(info.value)
    assert f"could not reach the rendezvous store at 127.0.0.1:{port}" in message
    assert "rank 1 of world size 2" in message and "start-up timeout of 2 s" in message
    assert "Connection refused" in message and "\n" not in message


def test_a_stage_whose_peers_never_join_fails_within_the_init_timeout_naming_them(monkeypatch, free_port):
    port = free_port
    _stage_env(monkeypatch, 0, 3, port)  # stage 0 hosts the store; stages 1 and 2 never start
    t0 = time.monotonic()
    with pytest.raises(comm.StartupError) as info:
        comm.init("cpu", timeout=60, init_timeout=2.0)
    seconds = time.monotonic() - t0
    assert seconds < 60  # the 2 s timeout, generously: a loaded machine may be slow to notice it
    message = str(info.value)
    assert message.startswith("stage 0 (rank 0 of world size 3) waited 2 s (the start-up timeout) at the "
                              f"rendezvous store 127.0.0.1:{port}, but stage(s) 1, 2 never joined")


def test_a_stage_still_waiting_for_its_peers_stops_when_one_has_failed(monkeypatch):
    # the launcher hosts the store and records a stage that died before joining; the others stop
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=10))
    comm.report_failure(dist.PrefixStore("paper_repro/run/0/", master), "stage 1 (pid 1) exited with status 1")
    _stage_env(monkeypatch, 0, 2, master.port, agent_store=True)
    t0 = time.monotonic()
    with pytest.raises(comm.PeerFailed, match=r"^stage 1 \(pid 1\) exited with status 1$"):
        comm.init("cpu", timeout=60, init_timeout=600.0)
    assert time.monotonic() - t0 < 120  # long before the start-up timeout: the failure stopped it


def test_the_worker_alone_exits_1_with_one_line_naming_what_it_tried_to_reach(free_port):
    # one stage of a 2-stage run, started by hand (as under torchrun) with no stage 0 anywhere
    port = free_port
    env = {**os.environ, "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "OMP_NUM_THREADS": "1"}
    env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
    cmd = [sys.executable, "-m", "paper_repro.distributed.run", "--stages", "2", "--init-timeout", "2",
           "--model", "mlp", "--model-kwargs", '{"depth": 4, "width": 16}', "--image-size", "4", "--threads", "1"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    seconds = time.monotonic() - t0
    assert proc.returncode == EXIT_FAILED
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr  # no Python traceback, no C++ stack trace from c10d
    assert lines[0] == (f"error: stage 1 (rank 1 of world size 2) could not reach the rendezvous store at "
                        f"127.0.0.1:{port} (MASTER_ADDR:MASTER_PORT) within the start-up timeout of 2 s "
                        f"(last error: [Errno 111] Connection refused); is stage 0 (or torchrun) running there? "
                        f"Raise --init-timeout if it starts later")
    assert seconds < 2 + 90  # the timeout plus starting Python and importing torch on a loaded machine


def test_overlapping_across_a_stage_boundary_is_refused_before_launch():
    cfg = PipelineConfig(schedule="local", stages=2, method="overlapping", **TINY)
    with pytest.raises(ValueError, match=r"shares block \d+ between local module .* gradient message"):
        run_pipeline(cfg, progress=False)


def test_cuda_stages_need_a_gpu_each_before_any_process_starts(monkeypatch):
    import torch

    from paper_repro.distributed import launch as launcher
    cfg = PipelineConfig(schedule="local", stages=2, device="cuda", **TINY)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="torch.cuda.is_available\\(\\) is False"):
        launcher.launch([cfg], progress=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match="2 stage processes on device 'cuda' need 2 GPUs here .* 1 visible"):
        launcher.launch([cfg], progress=False)
    with pytest.raises(ValueError, match="need 2 GPUs here"):
        run_pipeline(dataclasses.replace(cfg, cut="time"), progress=False)
    with pytest.raises(ValueError, match="same device"):
        launcher.launch([cfg, PipelineConfig(schedule="local", stages=2, **TINY)], progress=False)


@pytest.mark.parametrize("changes,match", [
    (dict(schedule="pipedream"), "unknown schedule 'pipedream'; valid: local, gpipe"),
    (dict(schedule="1f1b", micro_batches=1), "needs micro_batches >= stages"),
    (dict(schedule="ddp", micro_batches=3), "must be a multiple of stages"),
    (dict(stages=9), "stages=9 is more than the 4 local modules"),
    (dict(cut_at=[0]), "cut_at must list 1 increasing module indices"),
    (dict(dtype="int8"), "unknown dtype 'int8'"),
    (dict(init_timeout=0), "init_timeout must be a positive number of seconds, got 0"),
])
def test_bad_settings_are_refused_with_the_valid_choices(changes, match):
    cfg = PipelineConfig(**{**TINY, "method": "greedy", **changes})
    with pytest.raises(ValueError, match=match):
        run_pipeline(cfg, progress=False)
