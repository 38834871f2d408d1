"""The schedule simulator: torch's action orders, closed forms, costs from blocks, errors."""
import dataclasses
import math

import pytest

from paper_repro.simulate.calibrate import BlockCosts
from paper_repro.simulate.costs import fresh_share, pieces, schedule_costs, uniform_costs
from paper_repro.simulate.engine import Costs, Link, simulate
from paper_repro.simulate.schedules import SCHEDULES, in_flight_rank_peak, torch_order

TORCH = [s for s in SCHEDULES if not s.startswith("local")]


@pytest.mark.parametrize("schedule", TORCH)
@pytest.mark.parametrize("stages,micro_batches", [(2, 4), (4, 8), (3, 6)])
def test_every_forward_and_backward_runs_once_on_the_rank_holding_its_piece(schedule, stages, micro_batches):
    order = torch_order(schedule, stages, micro_batches)
    seen = {}
    for rank, ops in enumerate(order.actions):
        for a in ops:
            assert order.stage_rank[a.stage] == rank
            key = (a.stage, a.micro_batch)
            seen.setdefault(key, []).append(a.kind)
    assert set(seen) == {(v, m) for v in range(order.num_stages) for m in range(micro_batches)}
    for kinds in seen.values():
        assert sorted(kinds) in (["B", "F"], ["F", "I", "W"])


@pytest.mark.parametrize("S,M", [(2, 2), (4, 4), (4, 9), (8, 16)])
def test_1f1b_order_is_torch_loops_warmup_then_one_backward_one_forward(S, M):
    order = torch_order("1f1b", S, M)
    for r, ops in enumerate(order.actions):
        warm = min(S - r, M)
        assert [a.kind for a in ops[:warm]] == ["F"] * warm
        assert [a.micro_batch for a in ops if a.kind == "F"] == list(range(M))
        assert [a.micro_batch for a in ops if a.kind == "B"] == list(range(M))
    one_each = [1.0] * S   # a micro-batch in flight holds one unit: the peak counts micro-batches
    assert in_flight_rank_peak(order, one_each) == [min(S - r, M) for r in range(S)]
    assert in_flight_rank_peak(torch_order("gpipe", S, M), one_each) == [M] * S


@pytest.mark.parametrize("S,M", [(2, 2), (2, 8), (4, 4), (4, 16), (8, 8), (8, 32)])
@pytest.mark.parametrize("F,B", [(1.0, 2.0), (0.3, 0.5)])
def test_closed_forms_with_uniform_times(S, M, F, B):
    for schedule in ("gpipe", "1f1b"):
        r = simulate(schedule, uniform_costs(schedule, S, F, B), M)
        assert r.makespan_s == pytest.approx((M + S - 1) * (F + B))
        assert r.bubble_fraction == pytest.approx((S - 1) / (M + S - 1))
        assert r.samples_per_s == pytest.approx(M / ((M + S - 1) * (F + B)))
    r = simulate("1f1b-recompute", uniform_costs("1f1b", S, F, B), M)
    assert r.makespan_s == pytest.approx((M + S - 1) * (2 * F + B))
    if M % S == 0:     # interleaved 1F1B, two pieces per processor: the fill shrinks by half
        r = simulate("interleaved-1f1b", uniform_costs("interleaved-1f1b", S, F, B), M)
        assert r.makespan_s == pytest.approx(M * (F + B) + (S - 1) * (F + B) / 2)
    r = simulate("local", uniform_costs("local", S, F, B), M)
    assert r.makespan_s == pytest.approx((S - 1) * F + M * (F + B))


def test_link_latency_adds_two_fills_of_hops_to_gpipe():
    S, M, F, B, L = 4, 6, 1.0, 2.0, 0.25
    r = simulate("gpipe", uniform_costs("gpipe", S, F, B), M, link=Link(latency=L))
    assert r.makespan_s == pytest.approx((M + S - 1) * (F + B) + 2 * (S - 1) * L)
    bw = Link(bandwidth=1000.0)
    costs = uniform_costs("gpipe", S, F, B, send_bytes=500.0)
    assert simulate("gpipe", costs, M, link=bw).makespan_s == pytest.approx((M + S - 1) * (F + B) + 2 * (S - 1) * 0.5)


def test_local_steady_state_is_one_micro_batch_per_slowest_stage():
    costs = Costs([1.0, 2.5, 0.5], [1.0, 1.5, 0.5], [0.5, 1.0, 0.5], [0.1, 0.2, 0.1])
    slowest = max(costs.forward[s] + costs.backward(s) + costs.optimizer[s] for s in range(3))
    r = simulate("local", costs, 16, micro_batch=8, steps=4, warmup_steps=2)
    assert r.samples_per_s == pytest.approx(8 / slowest)
    assert r.busy_per_stage[1] == pytest.approx(1.0)
    # optimizer once per step instead of after every micro-batch
    once = simulate("local/M", costs, 16, micro_batch=8, steps=4, warmup_steps=2)
    per_mb = [costs.forward[s] + costs.backward(s) for s in range(3)]
    assert once.samples_per_s == pytest.approx(8 * 16 / (16 * max(per_mb) + costs.optimizer[1]))


def test_local_waits_when_max_in_flight_sends_are_unreceived():
    # stage 1 is 4x slower; stage 0 may send micro-batch i only once stage 1 has taken i-2,
    # which it does when it starts on i-3 (it double-buffers)
    costs = Costs([1.0, 4.0], [1.0, 4.0], [0.0, 0.0])
    r = simulate("local", costs, 12, max_in_flight=2)
    start1 = {iv.micro_batch: iv.start for iv in r.intervals if iv.rank == 1 and iv.kind in ("FB", "F")}
    sent0 = {iv.micro_batch: iv.start for iv in r.intervals if iv.rank == 0 and iv.kind == "B"}
    assert sent0, "stage 0 never had to wait"
    for i, t in sent0.items():
        assert t == pytest.approx(start1[i - 3])
    free = simulate("local", costs, 12, max_in_flight=100)
    assert free.intervals[-1].end == pytest.approx(r.intervals[-1].end)   # the slow stage sets the pace


def test_the_first_processor_draws_the_input_before_the_step_or_the_micro_batch():
    """Backprop schedules draw the whole step's batch up front (everything waits for it);
    the local pipeline draws one micro-batch before each forward of its first stage."""
    S, M, F, B, d = 3, 6, 1.0, 2.0, 0.25
    for schedule in ("gpipe", "1f1b"):
        costs = dataclasses.replace(uniform_costs(schedule, S, F, B), data=d)
        r = simulate(schedule, costs, M, steps=2)
        assert r.makespan_s == pytest.approx(M * d + (M + S - 1) * (F + B))
        drawn = [iv for iv in r.intervals if iv.kind == "DATA"]
        assert [(iv.rank, iv.step, iv.end - iv.start) for iv in drawn] == [(0, 0, M * d), (0, 1, M * d)]
        assert not any(iv.kind == "DATA" for iv in simulate(schedule, uniform_costs(schedule, S, F, B), M).intervals)
    # local: the first stage is the slowest once it draws too, one micro-batch per F + B + d
    costs = dataclasses.replace(uniform_costs("local", 2, F, B), data=d)
    r = simulate("local", costs, 16, micro_batch=4, steps=4, warmup_steps=2)
    assert r.samples_per_s == pytest.approx(4 / (F + B + d))
    assert r.busy_per_stage[0] > r.busy_per_stage[1]      # drawing counts as busy
    with pytest.raises(ValueError, match="data time must be >= 0 seconds per micro-batch, got -1"):
        dataclasses.replace(costs, data=-1)


def test_zero_bubble_beats_1f1b_with_uniform_times():
    S, M = 4, 8
    base = simulate("1f1b", uniform_costs("1f1b", S, 1.0, 2.0), M)
    for schedule in ("interleaved-zb", "zbv"):
        r = simulate(schedule, uniform_costs(schedule, S, 1.0, 2.0), M)
        assert r.makespan_s < base.makespan_s
        assert math.isclose(sum(r.busy_per_stage) * r.makespan_s, S * M * 3.0)


def _block_costs(n=6):
    return BlockCosts("toy", {}, 8, 4, forward=[1.0 + b for b in range(n)], backward=[2.0 + 2 * b for b in range(n)],
                      backward_weight=[1.0 + b for b in range(n)], optimizer=[0.1] * n, head_forward=[0.5] * n,
                      head_backward=[0.25] * n, head_optimizer=[0.05] * n, out_bytes=[100 * (b + 1) for b in range(n)],
                      label_bytes=8)


def test_stage_costs_sum_blocks_heads_and_input_gradients_by_hand():
    bc = _block_costs()
    assert pieces(bc, 2, "blocks") == [[0, 1, 2], [3, 4, 5]]
    bp = schedule_costs(bc, "1f1b", 2, "blocks")
    assert bp.forward == [1 + 2 + 3, 4 + 5 + 6 + 0.5]
    # block 0 takes data: no input gradient; the last piece's head backward counts as I
    assert bp.backward_input == [0 + 2 + 3, 4 + 5 + 6 + 0.25]
    assert bp.backward_weight == [1 + 2 + 3, 4 + 5 + 6]
    assert bp.optimizer == pytest.approx([0.3, 0.35])
    assert bp.send_bytes == [300]
    loc = schedule_costs(bc, "local", 2, "blocks")
    assert loc.forward == [6.5, 15.5]           # every stage has a head
    assert loc.backward_input == [0 + 2 + 3 + 0.25, 0 + 5 + 6 + 0.25]   # stage input is detached
    assert loc.send_bytes == [308]              # activations + labels
    assert schedule_costs(bc, "zbv", 2).pieces == 4
    # the input: one micro-batch drawn per forward; backprop joins a step's micro-batches too
    drawn = dataclasses.replace(bc, data=0.125, concat=0.0625)
    assert schedule_costs(drawn, "local", 2).data == 0.125 and schedule_costs(drawn, "1f1b", 2).data == 0.1875
    assert bp.data == loc.data == 0.0                   # not calibrated: free
    # balancing time puts fewer, heavier blocks on the second piece
    assert pieces(bc, 2, "time") == [[0, 1, 2, 3], [4, 5]]


def test_fresh_gradients_cost_less_by_the_measured_accumulation():
    """A local stage stepping after every micro-batch writes its weight gradients anew; pipelined
    backprop adds to them in all but the first micro-batch of a step."""
    bc = dataclasses.replace(_block_costs(), accumulate=[0.5] * 6)
    assert fresh_share("local", 16) == 1.0 and fresh_share("local", 16, update_every=4) == 0.25
    assert fresh_share("local/M", 16) == fresh_share("1f1b-recompute", 16) == 1 / 16
    plain = schedule_costs(bc, "local", 2, "blocks")
    fresh = schedule_costs(bc, "local", 2, "blocks", fresh=1.0)
    assert fresh.backward_weight == [w - 3 * 0.5 for w in plain.backward_weight]   # 3 blocks a stage
    assert fresh.backward_input == plain.backward_input and fresh.forward == plain.forward
    quarter = schedule_costs(bc, "1f1b", 2, "blocks", fresh=0.25)
    accumulating = schedule_costs(bc, "1f1b", 2, "blocks").backward_weight
    assert quarter.backward_weight == pytest.approx([w - 3 * 0.125 for w in accumulating])
    # an older calibration without the measurement: nothing is taken off
    assert schedule_costs(_block_costs(), "local", 2, "blocks", fresh=1.0).backward_weight == plain.backward_weight
    with pytest.raises(ValueError, match="fresh must be a share between 0 and 1, got 2"):
        schedule_costs(bc, "local", 2, "blocks", fresh=2)


def test_block_costs_scale_linearly_and_round_trip(tmp_path):
    bc = _block_costs()
    big = dataclasses.replace(bc, data=0.125, concat=0.0625).scaled(8)
    assert big.forward == [2 * v for v in bc.forward] and big.optimizer == bc.optimizer
    assert (big.data, big.concat) == (0.25, 0.125)
    assert big.out_bytes == [2 * v for v in bc.out_bytes]
    # accumulating gradients depends on the parameters, not the batch: it stays as it is
    acc = dataclasses.replace(bc, accumulate=[0.5] * 6).scaled(8)
    assert acc.accumulate == [0.5] * 6
    assert acc.backward == [(v - 0.5) * 2 + 0.5 for v in bc.backward]
    assert acc.backward_weight == [(v - 0.5) * 2 + 0.5 for v in bc.backward_weight]
    bc.save(tmp_path / "c.json")
    assert BlockCosts.load(tmp_path / "c.json") == bc
    with pytest.raises(ValueError, match="does not exist"):
        BlockCosts.load(tmp_path / "missing.json")


def test_bad_inputs_name_the_value_and_the_choices():
    with pytest.raises(ValueError, match="unknown schedule 'pipedream'.*1f1b"):
        simulate("pipedream", uniform_costs("1f1b", 2, 1, 1), 4)
    with pytest.raises(ValueError, match="micro_batches >= stages"):
        torch_order("1f1b", 4, 2)
    with pytest.raises(ValueError, match="micro_batches must be a positive integer, got 0"):
        simulate("gpipe", uniform_costs("gpipe", 2, 1, 1), 0)
    with pytest.raises(ValueError, match="cannot cut the 6 blocks of toy into 7 pieces"):
        pieces(_block_costs(), 7)
    with pytest.raises(ValueError, match="bandwidth must be > 0"):
        Link(bandwidth=0)
    with pytest.raises(ValueError, match="weight-gradient time"):
        uniform_costs("1f1b", 2, 1.0, 1.0, weight=2.0)


def test_paper_setting_simulates_once_per_calibration_and_plots_the_spread():
    import matplotlib
    matplotlib.use("Agg")
    from paper_repro.plots.simulate import plot_paper_setting
    from paper_repro.simulate.scaling import paper_setting, ratio_table
    slow_head = dataclasses.replace(_block_costs(), forward=[0.5] * 5 + [3.0])    # a bottleneck last block
    calibrations = [_block_costs(), slow_head]
    table = paper_setting(calibrations, 2, 4, ["gpipe", "1f1b"], micro_batch=4)
    assert table.calibration.tolist() == [0, 0, 1, 1]
    for i, bc in enumerate(calibrations):       # each calibration's rows are its own ratio_table
        alone = ratio_table(bc, [2], [4], ["gpipe", "1f1b"], 4, cut="blocks")
        assert table[table.calibration == i].ratio.tolist() == alone.ratio.tolist()
    with pytest.raises(ValueError, match="at least one calibration"):
        paper_setting([], 2, 4, ["gpipe"], 4)
    spread = table.groupby("baseline", sort=False).ratio.apply(list).to_dict()
    fig = plot_paper_setting(spread, 1.4, "t")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.texts]
    gpipe = sorted(spread["gpipe"])
    assert f"{(gpipe[0] + gpipe[1]) / 2:.2f}\n[{gpipe[0]:.2f}-{gpipe[1]:.2f}]" in labels   # median, range
    assert [p.get_height() for p in ax.patches] == pytest.approx([sum(v) / 2 for v in spread.values()])
    single = plot_paper_setting({"gpipe": 1.1}, 1.4, "t")      # one calibration: a plain bar
    assert "1.10" in [t.get_text() for t in single.axes[0].texts]
