"""The time estimate of a grid from a pilot's records."""
import json

import pandas as pd
import pytest

from paper_repro import sweep


def _pilot(method, batch, per_example, reach_at=None, steps=10, stop=1.0):
    """A pilot run: ``per_example`` seconds per example, loss below ``stop`` from step ``reach_at``."""
    rows = []
    for s in range(1, steps + 1):
        loss = stop - 0.1 if reach_at is not None and s >= reach_at else stop + 1
        rows.append(dict(point_id=f"{method}-{batch}", method=method, batch_size=batch, step=s, examples=s * batch,
                         wall_time=per_example * s * batch, train_eval_loss=loss))
    return pd.DataFrame(rows)


def test_estimate_interpolates_rates_and_examples_in_log_batch_size():
    pilot = pd.concat([_pilot("backprop", 16, 1e-3, reach_at=8), _pilot("backprop", 64, 4e-4, reach_at=4)])
    grid = sweep.Grid(name="g", model="mlp", dataset="digits", methods=["backprop", "greedy"],
                      batch_sizes=[16, 32, 64, 128], lrs=[1e-3], steps=100, eval_every_examples=16,
                      stop_loss=1.0, stop_overshoot=0.5)
    est = sweep.time_estimate(grid, pilot).set_index(["method", "batch_size"])
    # at the pilot's batch sizes: rate x examples to the stop loss x 1.5
    assert est.loc[("backprop", 16), "expected_s"] == pytest.approx(1e-3 * 8 * 16 * 1.5)
    assert est.loc[("backprop", 64), "expected_s"] == pytest.approx(4e-4 * 4 * 64 * 1.5)
    # halfway in log batch size: the geometric mean of rates and of examples
    rate, examples = (1e-3 * 4e-4) ** 0.5, (128 * 256) ** 0.5
    assert est.loc[("backprop", 32), "expected_s"] == pytest.approx(rate * examples * 1.5)
    # outside the pilot's batch sizes: the nearest one's rate; bound = the step cap's examples
    assert est.loc[("backprop", 128), "bound_s"] == pytest.approx(4e-4 * 100 * 128)
    # a method the pilot did not run is costed like the pilot's slowest
    assert est.loc[("greedy", 16), "expected_s"] == pytest.approx(est.loc[("backprop", 16), "expected_s"])
    assert (est.expected_s <= est.bound_s).all()
    line = sweep.estimate_line(grid, pilot, workers=2)
    assert "8 points" in line and "loss 1.0" in line


def test_a_pilot_that_never_reaches_the_stop_loss_costs_the_cap():
    pilot = _pilot("backprop", 16, 1e-3, reach_at=None)
    grid = sweep.Grid(name="g", model="mlp", dataset="digits", methods=["backprop"], batch_sizes=[16], lrs=[1e-3],
                      steps=50, eval_every_examples=16, stop_loss=1.0)
    est = sweep.time_estimate(grid, pilot).iloc[0]
    assert est.expected_s == pytest.approx(est.bound_s) == pytest.approx(1e-3 * 50 * 16)


def test_cost_line_gives_each_methods_critical_path_ratio():
    grid = sweep.Grid(name="g", model="mlp", dataset="digits", methods=["backprop", "greedy", "chunked-2"],
                      batch_sizes=[16], lrs=[1e-3], steps=5, model_kwargs=dict(depth=4, width=64))
    counted = sweep.grid_flops(grid, (1, 8, 8), 10)["critical_path"]
    line = sweep.cost_line(grid)
    for m in ("greedy", "chunked-2"):
        assert f"{m} {counted['backprop'] / counted[m]:.2f}x" in line
    assert counted["backprop"] / counted["greedy"] > counted["backprop"] / counted["chunked-2"] > 1


def test_extra_learning_rates_at_some_batch_sizes():
    grid = sweep.Grid(name="g", model="mlp", dataset="digits", methods=["backprop"], batch_sizes=[16, 64],
                      lrs=[1e-3, 3e-3], steps=5, extra_lrs={16: [3e-4]})
    grid.validate()
    pairs = [(p["config"]["batch_size"], p["config"]["lr"]) for p in grid.points()]
    assert pairs == [(16, 1e-3), (16, 3e-3), (16, 3e-4), (64, 1e-3), (64, 3e-3)]
    # through JSON (keys become strings) the grid and its points are the same
    again = sweep.Grid.from_dict(json.loads(json.dumps(grid.to_dict())))
    assert [p["point_id"] for p in again.points()] == [p["point_id"] for p in grid.points()]
    # a grid without extra learning rates keeps its point ids
    plain = sweep.Grid(name="g", model="mlp", dataset="digits", methods=["backprop"], batch_sizes=[16, 64],
                       lrs=[1e-3, 3e-3], steps=5)
    assert {p["point_id"] for p in plain.points()} < {p["point_id"] for p in grid.points()}
    for bad, word in (({32: [1e-4]}, "not in batch_sizes"), ({16: [1e-3]}, "not in lrs"), ([1e-4], "dict"),
                      ({"greedy@16": [1e-4]}, "method 'greedy'"), ({"backprop@32": [1e-4]}, "not in batch_sizes"),
                      ({"backprop@x": [1e-4]}, "batch size 'x'"), ({16: [1e-4], "backprop@16": [1e-4]}, "repeats")):
        with pytest.raises(ValueError, match=word):
            sweep.Grid(name="g", model="mlp", dataset="digits", methods=["backprop"], batch_sizes=[16],
                       lrs=[1e-3], extra_lrs=bad).validate()


def test_measured_rates_give_a_cost_before_any_pilot():
    grid = sweep.Grid(name="g", model="mlp", dataset="digits", methods=["backprop", "greedy"], batch_sizes=[8, 32],
                      lrs=[1e-3], steps=40, model_kwargs=dict(depth=2, width=16), eval_every_examples=16,
                      stop_loss=1.0)
    rates = sweep.measure_rates(grid, steps=1)
    assert sorted(zip(rates.method, rates.batch_size)) == [("backprop", 8), ("backprop", 32), ("greedy", 8),
                                                           ("greedy", 32)]
    assert (rates.s_per_example > 0).all() and rates.examples_to_stop.isna().all()
    est = sweep.time_estimate(grid, rates=rates).set_index(["method", "batch_size"])
    rate = rates.set_index(["method", "batch_size"]).s_per_example
    # nothing known about reaching the stop loss: every point costs its step cap
    assert est.loc[("greedy", 32), "expected_s"] == pytest.approx(est.loc[("greedy", 32), "bound_s"])
    assert est.loc[("greedy", 32), "bound_s"] == pytest.approx(rate[("greedy", 32)] * 40 * 32)
    assert "from the measured seconds" in sweep.estimate_line(grid, rates=rates)
    with pytest.raises(ValueError, match="exactly one of pilot"):
        sweep.time_estimate(grid)


def test_extra_learning_rates_for_one_method_at_one_batch_size():
    """``"method@batch"`` extends one method's learning rates there (where its best sat at the
    edge), leaving the other methods' points and every existing point id as they were."""
    base = dict(name="g", model="mlp", dataset="digits", methods=["backprop", "chunked@1"], batch_sizes=[16, 64],
                lrs=[1e-3], steps=5)
    grid = sweep.Grid(**base, extra_lrs={16: [3e-4], "chunked@1@64": [3e-3]})
    grid.validate()
    pairs = [(p["config"]["method"], p["config"]["batch_size"], p["config"]["lr"]) for p in grid.points()]
    assert pairs == [("backprop", 16, 1e-3), ("backprop", 16, 3e-4), ("backprop", 64, 1e-3),
                     ("chunked@1", 16, 1e-3), ("chunked@1", 16, 3e-4), ("chunked@1", 64, 1e-3), ("chunked@1", 64, 3e-3)]
    assert grid.lrs_for(64) == [1e-3] and grid.lrs_for(64, "chunked@1") == [1e-3, 3e-3]
    again = sweep.Grid.from_dict(json.loads(json.dumps(grid.to_dict())))
    assert [p["point_id"] for p in again.points()] == [p["point_id"] for p in grid.points()]
    without = sweep.Grid(**base, extra_lrs={16: [3e-4]})
    assert {p["point_id"] for p in without.points()} < {p["point_id"] for p in grid.points()}


def test_saved_runs_cost_a_method_not_yet_run_by_its_flops_per_example():
    saved = pd.concat([_pilot("backprop", 16, 1e-3, reach_at=8), _pilot("backprop", 64, 4e-4, reach_at=4),
                       _pilot("greedy", 64, 6e-4, reach_at=5)])
    grid = sweep.Grid(name="g", model="mlp", dataset="digits", methods=["backprop", "greedy", "chunked-2"],
                      batch_sizes=[16, 64], lrs=[1e-3], steps=100, eval_every_examples=16, stop_loss=1.0)
    rates = sweep.saved_rates(grid, saved, {"backprop": 100.0, "greedy": 150.0, "chunked-2": 120.0})
    r = rates.set_index(["method", "batch_size"])
    # seconds per FLOP at a batch size: the median over the methods run there
    assert r.loc[("chunked-2", 16), "s_per_example"] == pytest.approx(1e-3 / 100 * 120)
    assert r.loc[("chunked-2", 64), "s_per_example"] == pytest.approx((4e-4 / 100 + 6e-4 / 150) / 2 * 120)
    assert r.loc[("greedy", 16), "s_per_example"] == pytest.approx(1e-3 / 100 * 150)
    # examples to the stop loss: the method's own runs where it has any, else the median of the methods
    # run there, scaled by how the method's own runs compare with that median where it has some
    assert r.loc[("chunked-2", 16), "examples_to_stop"] == 8 * 16
    assert r.loc[("chunked-2", 64), "examples_to_stop"] == pytest.approx((4 * 64 + 5 * 64) / 2)
    assert r.loc[("greedy", 64), "examples_to_stop"] == 5 * 64
    assert r.loc[("backprop", 16), "examples_to_stop"] == 8 * 16
    greedy_over_median = 5 * 64 / ((4 * 64 + 5 * 64) / 2)
    assert r.loc[("greedy", 16), "examples_to_stop"] == pytest.approx(8 * 16 * greedy_over_median)


def test_a_resumed_sweep_says_how_long_its_pending_points_will_take(tmp_path):
    grid = sweep.Grid(name="g", model="mlp", dataset="digits", methods=["backprop", "greedy"], batch_sizes=[16, 32],
                      lrs=[1e-2], steps=4, eval_examples=50, model_kwargs=dict(depth=2, width=16))
    root = tmp_path / "g"
    sweep.open_store(root, grid)
    assert sweep.remaining_estimate(grid, root) is None              # nothing saved: nothing to go by
    sweep.run_sweep(grid, root, shard=(0, 2), progress=False, threads=1)
    saved = sweep.load_results(root)
    left = sweep.remaining_estimate(grid, root)
    assert set(left.point_id) == {p["point_id"] for p in grid.points()} - set(saved.point_id) and len(left) == 2
    # no stop loss: every pending run (batch 32) is costed at its step cap, at the seconds per FLOP of
    # the saved runs (batch 16, the nearest) times its method's FLOPs per example
    shape, classes = sweep.example_shape(grid)
    flops = sweep.grid_flops(grid, shape, classes)["per_example"]
    runs = saved.groupby("point_id").last()
    assert set(runs.batch_size) == {16} and set(left.batch_size) == {32}
    per_flop = (runs.wall_time / runs.examples / runs.method.map(flops)).median()
    for row in left.itertuples():
        assert row.expected_s == pytest.approx(row.bound_s) == pytest.approx(per_flop * flops[row.method] * 4 * 32)
    line = sweep.remaining_line(grid, root, workers=2)
    assert line.startswith(f"about {left.expected_s.sum() / 7200:.1f} h left on 2 worker(s)") and "loss" not in line
    sweep.run_sweep(grid, root, progress=False, threads=1)
    assert sweep.remaining_estimate(grid, root) is None and sweep.remaining_line(grid, root) is None   # complete


def test_a_grid_with_no_runs_yet_is_costed_by_a_like_store_less_the_points_it_will_copy(tmp_path):
    base = dict(model="mlp", dataset="digits", methods=["backprop", "greedy"], lrs=[1e-2], steps=4, eval_examples=50)
    done = sweep.Grid(name="done", batch_sizes=[16], model_kwargs=dict(depth=2, width=16), **base)
    sweep.run_sweep(done, tmp_path / "done", progress=False, threads=1)
    # another depth: no point in common, costed at done's seconds per FLOP times its own FLOPs per example
    deeper = sweep.Grid(name="deeper", batch_sizes=[16, 32], model_kwargs=dict(depth=4, width=16), **base)
    root = tmp_path / "deeper"
    sweep.open_store(root, deeper)
    assert sweep.remaining_estimate(deeper, root) is None               # no run of its own, none like it
    left = sweep.remaining_estimate(deeper, root, like=[tmp_path / "nowhere", tmp_path / "done"])
    assert len(left) == 4 and left.attrs["source"] == tmp_path / "done"
    shape, classes = sweep.example_shape(done)
    theirs, mine = (sweep.grid_flops(g, shape, classes)["per_example"] for g in (done, deeper))
    assert mine["greedy"] > 1.5 * theirs["greedy"]
    runs = sweep.load_results(tmp_path / "done").groupby("point_id").last()
    per_flop = (runs.wall_time / runs.examples / runs.method.map(theirs)).median()
    for row in left.itertuples():
        assert row.expected_s == pytest.approx(per_flop * mine[row.method] * 4 * row.batch_size)
    line = sweep.remaining_line(deeper, root, workers=1, like=[tmp_path / "done"])
    assert line.startswith(f"about {left.expected_s.sum() / 3600:.1f} h left") and \
        "from the runs of done (none of this grid saved yet)" in line
    # the same net at more batch sizes: the points done holds are copied, not costed
    more = sweep.Grid(name="more", batch_sizes=[16, 32], model_kwargs=dict(depth=2, width=16), **base)
    left = sweep.remaining_estimate(more, tmp_path / "more", like=[tmp_path / "done"])
    assert set(left.batch_size) == {32} and len(left) == 2
    sweep.run_sweep(more, tmp_path / "more", progress=False, threads=1, reuse=[tmp_path / "done"])
    assert sweep.remaining_estimate(more, tmp_path / "more", like=[tmp_path / "done"]) is None


def test_the_cost_line_counts_a_methods_own_extra_learning_rates():
    grid = sweep.Grid(name="g", model="mlp", dataset="digits", methods=["backprop", "greedy"], batch_sizes=[16, 64],
                      lrs=[1e-3], steps=5, model_kwargs=dict(depth=2, width=16), extra_lrs={"greedy@16": [1e-2]})
    examples = {m: sum(p["config"]["steps"] * p["config"]["batch_size"] for p in grid.points()
                       if p["config"]["method"] == m) for m in grid.methods}
    assert examples == {"backprop": 5 * (16 + 64), "greedy": 5 * (2 * 16 + 64)}
    counted = sweep.grid_flops(grid, (1, 8, 8), 10)
    for m in grid.methods:
        assert counted["per_method"][m] == pytest.approx(examples[m] * counted["per_example"][m])
    assert f"{sum(examples.values()):.3g} training examples" in sweep.cost_line(grid)
