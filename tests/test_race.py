"""The race (paper_repro.race, notebook 10): learning rates from the committed study, the order of
the runs, and the tables read from a store (hand-made records here; the quick race itself runs
under nbval in notebook 10)."""
import dataclasses
import json
import math

import pandas as pd
import pytest

from paper_repro import cli, race, settings
from paper_repro.analysis import race as tables
from paper_repro.settings.types import RaceStrategy


def test_learning_rates_come_from_the_nearest_studied_batch_halfway_ties_to_the_smaller(tmp_path):
    (tmp_path / "study").mkdir()
    pd.DataFrame({"method": ["greedy"] * 3, "target": [1.3] * 3, "batch_size": [32, 128, 1024],
                  "lr": [1e-4, 3e-4, 3e-3]}).to_csv(tmp_path / "study" / "steps_vs_batch.csv", index=False)
    s = dataclasses.replace(settings.race_settings("cpu"), lr_store="study", lr_target=1.3)
    assert race.race_lr(s, "greedy", 64, tmp_path) == 1e-4        # halfway between 32 and 128
    assert race.race_lr(s, "greedy", 100, tmp_path) == 3e-4
    assert race.race_lr(s, "greedy", 4096, tmp_path) == 3e-3
    with pytest.raises(ValueError, match="no best learning rate of 'backprop' at loss 1.3"):
        race.race_lr(s, "backprop", 64, tmp_path)
    with pytest.raises(ValueError, match="which is missing"):
        race.race_lr(dataclasses.replace(s, lr_store="nowhere"), "greedy", 64, tmp_path)


def test_the_cpu_race_reads_every_learning_rate_from_the_committed_deep_study():
    s = settings.race_settings("cpu")
    study = pd.read_csv(race.RESULTS / s.lr_store / "steps_vs_batch.csv")
    runs = race.race_runs(s)
    assert len(runs) == len(s.strategies) * len(s.batches) * s.repeats
    for r in runs:
        assert r.lr in set(study[(study["method"] == r.method) & (study["target"] == s.lr_target)]["lr"])
        assert r.update_batch == (r.batch // s.micro_batches if r.strategy.schedule == "local" else r.batch)


def test_runs_go_one_process_first_then_the_launch_in_an_order_turned_each_repeat():
    s = dataclasses.replace(settings.race_settings("quick"), repeats=2)
    runs = race.race_runs(s)
    first, second = [r.strategy.name for r in runs if r.repeat == 0], [r.strategy.name for r in runs if r.repeat == 1]
    assert first[0] == second[0] == "one process"
    assert second[1:] == first[2:] + first[1:2]


def _store(tmp_path, runs):
    (tmp_path / "runs").mkdir(parents=True)
    for meta, rows in runs:
        pd.DataFrame(rows).to_csv(tmp_path / "runs" / f"{meta['run_id']}.csv", index=False)
        (tmp_path / "runs" / f"{meta['run_id']}.json").write_text(json.dumps(meta))
    return tmp_path


def _run(name, schedule, batch, repeat, losses, seconds, per_update, eval_time, startup=2.0, method="backprop"):
    meta = dict(run_id=f"{name}-b{batch}-r{repeat}", strategy=name, schedule=schedule, method=method, batch=batch,
                repeat=repeat, lr=1e-3, update_batch=per_update, eval_time=eval_time, startup_time=startup,
                status="finished")
    rows = [dict(step=i + 1, examples=(i + 1) * per_update, train_eval_loss=v, wall_time=t)
            for i, (v, t) in enumerate(zip(losses, seconds))]
    return meta, rows


def test_the_tables_time_each_target_decompose_the_ratio_and_pick_each_strategys_fastest_batch(tmp_path):
    store = _store(tmp_path, [
        _run("one process", "single", 64, 0, [2.0, 1.0, 0.5], [1.0, 2.0, 3.0], 64, eval_time=0.3),
        _run("one process", "single", 64, 1, [2.0, 1.0, 0.4], [1.0, 2.5, 4.0], 64, eval_time=0.3),
        _run("local greedy", "local", 64, 0, [1.5, 0.9, 0.8, 0.45], [0.5, 0.9, 1.2, 1.5], 16, eval_time=0.4,
             method="greedy"),
        _run("local greedy", "local", 64, 1, [1.5, 0.9, 0.8, 0.45], [0.6, 1.0, 1.3, 1.6], 16, eval_time=0.4,
             method="greedy"),
        _run("local greedy", "local", 128, 0, [1.5, 0.45, math.nan], [0.5, 1.1, 1.2], 32, eval_time=0.2,
             method="greedy"),
        _run("local greedy", "local", 128, 1, [1.5, 0.45, math.nan], [0.5, 1.3, 1.4], 32, eval_time=0.2,
             method="greedy"),
    ])
    ttt = tables.time_to_target(tables.load_race(store), [1.0, 0.5])
    row = ttt[(ttt["run_id"] == "local greedy-b64-r0") & (ttt["target"] == 0.5)].iloc[0]
    # reached at the 4th evaluation of 4: all 0.4 s of evaluation counted; 64 examples in 1.1 s of training
    assert (row["seconds"], row["updates"], row["examples"]) == (1.5, 4, 64)
    assert row["eval_seconds"] == pytest.approx(0.4) and row["samples_per_s"] == pytest.approx(64 / 1.1)
    table = tables.race_table(ttt)
    at = table[(table["target"] == 0.5) & (table["batch"] == 64)].set_index("strategy")
    assert at.loc["one process", "seconds"] == 3.5 and at.loc["one process", "seconds_max"] == 4.0
    assert (at["reference"] == "one process").all() and at.loc["one process", "speedup"] == 1
    assert at.loc["local greedy", "speedup"] == pytest.approx(3.5 / 1.55)
    ratio = at["examples_ratio"] * at["throughput_ratio"]
    assert ratio.to_numpy() == pytest.approx(at["training_time_ratio"].to_numpy())
    fastest = tables.fastest_table(table)
    greedy = fastest[(fastest["target"] == 0.5) & (fastest["strategy"] == "local greedy")].iloc[0]
    assert greedy["batch"] == 128 and greedy["seconds"] == pytest.approx(1.2)
    # the ratio repeat by repeat: each repeat's one-process run over that repeat's greedy run at batch 128
    paired = tables.fastest_table(table, ttt)
    greedy = paired[(paired["target"] == 0.5) & (paired["strategy"] == "local greedy")].iloc[0]
    assert greedy["speedup"] == pytest.approx(3.5 / 1.2)
    assert (greedy["speedup_min"], greedy["speedup_max"]) == (pytest.approx(3.0 / 1.1), pytest.approx(4.0 / 1.3))


def test_a_bad_race_profile_exits_2(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["race", "--profile", "bogus"])
    assert info.value.code == 2 and "invalid choice: 'bogus'" in capsys.readouterr().err
