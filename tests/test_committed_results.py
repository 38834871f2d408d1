"""The README's MLP and Transformer LM rows against their committed stores: the tables kept beside
the points are what the points give, and every number a row quotes is recomputed here from the
points by the package (median [range over seeds])."""
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from paper_repro import analysis, settings, studies

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "results" / "mlp_deep_ln_cifar10_8px_cpu"
# numbers of the setting, not measurements: the net (10x256), the data (CIFAR-10, 8 px), the machine
# (CPU x2) and the paper's claim (up to 10x)
SETTING = {"10", "256", "8", "2"}
LM_STORE = ROOT / "results" / "transformer_lm_stdlib_cpu"
# the LM's setting: 4 layers, d=64, 64-byte windows, CPU x2, the paper's up to 2x
LM_SETTING = {"4", "64", "2"}


@pytest.fixture(scope="module")
def deep():
    return studies.compute_study("mlp-deep", "cpu", results_dir=ROOT / "results", train_missing=False)


@pytest.fixture(scope="module")
def lm():
    return studies.compute_study("transformer-lm", "cpu", results_dir=ROOT / "results", train_missing=False)


@pytest.fixture(scope="module")
def modules():
    return studies.modules_study("cpu", results_dir=ROOT / "results", train_missing=False)


def _row(claim: str) -> str:
    return next(line for line in (ROOT / "README.md").read_text().splitlines()
                if line.startswith(f"| [Speedup at equal compute, {claim}]"))


def _kept(name: str, store: Path = STORE) -> pd.DataFrame:
    return pd.read_csv(store / f"{name}.csv")


def _same(kept: pd.DataFrame, recomputed: pd.DataFrame, keys) -> None:
    """A kept CSV (4 significant digits) equals the recomputed table, row for row."""
    cols = list(recomputed.columns)
    a = kept[cols].sort_values(keys).reset_index(drop=True)
    b = recomputed[cols].sort_values(keys).reset_index(drop=True)
    empty = [c for c in cols if b[c].isna().all()]   # a CSV keeps None as an empty cell, read back as NaN
    assert a[empty].isna().all().all(), a[empty]
    a, b = a.drop(columns=empty), b.drop(columns=empty)
    pd.testing.assert_frame_equal(a, b, check_dtype=False, rtol=5e-4, atol=0)


def test_the_store_is_complete_and_its_tables_are_what_its_points_give(deep, modules):
    grid = settings.compute_grid("mlp-deep", "cpu")
    assert deep.records.point_id.nunique() == len(grid.points()) and deep.records.seed.nunique() >= 2
    cols = ["method", "target", "high_compute_speedup", "high_compute_speedup_lo", "high_compute_speedup_hi"]
    _same(_kept("headline")[cols], deep.tables.headline[cols], cols[:2])
    _same(_kept("verdict"), deep.verdict(), ["method", "target"])
    _same(_kept("step_ratio"), deep.step_ratio(), ["method", "target", "batch_size"])
    _same(_kept("regime_by_rule"), deep.regime(), ["rule", "target"])
    _same(_kept("cost"), analysis.cost_table(deep.records).reset_index(), ["method"])
    _same(_kept("speedup_vs_modules"), modules.table, ["depth", "method", "target"])
    _same(_kept("regime_by_depth"), modules.regime, ["depth", "rule", "target"])


def _study_quotes(study, locals_: list[str], lead: str = "greedy") -> list[str]:
    """The phrases of a compute study's README row that carry its readings at its lowest target:
    every local method's high-compute speedup (median [range over seeds] (critical-path ratio)),
    the reading rules' spread, the lead method at the largest compute both frontiers reach and at
    its maximum over compute, and backprop's last doubling."""
    low = min(study.targets)
    v = study.verdict().set_index(["method", "target"]).xs(low, level="target")
    ratio = analysis.cost_table(study.records).critical_path_vs_backprop
    assert set(v.index) == set(locals_)
    quotes = [f"loss {low:g}"]
    quotes += [f"{m} {v.loc[m, 'high_compute_speedup']:.2f}x [{v.loc[m, 'high_compute_speedup_lo']:.2f}-"
               f"{v.loc[m, 'high_compute_speedup_hi']:.2f}] ({ratio[m]:.1f})" for m in locals_]
    sens = study.sensitivity()
    sens = sens[sens.target == low].groupby("method").high_compute_speedup.agg(lambda s: s.max() / s.min() - 1)
    quotes.append(f"within {math.ceil(100 * sens.max())}% under every reading rule")
    g = v.loc[lead]
    quotes.append(f"at the largest compute both reach: {lead} {g.shared_speedup:.2f}x [{g.shared_speedup_lo:.2f}-"
                  f"{g.shared_speedup_hi:.2f}]")
    quotes.append(f"maximum over compute: {lead} {g.max_speedup:.2f}x [{g.max_speedup_lo:.2f}-{g.max_speedup_hi:.2f}] "
                  f"at batch {g.max_batch}, {'in' if g.max_in_regime else 'outside'} the regime")
    regime = study.regime()
    assert regime.in_regime.all()
    big = int(regime.largest_batch.max())
    quotes.append(f"{big // 2} -> {big} cuts its steps {regime.per_doubling.min():.2f}-{regime.per_doubling.max():.2f}x")
    return quotes


def _quotes(deep, modules) -> list[str]:
    """Every phrase of the README's MLP row that carries a number, built from the recomputed tables."""
    quotes = _study_quotes(deep, ["greedy", "overlapping", "chunked-3", "chunked-2"])
    low = min(deep.targets)
    greedy = deep.verdict().set_index(["method", "target"]).loc[("greedy", low)]
    by_depth = modules.regime_by_depth().set_index("depth")
    inside, outside = list(by_depth.index[by_depth.in_regime]), list(by_depth.index[~by_depth.in_regime])
    depth = settings.compute_grid("mlp-deep", "cpu").model_kwargs["depth"]
    # backprop is in the regime at one depth of the series and in the deep study at its own depth
    assert len(inside) == 1 and depth in outside and max(outside) > inside[0]
    shallow = modules.table.set_index(["depth", "method", "target"]).loc[(inside[0], "greedy", low)]
    assert shallow.high_compute_speedup < greedy.high_compute_speedup
    quotes.append(f"greedy grows from {shallow.high_compute_speedup:.2f}x at {inside[0]} modules to "
                  f"{greedy.high_compute_speedup:.2f}x at {depth}")
    return quotes


def _numbers(text: str) -> list[str]:
    text = re.sub(r"`[^`]*`", "", text)                  # file names
    text = re.sub(r"\]\([^)]*\)", "]", text)             # link targets
    return re.findall(r"\d+(?:\.\d+)?(?:e\d+)?", text)


def _assert_row_quotes(row: str, quotes: list[str], setting: set[str]) -> None:
    """Every quote is in the row, and every number of the row is a quote's or the setting's."""
    assert "critical-path ratio" in row
    missing = [q for q in quotes if q not in row]
    assert not missing, missing
    recomputed = {n for q in quotes for n in _numbers(q)} | setting
    unexplained = [n for n in _numbers(row) if n not in recomputed]
    assert not unexplained, f"the README row quotes numbers no test recomputes: {unexplained}"


def test_every_number_in_the_readme_mlp_row_is_recomputed_from_the_points(deep, modules):
    row = _row("MLP")
    assert "mlp_deep_ln_cifar10_8px_cpu/verdict.csv" in row
    _assert_row_quotes(row, _quotes(deep, modules), SETTING)
    assert "**no, 10x not reached in the high-compute regime**" in row


def test_the_transformer_lm_store_is_complete_and_its_tables_are_what_its_points_give(lm):
    grid = settings.compute_grid("transformer-lm", "cpu")
    # the runs beyond the grid that the store keeps (an earlier grid's) are not read
    assert {p["point_id"] for p in grid.points()} == set(lm.records.point_id) and lm.records.seed.nunique() >= 2
    cols = ["method", "target", "high_compute_speedup", "high_compute_speedup_lo", "high_compute_speedup_hi"]
    _same(_kept("headline", LM_STORE)[cols], lm.tables.headline[cols], cols[:2])
    _same(_kept("verdict", LM_STORE), lm.verdict(), ["method", "target"])
    _same(_kept("step_ratio", LM_STORE), lm.step_ratio(), ["method", "target", "batch_size"])
    _same(_kept("regime_by_rule", LM_STORE), lm.regime(), ["rule", "target"])
    _same(_kept("cost", LM_STORE), analysis.cost_table(lm.records).reset_index(), ["method"])
    _same(_kept("sensitivity", LM_STORE), lm.sensitivity(), ["rule", "method", "target"])


def test_every_number_in_the_readme_transformer_lm_row_is_recomputed_from_the_points(lm):
    row = _row("Transformer LM")
    assert "transformer_lm_stdlib_cpu/verdict.csv" in row
    _assert_row_quotes(row, _study_quotes(lm, ["greedy", "overlapping", "chunked-2"]), LM_SETTING)
    assert "**yes: 2x reached" in row


@pytest.mark.parametrize("study", ["mlp", "mlp-deep", "transformer", "transformer-lm", "resnet"])
def test_each_committed_headline_is_read_at_the_targets_the_settings_name(study):
    """Notebook 01 at the cpu profile writes the store's tables again at the settings' targets:
    they must be the targets the committed tables (and the README's numbers) were read at."""
    grid = settings.compute_grid(study, "cpu")
    headline = pd.read_csv(ROOT / "results" / grid.name / "headline.csv")
    assert sorted(set(headline.target)) == sorted(settings.analysis_settings(study, "cpu")["targets"])
