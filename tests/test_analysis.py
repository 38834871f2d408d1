"""Time/compute to target, Pareto frontiers and speedups on hand-made tables (answers by hand)."""
import math

import numpy as np
import pandas as pd
import pytest

from paper_repro import analysis


def _run(pid, method, batch, losses, total, cp, fill, lr=1e-3):
    steps = np.arange(1, len(losses) + 1)
    return pd.DataFrame({"point_id": pid, "method": method, "batch_size": batch, "lr": lr, "seed": 0,
                         "step": steps, "examples": steps * batch, "final_loss": losses,
                         "total_flops_pe": total, "critical_path_flops_pe": cp, "fill_flops_pe": fill})


@pytest.fixture
def table():
    a = _run("a", "backprop", 4, [3.0, 2.0, 1.0, 0.5], total=10, cp=10, fill=0)
    b = _run("b", "greedy", 8, [3.0, 1.5, 0.9, math.nan], total=12, cp=3, fill=5)  # diverged at step 4
    return pd.concat([a, b], ignore_index=True)


def test_smooth_is_a_trailing_mean():
    assert analysis.smooth([3, 2, 1, 0.5], 2).tolist() == [3, 2.5, 1.5, 0.75]
    assert analysis.smooth([3, 2, 1], 1).tolist() == [3, 2, 1]
    with pytest.raises(ValueError, match="window"):
        analysis.smooth([1.0], 0)


def test_time_and_compute_to_target_by_hand(table):
    ttt = analysis.time_to_target(table, [1.0, 0.5], window=1).set_index(["point_id", "target"])
    # a: loss 1.0 first at step 3: 12 examples x 10 FLOPs = 120; time 0 + 3 x 10 = 30
    assert ttt.loc[("a", 1.0), ["step", "examples", "compute", "time"]].tolist() == [3, 12, 120, 30]
    assert ttt.loc[("a", 0.5), ["compute", "time"]].tolist() == [160, 40]
    # b: step 3, 24 examples x 12 = 288; time = fill 5 + 3 x 3 = 14; never reaches 0.5 (diverged)
    assert ttt.loc[("b", 1.0), ["compute", "time"]].tolist() == [288, 14]
    assert not ttt.loc[("b", 0.5), "reached"] and math.isnan(ttt.loc[("b", 0.5), "time"])


def test_smoothing_delays_the_target(table):
    ttt = analysis.time_to_target(table, 1.0, window=2).set_index("point_id")
    # a smoothed: 3, 2.5, 1.5, 0.75 -> step 4; b smoothed: 3, 2.25, 1.2, nan -> never
    assert ttt.loc["a", "step"] == 4
    assert not ttt.loc["b", "reached"]


def test_pareto_frontier_lower_left():
    pts = pd.DataFrame({"method": "m", "target": 1.0, "compute": [1, 2, 3, 4, 5, 6.0],
                        "time": [10, 5, 6, 5, 1, math.nan], "reached": [True] * 5 + [False]})
    front = analysis.pareto_frontier(pts)
    # (3, 6) and (4, 5) are beaten by (2, 5); the unreached point is ignored
    assert list(zip(front.compute, front.time)) == [(1, 10), (2, 5), (5, 1)]


def test_pareto_frontier_is_per_method_and_target():
    pts = pd.DataFrame({"method": ["x", "x", "y", "y"], "target": [1.0, 1.0, 1.0, 2.0],
                        "compute": [1.0, 2.0, 3.0, 4.0], "time": [1.0, 0.5, 0.1, 9.0]})
    front = analysis.pareto_frontier(pts)
    assert len(front) == 4  # nothing dominates across groups


def _front(method, xs, ys, target=1.0):
    return pd.DataFrame({"method": method, "target": target, "compute": xs, "time": ys})


def test_speedup_constant_on_parallel_frontiers():
    # backprop: T = 100 / sqrt(C) through (1, 100), (100, 10); greedy: T = 31.6 / sqrt(C)
    # through (10, 10), (1000, 1). Overlap [10, 100]; ratio sqrt(10) everywhere.
    f = pd.concat([_front("backprop", [1, 100], [100, 10]), _front("greedy", [10, 1000], [10, 1])])
    s = analysis.speedup(f)
    assert s.compute.tolist() == [10, 100]
    assert s.speedup.tolist() == pytest.approx([math.sqrt(10)] * 2)
    assert s.baseline_time.tolist() == pytest.approx([100 / math.sqrt(10), 10])


def test_speedup_grows_where_backprop_saturates():
    # backprop flat at time 10 beyond compute 10; greedy T = 1000 / C from (10, 100) to (1000, 1)
    f = pd.concat([_front("backprop", [1, 10, 1000], [100, 10, 10]), _front("greedy", [10, 1000], [100, 1])])
    s = analysis.speedup(f)
    assert s.compute.tolist() == [10, 1000]
    assert s.speedup.tolist() == pytest.approx([0.1, 10])
    # in between, log-log interpolation: at C=100 both times are 10
    assert analysis.interpolate_loglog([10, 1000], [100, 1], [100])[0] == pytest.approx(10)
    best = analysis.max_speedup(s)
    assert best.loc[0, "speedup"] == pytest.approx(10) and best.loc[0, "compute"] == 1000
    high = analysis.high_compute_speedup(s)
    assert high.loc[0, "compute"] == 1000 and high.loc[0, "speedup"] == pytest.approx(10)
    claims = analysis.claims_table(s, 10, "MLP")
    assert claims.loc[0, "measured_max"] == "10.00x" and claims.loc[0, "method"] == "greedy"
    assert claims.loc[0, "measured_high_compute"] == "10.00x (greedy, target 1)"


def test_max_and_high_compute_speedup_differ():
    s = pd.DataFrame({"method": "greedy", "target": 1.0, "compute": [1.0, 2.0, 3.0], "speedup": [5.0, 2.0, 3.0]})
    assert analysis.max_speedup(s).loc[0, ["speedup", "compute"]].tolist() == [5.0, 1.0]
    assert analysis.high_compute_speedup(s).loc[0, ["speedup", "compute"]].tolist() == [3.0, 3.0]


def test_speedup_without_overlap_and_bad_baseline():
    f = pd.concat([_front("backprop", [1, 10], [10, 5]), _front("greedy", [100, 1000], [2, 1])])
    s = analysis.speedup(f)
    assert s.empty
    assert analysis.max_speedup(s).empty
    assert analysis.claims_table(s, 2, "T").loc[0, "measured_max"].startswith("none")
    assert analysis.claims_table(s, None, "T").loc[0, "paper"] == "no number stated"
    with pytest.raises(ValueError, match="baseline"):
        analysis.speedup(_front("greedy", [1], [1]))


def test_interpolation_does_not_extrapolate():
    out = analysis.interpolate_loglog([10, 100], [1, 1], [5, 10, 200])
    assert math.isnan(out[0]) and out[1] == 1 and math.isnan(out[2])


def test_suggest_targets_are_reachable_by_every_method():
    df = pd.concat([_run("a", "backprop", 4, [4.0, 2.0, 1.0], 1, 1, 0),
                    _run("b", "greedy", 4, [4.0, 3.0, 2.0], 1, 1, 0)])
    # floor = max(1.0, 2.0) = 2; start = 4 -> 2 + f * 2
    assert analysis.suggest_targets(df, n=2, window=1, fractions=(0.5, 0.25)) == [3.0, 2.5]
    with pytest.raises(ValueError, match="n must be"):
        analysis.suggest_targets(df, n=5, window=1, fractions=(0.5,))


def test_missing_columns_are_named(table):
    with pytest.raises(ValueError, match="critical_path_flops_pe"):
        analysis.time_to_target(table.drop(columns="critical_path_flops_pe"), 1.0)


def test_smooth_keeps_divergence():
    out = analysis.smooth([3.0, 1.5, 0.9, math.nan], 2)
    assert out[:3].tolist() == [3.0, 2.25, 1.2] and out[3] == math.inf
