"""Replays: every stage's compute of a real run, in its schedule's order, in one process per stage."""
import os
import warnings

import pytest

from paper_repro.distributed import PipelineConfig
from research.simulator_validation import replay as rp
from research.simulator_validation.replay import CPU_MALLOC_ENV
from paper_repro.simulate.engine import Costs

TINY = dict(model="mlp", model_kwargs={"depth": 4, "width": 16}, image_size=4)
CUT = ((0, 1), (2, 3))


def job(schedule: str, **kw) -> rp.Job:
    cfg = PipelineConfig(**TINY, stages=2, micro_batch=4, micro_batches=4, steps=1, warmup_steps=1, threads=1,
                         **kw)
    return rp.Job(cfg, schedule, CUT)


def test_each_stage_runs_its_schedules_actions_in_order():
    """The textbook orders on 2 stages and 4 micro-batches: 1F1B's first stage keeps two
    micro-batches in flight, GPipe runs every forward first, a local stage alternates."""
    assert rp._actions(job("1f1b"), 0) == [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("F", 3), ("B", 2),
                                           ("B", 3)]
    assert rp._actions(job("1f1b-recompute"), 1) == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2),
                                                     ("F", 3), ("B", 3)]
    assert rp._actions(job("gpipe"), 1) == [("F", m) for m in range(4)] + [("B", m) for m in range(4)]
    for schedule in ("local", "local/M"):
        assert rp._actions(job(schedule), 0) == [(k, m) for m in range(4) for k in ("F", "B")]


def test_replay_times_every_stage_of_every_job():
    jobs = [job("local", method="chunked-2"), job("local/M", method="chunked-2"), job("gpipe"),
            job("1f1b"), job("1f1b-recompute")]
    times = rp.replay(jobs, rounds=2, malloc_env={})
    assert set(times) == {j.key() for j in jobs}
    for stages in times.values():
        assert len(stages) == 2
        for t in stages:
            assert t.forward > 0 and t.backward > 0 and t.optimizer > 0


def test_replay_costs_keep_the_calibrated_split_and_links():
    calibrated = Costs([1.0, 1.0], [1.0, 3.0], [3.0, 1.0], [0.5, 0.5], [64.0])
    times = [rp.StageTimes(2.0, 8.0, 0.25), rp.StageTimes(3.0, 4.0, 0.75)]
    c = rp.replay_costs(times, calibrated)
    assert c.forward == [2.0, 3.0] and c.optimizer == [0.25, 0.75] and c.send_bytes == [64.0]
    assert (c.backward_input, c.backward_weight) == ([2.0, 3.0], [6.0, 1.0])
    # under recomputation the engine adds the forward to the backward itself
    c = rp.replay_costs(times, calibrated, recompute=True)
    assert [c.backward(v) for v in range(2)] == [6.0, 1.0]
    with pytest.raises(ValueError, match="3 replayed stages for 2 pieces"):
        rp.replay_costs([*times, times[0]], calibrated)
    # the input: the first stage's own drawing time where it was measured, else the calibrated one
    drawn = Costs([1.0, 1.0], [1.0, 3.0], [3.0, 1.0], [0.5, 0.5], [64.0], data=0.125)
    assert rp.replay_costs(times, drawn).data == 0.125
    assert rp.replay_costs([rp.StageTimes(2.0, 8.0, 0.25, 0.5), times[1]], drawn).data == 0.5


def test_bad_replays_are_refused_naming_the_value():
    with pytest.raises(ValueError, match="cannot replay schedule 'zbv'"):
        rp.replay([job("zbv")])
    with pytest.raises(ValueError, match="rounds must be a positive integer, got 0"):
        rp.replay([job("1f1b")], rounds=0)
    other = rp.Job(PipelineConfig(model="mlp", model_kwargs={"depth": 4, "width": 8}, image_size=4), "1f1b", CUT)
    with pytest.raises(ValueError, match="share the model"):
        rp.replay([job("1f1b"), other])
    assert rp.replay([]) == {}


def test_malloc_settings_apply_inside_and_are_restored(monkeypatch):
    key, other = list(CPU_MALLOC_ENV)[:2]
    monkeypatch.setenv(other, "123")
    monkeypatch.delenv(key, raising=False)
    with rp._env({key: "7"}):
        assert os.environ[key] == "7" and other not in os.environ      # the runs' settings, exactly
    assert key not in os.environ and os.environ[other] == "123"
    with rp._env(None):
        assert os.environ[other] == "123"                                # None: as the caller has them


def test_in_situ_times_split_each_stages_measured_phases_as_the_calibration_does():
    from research.simulator_validation.validate import against, in_situ_times
    calibrated = Costs([1.0, 1.0], [1.0, 0.0], [1.0, 2.0], [0.1, 0.1], [64.0])    # F 1, B 2 on both
    record = {"steps": 2, "micro_batches": 4, "optimizer_steps_per_step": 4,
              "per_stage": str([{"phases_s": {"forward_backward": 8 * 3.0, "optimizer": 8 * 0.5}},
                                {"phases_s": {"forward_backward": 8 * 6.0, "optimizer": 8 * 0.25}}])}
    times = in_situ_times(record, calibrated, recompute=False)
    assert [(t.forward, t.backward, t.optimizer) for t in times] == [(1.0, 2.0, 0.5), (2.0, 4.0, 0.25)]
    assert [t.data for t in times] == [0.0, None]       # no data phase recorded: none drawn
    drew = {**record, "per_stage": [{"phases_s": {"forward_backward": 24.0, "optimizer": 4.0, "data": 2.0}},
                                    {"phases_s": {"forward_backward": 48.0, "optimizer": 2.0}}]}
    assert in_situ_times(drew, calibrated, recompute=False)[0].data == 0.25   # per micro-batch
    # a run that timed its forwards apart gives its own split
    timed = {**record, "per_stage": [{"phases_s": {"forward_backward": 24.0, "optimizer": 4.0},
                                      "compute_split_s": {"forward": 4.0, "backward": 20.0}},
                                     {"phases_s": {"forward_backward": 48.0, "optimizer": 2.0}}]}
    first, second = in_situ_times(timed, calibrated, recompute=False)
    assert (first.forward, first.backward, second.forward, second.backward) == (0.5, 2.5, 2.0, 4.0)
    # recomputed: the forward runs twice (F + F + B = 4 calibrated), the backward time holds the second
    times = in_situ_times({**record, "optimizer_steps_per_step": 1}, calibrated, recompute=True)
    assert [(t.forward, t.backward, t.optimizer) for t in times] == [(0.75, 2.25, 2.0), (1.5, 4.5, 1.0)]
    with pytest.raises(ValueError, match="not both"):
        against([], replay_rounds=1, in_situ=True)
    with pytest.warns(UserWarning, match="CUDA run"):
        gpu = in_situ_times({**record, "device": "cuda"}, calibrated, recompute=False)
    assert [(t.forward, t.backward) for t in gpu] == [(1.0, 2.0), (2.0, 4.0)]
    evented = [{**st, "phase_clock": "CUDA events on the compute stream"} for st in drew["per_stage"]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")               # phases timed on the GPU's stream: no warning
        in_situ_times({**drew, "device": "cuda", "per_stage": evented}, calibrated, recompute=False)


def test_coupled_replays_wait_for_their_neighbours_and_finish():
    """Coupled, a stage waits for the action it depends on; the local schedule's first stage,
    which never waits, runs ahead into the next replay without stalling the second."""
    jobs = [job("local", method="chunked-2"), job("1f1b"), job("gpipe")]
    times = rp.replay(jobs, rounds=2, malloc_env={}, coupled=True)
    assert all(t.forward > 0 and t.backward > 0 for stages in times.values() for t in stages)


def test_a_missing_neighbour_action_times_out_naming_it(monkeypatch):
    import threading
    monkeypatch.setattr(rp, "BARRIER_TIMEOUT", 0.05)
    done = [0, 0, 0, 0]             # stage 0: forwards, backwards; stage 1: forwards, backwards
    sync = (threading.Condition(), done)
    with pytest.raises(TimeoutError, match="stage 1 waited 0 s for stage 0's forward of micro-batch 0"):
        rp._wait_for_neighbour(sync, 1, 2, "F", 0, local=False)
    with pytest.raises(TimeoutError, match="stage 0 waited 0 s for stage 1's backward of micro-batch 2"):
        rp._wait_for_neighbour(sync, 0, 2, "B", 2, local=False)
    done[0], done[3] = 1, 3
    rp._wait_for_neighbour(sync, 1, 2, "F", 0, local=False)       # done: no wait
    rp._wait_for_neighbour(sync, 0, 2, "B", 2, local=False)
    rp._wait_for_neighbour(sync, 0, 2, "B", 7, local=True)        # a local backward waits for nobody
    rp._wait_for_neighbour(sync, 0, 2, "F", 7, local=False)       # the first stage's forward neither
