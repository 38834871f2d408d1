"""Agreement between independent measurements of the same runs, and the simulator's against them."""
import pandas as pd
import pytest

from research.simulator_validation.remeasure import agreement, compute_vs_1f1b, measurement_files, summary


def _table(local_runs, simulated_local):
    """A validation table of one micro-batch size: 1F1B at 100 samples/s in every repeat, local
    at ``local_runs``; the simulation gives local ``simulated_local`` times 1F1B."""
    ref = [100.0] * len(local_runs)
    return pd.DataFrame([
        {"stages": 2, "micro_batch": 8, "schedule": "local", "measured_runs": list(local_runs),
         "measured_ratio_vs_1f1b": sorted(local_runs)[len(local_runs) // 2] / 100.0,
         "simulated_ratio_vs_1f1b": simulated_local},
        {"stages": 2, "micro_batch": 8, "schedule": "1f1b", "measured_runs": ref,
         "measured_ratio_vs_1f1b": 1.0, "simulated_ratio_vs_1f1b": 1.0},
    ])


def test_counts_compare_measurements_with_each_other_and_with_the_simulations():
    per_ratio = agreement({"a": _table([120, 120, 120], 1.0), "b": _table([100, 100, 100], 1.1)})
    assert len(per_ratio) == 1          # 1F1B's own ratio is left out
    row = per_ratio.iloc[0]
    assert row["measured:a"] == pytest.approx(1.2) and row["measured:b"] == pytest.approx(1.0)
    # 1.2 against 1.0 and 1.0 against 1.2 (-16.7%) are both outside 15%
    assert (row.remeasure_within, row.remeasure_pairs) == (0, 2)
    # own: 1.0 against 1.2 is -16.7% (out), 1.1 against 1.0 is +10% (in)
    assert (row.own_within, row.sets) == (1, 2)
    # others: 1.0 against b's 1.0 (in), 1.1 against a's 1.2 (-8.3%, in)
    assert row.cross_within == 2
    # pooled: the median of the six paired repeats (1.2 x 3, 1.0 x 3) is 1.1; median simulation 1.05
    assert row.measured_pooled == pytest.approx(1.1)
    assert row.pooled_error == pytest.approx(1.05 / 1.1 - 1) and row.pooled_within == 1
    totals = summary(per_ratio)
    assert totals["reproducible_ratios"] == 0 and totals["pooled_within_where_reproducible"] == 0
    assert (totals["own_within"], totals["own_pairs"], totals["cross_within"]) == (1, 2, 2)


def test_a_reproducible_ratio_is_counted_apart():
    per_ratio = agreement({"a": _table([110, 112, 111], 1.5), "b": _table([108, 109, 110], 1.5),
                           "c": _table([111, 111, 111], 1.5)})
    totals = summary(per_ratio)
    assert totals["remeasure_within"] == totals["remeasure_pairs"] == 6
    assert totals["reproducible_ratios"] == 1 and totals["pooled_within_where_reproducible"] == 0


def test_agreement_names_what_is_missing():
    with pytest.raises(ValueError, match="at least 2"):
        agreement({"a": _table([100], 1.0)})
    with pytest.raises(ValueError, match="measured_runs"):
        agreement({"a": _table([100], 1.0).drop(columns=["measured_runs"]), "b": _table([100], 1.0)})


def _record(schedule, micro_batch, fb_per_stage, update_every=1):
    """A ``bench pipeline`` record with 2 timed steps of 4 micro-batches and these stage phases."""
    return {"schedule": schedule, "micro_batch": micro_batch, "steps": 2, "micro_batches": 4,
            "update_every": update_every, "per_stage": [{"phases_s": {"forward_backward": t}} for t in fb_per_stage]}


def test_compute_vs_1f1b_divides_each_stage_by_1f1b_in_the_same_measurement():
    first = [_record("1f1b", 8, [0.8, 1.6]), _record("gpipe", 8, [1.6, 1.6]),
             _record("local", 8, [0.4, 0.8], update_every=4)]
    second = [_record("1f1b", 8, [1.6, 1.6]), _record("gpipe", 8, [1.6, 2.4]),
              _record("local", 8, [0.8, 1.6], update_every=4)]
    df = compute_vs_1f1b([first, second]).set_index(["schedule", "stage"])
    assert df.loc[("gpipe", 0), "compute_vs_1f1b"] == pytest.approx(1.5)     # median of 2.0 and 1.0
    assert (df.loc[("gpipe", 0), "min"], df.loc[("gpipe", 0), "max"]) == pytest.approx((1.0, 2.0))
    assert df.loc[("gpipe", 1), "compute_vs_1f1b"] == pytest.approx(1.25)    # 1.0 and 1.5
    assert df.loc[("local/M", 0), "compute_vs_1f1b"] == pytest.approx(0.5)
    # 1F1B's own time per micro-batch: 0.8 s / 8 and 1.6 s / 8 -> 100 and 200 ms, median 150
    assert df.loc[("1f1b", 0), "1f1b_ms_per_micro_batch"] == pytest.approx(150.0)
    with pytest.raises(ValueError, match="no 1f1b run at micro-batch 8"):
        compute_vs_1f1b([[_record("gpipe", 8, [1.0, 1.0])]])


def test_compute_vs_1f1b_compares_forwards_or_backwards_where_the_runs_timed_them_apart():
    def split(schedule, fwd, bwd):
        r = _record(schedule, 8, [f + b for f, b in zip(fwd, bwd)])
        for st, f, b in zip(r["per_stage"], fwd, bwd):
            st["compute_split_s"] = {"forward": f, "backward": b}
        return r
    old = [_record("1f1b", 8, [1.0, 1.0]), _record("gpipe", 8, [2.0, 2.0])]     # timed no split
    new = [split("1f1b", [0.4, 0.4], [0.8, 0.8]), split("gpipe", [0.4, 0.4], [1.2, 1.0]),
           _record("local", 8, [0.8, 0.8])]
    bwd = compute_vs_1f1b([old, new], part="backward").set_index(["schedule", "stage"])
    assert set(bwd.index.get_level_values("schedule")) == {"1f1b", "gpipe"}
    assert bwd.loc[("gpipe", 0), "compute_vs_1f1b"] == pytest.approx(1.5)
    assert bwd.loc[("gpipe", 0), "measurements"] == 1
    assert compute_vs_1f1b([new], part="forward").set_index(["schedule", "stage"]).loc[
        ("gpipe", 1), "compute_vs_1f1b"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="part='weights'"):
        compute_vs_1f1b([new], part="weights")


def test_measurement_files_lists_the_table_then_its_re_measurements(tmp_path):
    for name in ("v.runs.json", "v_set3.runs.json", "v_set2.runs.json", "other.runs.json"):
        (tmp_path / name).write_text("[]")
    assert [p.name for p in measurement_files(tmp_path / "v")] == ["v.runs.json", "v_set2.runs.json",
                                                                   "v_set3.runs.json"]
    assert measurement_files(tmp_path / "missing") == []


def test_plot_validation_draws_one_panel_per_table_and_counts_the_band():
    import matplotlib
    matplotlib.use("Agg")
    from paper_repro.plots.simulate import plot_validation
    close = agreement({"a": _table([110, 112, 111], 1.12), "b": _table([108, 109, 110], 1.10)}).assign(table="t1")
    far = agreement({"a": _table([110, 112, 111], 1.5), "b": _table([108, 109, 110], 1.5)}).assign(table="t2")
    fig = plot_validation(pd.concat([close, far], ignore_index=True), "title")
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert titles == ["t1: 1 of 1 within 15%", "t2: 0 of 1 within 15%"]
    # the pooled median of the paired repeats may lie outside the measurements' own medians
    outside = close.assign(measured_pooled=close.measured_max * 1.1)
    assert plot_validation(outside, "title").axes[0].get_title() == "t1: 1 of 1 within 15%"
    with pytest.raises(ValueError, match="measured_pooled"):
        plot_validation(close.drop(columns=["measured_pooled"]), "title")


def test_recorded_counts_read_each_measurements_own_table(tmp_path):
    from research.simulator_validation.remeasure import recorded_counts

    def table(name, within):
        (tmp_path / f"{name}.runs.json").write_text("[]")
        pd.DataFrame({"schedule": ["local", "gpipe", "1f1b"], "within_15pct": within,
                      "ratio_rel_error": [0.05, -0.3, 0.0]}).to_csv(tmp_path / f"{name}.csv", index=False)
    table("v", [True, False, True])
    table("v_set2", [True, True, True])
    got = recorded_counts(tmp_path / "v")
    assert got[["measurement", "within", "ratios"]].values.tolist() == [["m1", 1, 2], ["m2", 2, 2]]
    assert got.median_abs_error.tolist() == pytest.approx([0.175, 0.175])
    (tmp_path / "v_set3.runs.json").write_text("[]")
    with pytest.raises(ValueError, match="v_set3.csv not found"):
        recorded_counts(tmp_path / "v")
