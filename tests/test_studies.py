"""A compute study end to end on a tiny digits sweep: what notebook 01 calls instead of
repeating analysis cells (sensitivity, regime, claims, the tables kept beside the store)."""
import pandas as pd
import pytest

from paper_repro import analysis, settings, studies, sweep
from paper_repro.hardware import hardware_label

TINY = dict(name="mlp_tiny_cpu", model="mlp", dataset="digits", model_kwargs=dict(depth=3, width=32),
            methods=["backprop", "greedy"], batch_sizes=[32, 128], lrs=[3e-3], seeds=[0, 1], steps=60,
            eval_examples=100, eval_every_examples=64, train_eval_examples=200, description="3x32 MLP")
READING = dict(rule="eval", rules=["eval", "examples:256"], targets=[1.8, 1.4])


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(settings._GRIDS, ("mlp", "cpu"), TINY)
        mp.setitem(settings._ANALYSIS, ("mlp", "cpu"), READING)
        yield studies.compute_study("mlp", "cpu", results_dir=root)


def test_sensitivity_and_regime_read_every_rule_at_every_target(study):
    expected = analysis.sensitivity(study.records, [1.8, 1.4], READING["rules"])
    pd.testing.assert_frame_equal(study.sensitivity(), expected)
    regime = study.regime()
    pd.testing.assert_frame_equal(regime, analysis.regime_by_rule(study.records, [1.8, 1.4], READING["rules"]))
    assert len(regime) == 2 * 2


def test_lr_edges_read_the_lowest_target_against_the_grids_learning_rates(study):
    edges = study.lr_edges()
    svb = study.tables.steps_vs_batch
    assert len(edges) == len(svb[svb.target == 1.4]) > 0   # one learning rate swept: every best is "only"
    assert set(edges.edge) == {"only"} and set(edges.target) == {1.4}


def test_claims_name_where_the_numbers_come_from(study):
    claims = study.claims(10, "MLP: fewer steps")
    row = claims.iloc[0]
    assert row.claim == "MLP: fewer steps" and row.paper == "up to 10x"
    assert row.profile == "cpu" and row.rule == "eval" and row.hardware == hardware_label("cpu")
    assert row.runs == len(study.grid.points()) == 8 and row.seeds == 2
    assert study.claims(None, "x").iloc[0].paper == "no number stated"


def test_save_keeps_the_tables_beside_the_store_points_but_not_for_quick(study, tmp_path):
    study.save(sensitivity=study.sensitivity())
    kept = {p.stem for p in study.root.glob("*.csv")}
    assert {"headline", "critical_batch", "steps_vs_batch", "sensitivity"} <= kept
    headline = pd.read_csv(study.root / "headline.csv")
    assert list(headline.columns) == list(study.tables.headline.columns)
    assert len(headline) == len(study.tables.headline) > 0
    assert len(sweep.load_results(study.root)) == len(study.records)  # the points are untouched
    quick = studies.Study(**{**study.__dict__, "profile": "quick", "root": tmp_path})
    quick.save(sensitivity=study.sensitivity())
    assert not list(tmp_path.glob("*.csv"))


def test_a_study_reads_only_its_grids_runs_and_says_how_many_more_the_store_holds(study):
    assert study.summary().startswith("8 of 8 runs, ") and "beyond" not in study.summary()
    # the same store read by a grid that dropped greedy: its runs stay in the store, unread, and said so
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(settings._GRIDS, ("mlp", "cpu"), {**TINY, "methods": ["backprop"]})
        mp.setitem(settings._ANALYSIS, ("mlp", "cpu"), READING)
        narrow = studies.compute_study("mlp", "cpu", results_dir=study.root.parent, train_missing=False)
    assert set(narrow.records.method) == {"backprop"} and narrow.beyond_grid == 4
    assert narrow.summary().startswith("4 of 4 runs (4 more in the store, beyond the grid, not read), ")
    backprop = study.records[study.records.method == "backprop"].reset_index(drop=True)
    pd.testing.assert_frame_equal(narrow.records.sort_values(["point_id", "step"]).reset_index(drop=True),
                                  backprop.sort_values(["point_id", "step"]).reset_index(drop=True))
