"""The compute-efficiency rules on hand-made runs: target detection, seeds, staircases, speedup."""
import math

import numpy as np
import pandas as pd
import pytest

from paper_repro import analysis as ef


def run(method, batch, losses, *, lr=1e-3, seed=0, eval_losses=None, crit=1.0, total=1.0, fill=0.0):
    """A point table: step s has examples s*batch, training loss losses[s-1], and
    ``train_eval_loss`` from ``eval_losses`` ({step: loss}) else NaN."""
    n = len(losses)
    steps = np.arange(1, n + 1)
    ev = np.full(n, np.nan)
    for s, v in (eval_losses or {}).items():
        ev[s - 1] = v
    return pd.DataFrame({"point_id": f"{method}-b{batch}-lr{lr}-s{seed}", "method": method, "batch_size": batch,
                         "lr": lr, "seed": seed, "step": steps, "examples": steps * batch,
                         "final_loss": np.asarray(losses, float), "train_eval_loss": ev,
                         "total_flops_pe": total, "critical_path_flops_pe": crit, "fill_flops_pe": fill})


def test_eval_rule_uses_the_first_evaluation_at_or_below_the_target():
    df = run("backprop", 10, [3.0] * 10, eval_losses={2: 2.5, 4: 1.9, 6: 1.5, 10: 1.4})
    t = ef.time_to_target(df, [2.0, 1.5, 1.0])
    got = dict(zip(t["target"], t["step"]))
    assert got[2.0] == 4 and got[1.5] == 6 and math.isnan(got[1.0])
    assert t.set_index("target").loc[1.5, "examples"] == 60
    assert not t.set_index("target").loc[1.0, "reached"]


def test_examples_window_lags_every_batch_size_by_the_same_data():
    # loss drops from 2 to 1 at step 5; a window of 40 examples is 4 steps at batch 10 and 1 step at batch 40
    small = run("backprop", 10, [2.0] * 4 + [1.0] * 10)
    large = run("backprop", 40, [2.0] * 4 + [1.0] * 10)
    t_small = ef.time_to_target(small, [1.0], "examples:40")
    t_large = ef.time_to_target(large, [1.0], "examples:40")
    assert t_small["step"].iloc[0] == 8      # 4 steps of loss 1.0 fill the window
    assert t_large["step"].iloc[0] == 5      # a one-step window
    # counted in steps, the same window lags the large-batch run by 4 steps = 160 examples
    assert ef.time_to_target(large, [1.0], "steps:4")["examples"].iloc[0] == 8 * 40


def test_diverged_run_counts_only_up_to_the_divergence():
    df = run("greedy", 8, [2.0, 1.8, float("nan"), 0.1], eval_losses={2: 1.9, 4: 0.1})
    t = ef.time_to_target(df, [1.0])
    assert not t["reached"].iloc[0]


def test_time_and_compute_use_the_flop_columns():
    df = run("greedy", 16, [1.0] * 3, eval_losses={3: 0.5}, crit=5.0, total=7.0, fill=11.0)
    t = ef.time_to_target(df, [0.6]).iloc[0]
    assert t["compute"] == 3 * 16 * 7.0 and t["time"] == 11.0 + 3 * 5.0


def test_bad_rule_is_named():
    with pytest.raises(ValueError, match="'window:3'"):
        ef.parse_rule("window:3")


def test_seeds_median_and_unreached_seed_counts_as_infinite():
    ttt = pd.DataFrame({"method": "m", "batch_size": 8, "lr": 0.1, "target": 1.0, "seed": [0, 1, 2],
                        "reached": [True, True, False], "step": [10, 30, np.nan],
                        "examples": [80, 240, np.nan], "compute": [80, 240, np.nan], "time": [10, 30, np.nan]})
    row = ef.over_seeds(ttt).iloc[0]
    assert row["step"] == 30 and row["reached"]          # median of 10, 30, inf
    assert row["time_min"] == 10 and row["time_max"] == 30 and row["seeds_reached"] == 2
    two_missing = ttt.assign(reached=[True, False, False])
    assert not ef.over_seeds(two_missing).iloc[0]["reached"]


def _configs(method, pairs, target=1.0):
    return pd.DataFrame([{"method": method, "target": target, "compute": c, "time": t, "reached": True}
                         for c, t in pairs])


def test_staircase_is_best_time_with_at_most_that_compute():
    cfg = _configs("backprop", [(10, 100), (20, 120), (30, 50), (40, 60), (50, 10)])
    front = ef.staircase(cfg)
    assert list(front["compute"]) == [10, 30, 50]
    assert list(ef.staircase_at(front, [5, 10, 29, 30, 45, 1e9])[1:]) == [100, 100, 50, 50, 10]
    assert math.isnan(ef.staircase_at(front, [5])[0])


def test_speedup_has_no_interpolation_and_stays_where_both_have_data():
    base = _configs("backprop", [(10, 100), (100, 50)])
    local = _configs("greedy", [(20, 40), (60, 10)])
    sp = ef.speedup(pd.concat([base, local]))
    # from compute 20 (where greedy starts) to 60 (greedy's largest); backprop is 100 until 100
    assert list(sp["compute"]) == [20, 60]
    assert list(sp["speedup"]) == [100 / 40, 100 / 10]
    summary = ef.summarize_speedup(sp).iloc[0]
    assert summary["max_speedup"] == 10 and summary["high_compute_speedup"] == 10
    # a gap in the method's runs is not bridged by a line: between 20 and 60 it stays at 40
    assert ef.staircase_at(ef.staircase(local), [59])[0] == 40


def test_speedup_needs_overlapping_compute():
    base = _configs("backprop", [(100, 10)])
    local = _configs("greedy", [(10, 5), (50, 2)])
    assert ef.speedup(pd.concat([base, local])).empty


def test_speedup_without_the_baseline_is_an_error():
    with pytest.raises(ValueError, match="backprop"):
        ef.speedup(_configs("greedy", [(1, 1)]))


def test_speedup_table_spread_over_seeds():
    rows = []
    for seed, factor in ((0, 1.0), (1, 2.0)):
        for m, t in (("backprop", 100), ("greedy", 20 * factor)):
            rows.append({"method": m, "batch_size": 8, "lr": 0.1, "seed": seed, "target": 1.0, "reached": True,
                         "step": t, "examples": 80, "compute": 80.0, "time": float(t)})
    table = ef.speedup_table(pd.DataFrame(rows)).iloc[0]
    assert table["high_compute_speedup"] == 100 / 30        # median time over seeds: 30
    assert table["high_compute_speedup_lo"] == 2.5 and table["high_compute_speedup_hi"] == 5.0


def test_steps_vs_batch_takes_the_best_lr_and_critical_batch():
    rows = []
    # S(B) = 100 * (1 + 64 / B): critical batch 64 for the best lr; a worse lr takes twice the steps
    for b in (16, 32, 64, 128, 256):
        for lr, factor in ((0.1, 1), (0.3, 2)):
            s = 100 * (1 + 64 / b) * factor
            rows.append({"method": "backprop", "batch_size": b, "lr": lr, "seed": 0, "target": 1.0,
                         "reached": True, "step": s, "examples": s * b, "compute": s * b, "time": s})
    svb = ef.steps_vs_batch(pd.DataFrame(rows))
    assert set(svb["lr"]) == {0.1} and len(svb) == 5
    crit = ef.critical_batch(svb).iloc[0]
    assert crit["S_min"] == 125 and crit["E_min"] == 500 * 16
    assert crit["last_doubling"] == pytest.approx(150 / 125)


def test_lr_at_edge_names_the_bests_at_the_grids_smallest_or_largest_learning_rate():
    svb = pd.DataFrame({"method": ["backprop"] * 4, "target": [1.0] * 4, "batch_size": [32, 128, 512, 2048],
                        "lr": [1e-4, 1e-3, 1e-2, 3e-3], "step": [9.0, 8, 7, 6], "examples": [1.0] * 4,
                        "step_min": [1.0] * 4, "step_max": [1.0] * 4})
    lrs = {32: [1e-4, 3e-4, 1e-3], 128: [3e-4, 1e-3, 1e-2], 512: [1e-3, 1e-2], 2048: [3e-3]}
    edges = ef.lr_at_edge(svb, lambda b, method: lrs[b])
    assert list(edges.batch_size) == [32, 512, 2048] and list(edges.edge) == ["lowest", "highest", "only"]
    assert edges.swept.iloc[0] == [1e-4, 3e-4, 1e-3]
    assert ef.lr_at_edge(svb.iloc[1:2], lambda b, method: lrs[b]).empty


def test_sensitivity_compares_rules():
    parts = []
    for method, crit in (("backprop", 4.0), ("greedy", 1.0)):
        for b in (8, 32):
            losses = list(np.linspace(2.0, 0.5, 40))
            parts.append(run(method, b, losses, crit=crit, eval_losses={s: losses[s - 1] for s in range(4, 41, 4)}))
    df = pd.concat(parts, ignore_index=True)
    sens = ef.sensitivity(df, [1.0], ["eval", "examples:32", "steps:1"])
    assert set(sens["rule"]) == {"eval", "examples:32", "steps:1"}
    spread = ef.sensitivity_spread(sens)
    # identical curves for both methods: the speedup is the critical-path ratio under every rule
    assert spread["high_compute_speedup_min"].iloc[0] == pytest.approx(4.0)
    assert spread["high_compute_speedup_agrees"].iloc[0]


def test_regime_by_rule_reads_the_last_doubling_under_each_rule():
    # training loss 2 - step / S(B) with S(B) = 10 * (1 + 64 / B); evaluations every step
    parts = []
    for b in (64, 128, 256):
        scale = 10 * (1 + 64 / b)
        losses = [2 - s / scale for s in range(1, 40)]
        parts.append(run("backprop", b, losses, eval_losses={s: v for s, v in enumerate(losses, 1)}))
    df = pd.concat(parts)
    table = ef.regime_by_rule(df, [1.0], ["eval", "steps:1"], within=1.25).set_index("rule")
    # loss 1.0 is reached at step S(B): 15 at 128 and 12.5 -> 13 at 256
    assert table.loc["eval", "last_doubling"] == pytest.approx(15 / 13)
    assert table.loc["eval", "in_regime"] and table.loc["eval", "largest_batch"] == 256
    assert table.loc["steps:1", "last_doubling"] == pytest.approx(15 / 13)
    strict = ef.regime_by_rule(df, [1.0], ["eval"], within=1.1)
    assert not strict["in_regime"].iloc[0]
    # a target the largest batches never reach is not in the regime (nothing shows it is)
    never = ef.regime_by_rule(df, [-5.0], ["eval"])
    assert math.isnan(never["last_doubling"].iloc[0]) and not never["in_regime"].iloc[0]


def test_regime_by_rule_reads_a_gap_of_two_doublings_per_doubling():
    # loss 1.0 reached at step S(B) = 10 * (1 + 256 / B): 30 at 128, 15 at 512 (two doublings apart)
    parts = []
    for b in (128, 512):
        scale = 10 * (1 + 256 / b)
        losses = [2 - s / scale for s in range(1, 60)]
        parts.append(run("backprop", b, losses, eval_losses={s: v for s, v in enumerate(losses, 1)}))
    table = ef.regime_by_rule(pd.concat(parts), [1.0], ["eval"]).iloc[0]
    assert math.isnan(table["last_doubling"])                 # not one doubling apart
    assert table["per_doubling"] == pytest.approx(2 ** 0.5)
    assert not table["in_regime"]                             # 1.41x per doubling


def test_regime_start_is_where_every_further_doubling_cuts_less_than_the_bar():
    svb = pd.DataFrame({"batch_size": [32, 64, 128, 512, 1024], "step": [1000.0, 500, 300, 200, 190]})
    # 64 -> 128 cuts 1.67x; 128 -> 512 cuts 1.5x over two doublings (1.22x each); 512 -> 1024 1.05x
    assert ef.regime_start(svb, within=1.25) == 128
    assert ef.regime_start(svb, within=1.2) == 512
    assert math.isnan(ef.regime_start(svb, within=1.01))


def _fronts_and_tables():
    """Backprop's frontier ends at compute 40, greedy's runs go on to 100: at the high-compute end
    backprop is held flat past its last run; greedy's maximum is at its smallest batch."""
    rows = []
    for method, seed, pts in (("backprop", 0, [(8, 10, 100.0), (16, 20, 60), (32, 40, 40)]),
                              ("backprop", 1, [(8, 10, 100.0), (16, 20, 50), (32, 40, 44)]),
                              ("greedy", 0, [(8, 12, 20.0), (32, 40, 16), (128, 100, 8)]),
                              ("greedy", 1, [(8, 12, 25.0), (32, 40, 20), (128, 100, 10)])):
        for batch, compute, time in pts:
            rows.append({"point_id": f"{method}-{batch}-{seed}", "method": method, "batch_size": batch, "lr": 1e-3,
                         "seed": seed, "target": 1.0, "reached": True, "step": time, "examples": compute,
                         "compute": float(compute), "time": time})
    ttt = pd.DataFrame(rows)
    configs = ef.over_seeds(ttt)
    svb = ef.steps_vs_batch(ttt)
    sp = ef.speedup(configs)
    return ef.StudyTables(rule="eval", targets=[1.0], ttt=ttt, configs=configs, steps_vs_batch=svb,
                          critical=ef.critical_batch(svb), fronts=ef.staircase(configs), speedup=sp,
                          per_seed=ef.per_seed_curves(ttt), headline=ef.speedup_table(ttt))


def test_verdict_gives_the_high_compute_shared_and_maximum_readings_with_where_they_sit():
    tables = _fronts_and_tables()
    v = ef.verdict_table(tables).set_index("method").loc["greedy"]
    # high-compute end: compute 40 (backprop's largest), greedy's batch-32 run (median time 18) against 42
    assert v["high_compute"] == 40 and v["high_compute_speedup"] == pytest.approx(42 / 18)
    assert (v["high_batch"], v["high_baseline_batch"], v["high_compute_ratio"]) == (32, 32, 1.0)
    # both frontiers' last runs: backprop's at 40, greedy's at 100 -> shared at 40
    assert v["shared_compute"] == 40 and v["shared_speedup"] == pytest.approx(42 / 18)
    # each seed's own frontiers: seed 0 40 / 16, seed 1 44 / 20
    assert (v["shared_speedup_lo"], v["shared_speedup_hi"]) == pytest.approx((44 / 20, 40 / 16))
    # the maximum: compute 12, greedy's batch 8 (22.5) against backprop's batch 8 (100)
    assert v["max_speedup"] == pytest.approx(100 / 22.5) and v["max_compute"] == 12
    assert (v["max_batch"], v["max_baseline_batch"]) == (8, 8)
    # backprop's steps (median over seeds) 100, 55, 42: 8 -> 16 cuts 1.82x, 16 -> 32 1.31x: no regime at 1.25
    assert math.isnan(v["regime_start"]) and not v["max_in_regime"]
    assert ef.verdict_table(tables, within=1.5).set_index("method").loc["greedy", "regime_start"] == 16


def test_shared_end_speedup_stops_where_the_first_frontier_ends():
    fronts = ef.staircase(pd.DataFrame({"method": ["backprop", "backprop", "greedy", "greedy"], "target": 1.0,
                                        "compute": [10.0, 40, 12, 100], "time": [100.0, 40, 20, 8]}))
    s = ef.shared_end_speedup(fronts).iloc[0]
    assert (s["baseline_end"], s["method_end"], s["shared_compute"]) == (40, 100, 40)
    assert s["shared_speedup"] == pytest.approx(40 / 20)


def test_step_ratio_is_the_methods_steps_over_backprops_at_each_batch():
    svb = pd.DataFrame({"method": ["backprop", "backprop", "greedy", "greedy", "greedy"], "target": 1.0,
                        "batch_size": [32, 64, 32, 64, 128], "step": [100.0, 60, 130, 180, 90]})
    r = ef.step_ratio_table(svb)
    assert list(r.batch_size) == [32, 64] and list(r.step_ratio) == pytest.approx([1.3, 3.0])
