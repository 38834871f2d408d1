"""A stage that raises, is killed or hangs makes every other stage exit non-zero quickly with a
message naming it; bad combinations are refused before any process starts."""
import time

import pytest

from paper_repro.distributed.bench import run_pipeline
from paper_repro.distributed.comm import EXIT_FAILED, EXIT_PEER_FAILED
from paper_repro.distributed.launch import PipelineError
from paper_repro.distributed.stages import PipelineConfig

TINY = dict(model="mlp", model_kwargs={"depth": 4, "width": 16}, image_size=4, micro_batch=2, micro_batches=4,
            steps=2, warmup_steps=1)


def _fail(stages, fault, launch_kwargs=(), **kw):
    cfg = PipelineConfig(schedule="local", stages=stages, fault=fault, **{**TINY, **kw})
    t0 = time.monotonic()
    with pytest.raises(PipelineError) as info:
        run_pipeline(cfg, timeout=120, progress=False, **dict(launch_kwargs))
    return info.value, time.monotonic() - t0


def test_a_stage_that_raises_stops_the_others(tmp_path):
    err, _ = _fail(2, "raise@1:3")
    assert err.failed_stage == 1
    assert err.exit_codes == [EXIT_PEER_FAILED, EXIT_FAILED]
    assert "stage 1 failed: RuntimeError: injected fault at micro-batch 3" in str(err)
    assert "stopping because stage 1 failed" in err.logs[0]


def test_a_killed_stage_stops_the_others_within_60s():
    err, seconds = _fail(3, "kill@1:2")
    assert err.failed_stage == 1
    assert err.exit_codes[1] == -9 and err.exit_codes[0] == err.exit_codes[2] == EXIT_PEER_FAILED
    assert "stage 1 (pid" in str(err) and "killed by signal SIGKILL" in str(err)
    for rank in (0, 2):
        assert "stopping because stage 1" in err.logs[rank]
    assert seconds < 60  # includes the start-up of three interpreters


def test_without_the_launcher_heartbeats_name_the_killed_stage():
    # what happens on another node under torchrun: nobody reports the exit, the heartbeats do
    err, seconds = _fail(2, "kill@0:2", launch_kwargs={"report_exits": False}, heartbeat_timeout=3.0)
    assert err.exit_codes == [-9, EXIT_PEER_FAILED]
    assert "stopping because stage 0 stopped responding: no heartbeat" in err.logs[1]
    assert seconds < 60


def test_a_hung_stage_makes_its_neighbour_time_out_naming_it():
    err, seconds = _fail(2, "hang@1:2", timeout=5.0)
    # stage 0 cannot hand its activations to stage 1: its bounded wait ends and names stage 1
    assert err.exit_codes[0] == EXIT_FAILED
    assert "stage 0 failed: RuntimeError: sending to stage 1 failed" in str(err) and "Timed out" in str(err)
    assert err.exit_codes[1] == EXIT_PEER_FAILED  # the hung stage's watchdog ended it
    assert seconds < 60


def test_overlapping_across_a_stage_boundary_is_refused_before_launch():
    cfg = PipelineConfig(schedule="local", stages=2, method="overlapping", **TINY)
    with pytest.raises(ValueError, match=r"shares block \d+ between local module .* gradient message"):
        run_pipeline(cfg, progress=False)


@pytest.mark.parametrize("changes,match", [
    (dict(schedule="pipedream"), "unknown schedule 'pipedream'; valid: local, gpipe"),
    (dict(schedule="1f1b", micro_batches=1), "needs micro_batches >= stages"),
    (dict(schedule="ddp", micro_batches=3), "must be a multiple of stages"),
    (dict(stages=9), "stages=9 is more than the 4 local modules"),
    (dict(split=[0]), "split must list 1 increasing module indices"),
    (dict(fault="explode@1:2"), "unknown fault mode 'explode'"),
    (dict(dtype="int8"), "unknown dtype 'int8'"),
])
def test_bad_settings_are_refused_with_the_valid_choices(changes, match):
    cfg = PipelineConfig(**{**TINY, "method": "greedy", **changes})
    with pytest.raises(ValueError, match=match):
        run_pipeline(cfg, progress=False)
