"""The race predicted for more devices (paper_repro.simulate.race): the stated formulas on hand-made
per-block costs and steps."""
import math

import pandas as pd
import pytest

from paper_repro.settings.types import RaceStrategy
from paper_repro.simulate.calibrate import BlockCosts
from paper_repro.simulate.engine import Link
from paper_repro.simulate.race import (ddp_step, one_device_step, param_bytes, predict, prediction_error,
                                       study_steps)


def costs(blocks=4) -> BlockCosts:
    """Each block 1 s forward, 2 s backward, 0.5 s optimizer at micro-batch 8; a 256x256 linear each."""
    n = blocks
    return BlockCosts(model="mlp", model_kwargs={"depth": n}, image_size=8, micro_batch=8, forward=[1.0] * n,
                      backward=[2.0] * n, backward_weight=[1.0] * n, optimizer=[0.5] * n, head_forward=[0.1] * n,
                      head_backward=[0.2] * n, head_optimizer=[0.05] * n, out_bytes=[8 * 256 * 4] * n,
                      flops=[2 * 256 * 256] * n)


def test_one_device_and_ddp_steps_follow_their_formulas():
    bc = costs()
    # batch 16 doubles forward and backward, not the optimizer step: 4 x (2 + 4 + 0.5) + 0.2 + 0.4 + 0.05
    assert one_device_step(bc, 16) == pytest.approx(26.65)
    assert param_bytes(bc) == 4 * 256 * 256 * 4
    link = Link(latency=0.01, bandwidth=1e6)
    P = param_bytes(bc)
    expected = one_device_step(bc, 8) + 2 * 3 * (0.01 + P / (4 * 1e6))      # 4 devices, batch 32
    assert ddp_step(bc, 32, 4, link, P) == pytest.approx(expected)
    assert ddp_step(bc, 32, 1, link, P) == pytest.approx(one_device_step(bc, 32))


def test_the_prediction_multiplies_the_studys_steps_by_the_simulated_step_and_says_what_is_missing():
    steps = pd.DataFrame({"depth": [4, 4, 4], "method": ["backprop", "backprop", "greedy"],
                          "batch_size": [64, 64, 16], "target": [1.3, 1.5, 1.3], "step": [10.0, 6.0, 40.0]})
    strategies = [RaceStrategy("one process", "single"), RaceStrategy("1f1b", "1f1b"),
                  RaceStrategy("local greedy", "local", "greedy"), RaceStrategy("ddp", "ddp")]
    out = predict(steps, {4: costs()}, {4: 4}, strategies, batches=[64], targets=[1.3, 1.5], micro_batches=4,
                  link=Link())
    row = out[(out.strategy == "one process") & (out.target == 1.3)].iloc[0]
    assert row["steps"] == 10 and row["seconds"] == pytest.approx(10 * one_device_step(costs(), 64))
    local = out[(out.strategy == "local greedy")].set_index("target")
    assert local.loc[1.3, "update_batch"] == 16 and local.loc[1.3, "steps"] == 40
    assert math.isnan(local.loc[1.5, "seconds"]) and local.loc[1.5, "steps_from"] == "not studied"
    pipe = out[(out.strategy == "1f1b") & (out.target == 1.3)].iloc[0]
    # 4 stages of one block, 4 micro-batches: a pipeline is faster per step than one device
    assert 0 < pipe["step_seconds"] < one_device_step(costs(), 64) and (out["kind"] == "prediction").all()
    measured = pd.DataFrame({"strategy": ["one process"], "batch": [64], "target": [1.3],
                             "seconds": [row["seconds"] * 1.25 + 1.0], "eval_seconds": [1.0]})
    err = prediction_error(out, measured, devices=4)
    assert len(err) == 1 and err["error"].iloc[0] == pytest.approx(1 / 1.25 - 1)


def test_steps_between_studied_batches_are_interpolated_in_log_log_and_say_so():
    steps = pd.DataFrame({"depth": 10, "method": "greedy", "batch_size": [32, 128], "target": 1.3,
                          "step": [400.0, 100.0]})
    value, source = study_steps(steps, 10, "greedy", 64, 1.3)
    assert value == pytest.approx(200.0) and source == "interpolated 32-128"
    assert study_steps(steps, 10, "greedy", 128, 1.3) == (100.0, "study")
    assert math.isnan(study_steps(steps, 10, "greedy", 256, 1.3)[0])

