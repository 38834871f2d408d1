"""The README's race row against the committed race: every run is there, the kept tables are what
the runs give, and every number the row quotes is recomputed here from the runs by the package."""
from pathlib import Path

import pandas as pd

from paper_repro import race, settings
from paper_repro.analysis import race as race_tables

ROOT = Path(__file__).resolve().parents[1]
S = settings.race_settings("cpu")
STORE = ROOT / "results" / S.name


def _tables():
    ttt = race_tables.time_to_target(race_tables.load_race(STORE), S.targets)
    table = race_tables.race_table(ttt)
    return ttt, table, race_tables.fastest_table(table, ttt)


def test_every_run_is_there_and_the_kept_tables_are_what_the_runs_give():
    ttt, table, fastest = _tables()
    assert set(ttt["run_id"]) == {r.run_id for r in race.race_runs(S, ROOT / "results")}
    for name, recomputed in (("race_table", table), ("fastest", fastest)):
        kept = pd.read_csv(STORE / f"{name}.csv")
        numeric = [c for c in recomputed.columns if pd.api.types.is_float_dtype(recomputed[c])]
        pd.testing.assert_frame_equal(kept[numeric], recomputed[numeric].reset_index(drop=True),
                                      check_dtype=False, rtol=5e-4, atol=0)


def test_the_readme_row_quotes_the_runs():
    _, _, fastest = _tables()
    row = next(line for line in (ROOT / "README.md").read_text().splitlines()
               if line.startswith("| [Time to target on real processes (beyond the paper)]"))
    best = fastest[fastest["target"] == min(S.targets)].set_index("strategy")
    first = best.index[0]                                   # sorted by seconds: who got there first
    ref = best.loc[best.loc[first, "reference"]]
    local, one = best.loc["local chunked-2"], best.loc["one process"]
    assert first == "local chunked-2" and best.loc[first, "reference"] == "ddp"
    assert (f"local chunked-2 {local.seconds:.1f} s [{local.seconds_min:.1f}-{local.seconds_max:.1f}], fastest "
            f"backprop strategy (DDP) {ref.seconds:.1f} s [{ref.seconds_min:.1f}-{ref.seconds_max:.1f}], one "
            f"process {one.seconds:.1f} s: **{local.speedup:.2f}x** [{local.speedup_min:.2f}-"
            f"{local.speedup_max:.2f} repeat by repeat]") in row
    assert f"greedy {best.loc['local greedy', 'speedup']:.2f}x" in row
    assert f"`local/M` {best.loc['local/M chunked-2', 'speedup']:.2f}x" in row
