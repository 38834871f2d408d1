"""`paper-repro sweep STUDY --status`: how far a store is and where a best learning rate sits at
its grid's edge, read from the runs saved so far, training nothing; checked against a direct
reading of a tiny real store's curves."""
import numpy as np
import pandas as pd
import pytest

from paper_repro import cli, settings, studies, sweep

TARGET = 1.8
TINY = dict(name="mlp_status_tiny", model="mlp", dataset="digits", model_kwargs=dict(depth=2, width=32),
            methods=["backprop", "greedy"], batch_sizes=[32, 128], lrs=[1e-4, 1e-3], seeds=[0, 1], steps=60,
            eval_examples=100, eval_every_examples=64, train_eval_examples=200, description="2x32 MLP")


@pytest.fixture
def tiny(monkeypatch, tmp_path):
    monkeypatch.setitem(settings.compute._GRIDS, ("mlp", "cpu"), dict(TINY))
    monkeypatch.setitem(settings._ANALYSIS, ("mlp", "cpu"), dict(rule="eval", rules=["eval"], targets=[2.0, TARGET]))
    return tmp_path


def _best_lrs(df: pd.DataFrame) -> dict:
    """(method, batch size) -> the learning rate with the fewest median steps over seeds to TARGET
    on the training-subset evaluations, read straight from the curves (ties: the smaller rate)."""
    steps = {}
    for (method, batch, lr, seed), run in df.groupby(["method", "batch_size", "lr", "seed"]):
        run = run[run.train_eval_loss.notna()].sort_values("step")
        hit = run.step[run.train_eval_loss <= TARGET]
        steps.setdefault((method, batch, lr), []).append(hit.iloc[0] if len(hit) else np.nan)
    medians = {k: float(np.median(v)) for k, v in steps.items() if not np.isnan(v).any()}
    best = {}
    for (method, batch, lr), s in sorted(medians.items()):
        if (method, batch) not in best or s < best[(method, batch)][1]:
            best[(method, batch)] = (lr, s)
    return best


def test_status_names_each_best_learning_rate_at_its_grids_edge_and_trains_nothing(tiny, capsys):
    root = tiny / TINY["name"]
    assert cli.main(["sweep", "mlp", "--profile", "cpu", "--results", str(tiny), "--status"]) == 0
    out = capsys.readouterr().out
    assert "0 of 16 points saved" in out and "no runs of the grid saved yet" in out
    assert not root.exists() or not sweep.finished_ids(root)             # nothing trained

    sweep.run_sweep(settings.compute_grid("mlp", "cpu"), root, progress=False, threads=1)
    best = _best_lrs(sweep.load_results(root))
    assert best, "no configuration reaches the target: the tiny grid is too short to test anything"
    report = studies.lr_edge_report("mlp", "cpu", results_dir=tiny)
    # with two rates swept every best is at an edge: one line per (method, batch) reaching the target
    assert len(report) == len(best)
    for (method, batch), (lr, step) in best.items():
        edge = "highest" if lr == max(TINY["lrs"]) else "lowest"
        line = next(r for r in report if r.startswith(f"{method} at batch {batch}:"))
        assert f"best learning rate {lr:g} ({step:.0f} steps to loss {TARGET:g}) is the {edge} of 0.0001, 0.001" in line
        assert "run so far" not in line and f"'{method}@{batch}'" in line

    assert cli.main(["sweep", "mlp", "--profile", "cpu", "--results", str(tiny), "--status"]) == 0
    out = capsys.readouterr().out
    assert "16 of 16 points saved" in out and "learning rates:" in out
    assert all(f"  {line}" in out for line in report)


def test_a_rate_added_beyond_the_edge_and_not_yet_run_is_counted(tiny):
    root = tiny / TINY["name"]
    sweep.run_sweep(settings.compute_grid("mlp", "cpu"), root, progress=False, threads=1)
    best = _best_lrs(sweep.load_results(root))
    (method, batch), (lr, _) = next(iter(best.items()))
    top = lr == max(TINY["lrs"])
    # a rate beyond the grid's other edge, not run yet: the best is still at its edge, 2 of 3 run
    settings.compute._GRIDS[("mlp", "cpu")] = dict(TINY, extra_lrs={
        f"{method}@{batch}": [min(TINY["lrs"]) / 10 if top else max(TINY["lrs"]) * 10]})
    line = next(r for r in studies.lr_edge_report("mlp", "cpu", results_dir=tiny)
                if r.startswith(f"{method} at batch {batch}:"))
    assert "(2 of 3 run so far)" in line
    # a rate beyond the best's own edge: the best is inside its grid now, and no line names it
    settings.compute._GRIDS[("mlp", "cpu")] = dict(TINY, extra_lrs={f"{method}@{batch}": [lr * 10 if top else lr / 10]})
    assert not any(r.startswith(f"{method} at batch {batch}:")
                   for r in studies.lr_edge_report("mlp", "cpu", results_dir=tiny))
