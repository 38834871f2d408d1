"""Agreement between independent measurements of the same runs, and the simulator's against them."""
import pandas as pd
import pytest

from paper_repro.simulate.remeasure import agreement, summary


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
