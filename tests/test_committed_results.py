"""The README's MLP headline against the committed deep-MLP store: the tables kept beside the
points are what the points give, and the README quotes them (median [range over seeds])."""
import re
from pathlib import Path

import pandas as pd
import pytest

from paper_repro import analysis, settings, sweep

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "results" / "mlp_deep_ln_cifar10_8px_cpu"


@pytest.fixture(scope="module")
def recomputed():
    df = sweep.load_results(STORE)
    reading = settings.analysis_settings("mlp-deep", "cpu")
    return df, analysis.study_tables(df, reading["targets"], reading["rule"])


def test_the_store_is_complete_and_its_headline_table_is_what_its_points_give(recomputed):
    df, tables = recomputed
    grid = settings.compute_grid("mlp-deep", "cpu")
    assert df.point_id.nunique() == len(grid.points()) and df.seed.nunique() >= 2
    kept = pd.read_csv(STORE / "headline.csv")
    cols = ["method", "target", "high_compute_speedup", "high_compute_speedup_lo", "high_compute_speedup_hi"]
    pd.testing.assert_frame_equal(kept[cols].sort_values(cols[:2]).reset_index(drop=True),
                                  tables.headline[cols].sort_values(cols[:2]).reset_index(drop=True),
                                  check_dtype=False, rtol=0, atol=5e-4)  # the CSV keeps 3 decimals


def test_the_readme_mlp_row_quotes_the_committed_headline():
    row = next(line for line in (ROOT / "README.md").read_text().splitlines()
               if line.startswith("| [Speedup at equal compute, MLP]"))
    assert "mlp_deep_ln_cifar10_8px_cpu/headline.csv" in row
    head = pd.read_csv(STORE / "headline.csv")
    low = head[head.target == head.target.min()].set_index("method")
    for method, r in low.iterrows():  # "<method> 4.25x [4.05-4.45]": 2 decimals of the 3 the CSV keeps
        m = re.search(rf"{method} (\d+\.\d+)x \[(\d+\.\d+)-(\d+\.\d+)\]", row)
        assert m, f"README MLP row quotes no speedup for {method}"
        quoted = [float(v) for v in m.groups()]
        kept = [r.high_compute_speedup, r.high_compute_speedup_lo, r.high_compute_speedup_hi]
        assert quoted == pytest.approx(kept, abs=0.0051), (method, quoted, kept)
    assert "critical-path ratio" in row
