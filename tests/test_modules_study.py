"""The speedup-vs-modules study: its grids, its table and its figure, on a tiny digits sweep."""
import matplotlib
import pandas as pd
import pytest
import torch

matplotlib.use("Agg")

from paper_repro import analysis, plots, settings, studies, sweep, train  # noqa: E402

TINY = dict(depths=[2, 4], depth_key="depth", grid=dict(
    name="mlp_depth{depth}_tiny", model="mlp", dataset="digits", model_kwargs=dict(width=32),
    methods=["backprop", "greedy"], batch_sizes=[32, 128], lrs=[3e-3], seeds=[0, 1], steps=80,
    eval_examples=100, eval_every_examples=64, train_eval_examples=200, description="{depth}x32 MLP"))


def test_module_grids_put_the_depth_in_name_model_and_description():
    grids = settings.module_grids("quick")
    assert list(grids) == settings._MODULES["mlp-modules"]["quick"]["depths"]
    for depth, grid in grids.items():
        assert grid.model_kwargs["depth"] == depth and str(depth) in grid.name and str(depth) in grid.description
        grid.validate()
    assert len({g.name for g in grids.values()}) == len(grids)      # one store per depth
    with pytest.raises(ValueError, match="profile"):
        settings.module_grids("huge")


def test_the_transformer_series_puts_the_depth_in_its_layers_and_shares_the_headline_points():
    for profile in ("quick", "cpu"):
        grids = settings.module_grids(profile, "transformer-lm-modules")
        for depth, grid in grids.items():
            grid.validate()
            assert grid.model == "transformer" and grid.model_kwargs["n_layers"] == depth and "depth" not in \
                grid.model_kwargs and str(depth) in grid.name
    # the cpu series at 4 layers is the headline's net: its points are the headline's, copied not trained
    headline = settings.compute_grid("transformer-lm", "cpu")
    [source] = settings.module_sources("cpu", "transformer-lm-modules")
    assert source == headline
    four = settings.module_grids("cpu", "transformer-lm-modules")[4]
    # every headline point at the series' batches and methods, its extra learning rates included
    shared = {p["point_id"] for p in headline.points()
              if p["config"]["batch_size"] in four.batch_sizes and p["config"]["method"] in four.methods}
    assert {p["point_id"] for p in four.points()} == shared
    with pytest.raises(ValueError, match="unknown study 'nope'"):
        settings.module_grids("cpu", "nope")


def test_modules_study_reads_each_depth_and_draws(monkeypatch, tmp_path):
    monkeypatch.setitem(settings._MODULES["mlp-modules"], "cpu", TINY)
    monkeypatch.setitem(settings.STUDIES, "mlp-modules", ("quick", "cpu"))
    monkeypatch.setitem(settings._ANALYSIS, ("mlp-modules", "cpu"), dict(rule="eval", rules=["eval"],
                                                                         targets=[1.8, 1.4]))
    study = studies.modules_study("cpu", results_dir=tmp_path)
    frame = study.table
    assert "depth 2, 4" in study.title("x")
    assert sorted(frame.depth.unique()) == [2, 4] and set(frame.method) == {"greedy"}
    for depth in (2, 4):  # the ratio is the cost table's, and greedy has one module per block
        df = sweep.load_results(tmp_path / f"mlp_depth{depth}_tiny")
        ratio = analysis.cost_table(df).loc["greedy", "critical_path_vs_backprop"]
        rows = frame[frame.depth == depth]
        assert list(rows.critical_path_ratio) == pytest.approx([ratio] * len(rows))
        assert (rows.num_modules == depth).all()
        headline = analysis.study_tables(df, [1.8, 1.4], "eval").headline.set_index("target")
        for _, r in rows.iterrows():
            assert r.high_compute_speedup == pytest.approx(headline.loc[r.target, "high_compute_speedup"])
    assert frame[frame.depth == 4].critical_path_ratio.iloc[0] > frame[frame.depth == 2].critical_path_ratio.iloc[0]
    # one learning rate swept: every (depth, method, batch size) reaching the lowest target is at the edge "only"
    edges = study.lr_edges
    assert set(edges.edge) == {"only"} and set(edges.depth) == {2, 4}
    for depth in (2, 4):
        df = sweep.load_results(tmp_path / f"mlp_depth{depth}_tiny")
        svb = analysis.study_tables(df, [1.8, 1.4], "eval").steps_vs_batch
        reached = svb[svb.target == 1.4]
        assert len(edges[edges.depth == depth]) == len(reached) > 0
    # a second call only reads: the stores are complete
    again = studies.modules_study("cpu", results_dir=tmp_path, train_missing=False).table
    assert again.equals(frame)
    fig = plots.efficiency.plot_speedup_vs_modules(frame, "title")
    assert len(fig.axes) == 2


def test_sweep_command_runs_every_depth_of_the_modules_study(monkeypatch, tmp_path, capsys):
    from paper_repro import cli, commands
    ran = []
    monkeypatch.setattr(commands, "run_sweep", lambda grid, root, **kw: ran.append((grid.name, root, kw["reuse"]))
                        or sweep.SweepReport(total=0, skipped=0))
    assert cli.main(["sweep", "mlp-modules", "--profile", "cpu", "--results", str(tmp_path)]) == 0
    names = [g.name for g in settings.module_grids("cpu").values()]
    assert [r[0] for r in ran] == names and [r[1].name for r in ran] == names
    deep = tmp_path / settings.compute_grid("mlp-deep", "cpu").name   # the depth-10 points come from there
    assert all(r[2] == [deep] for r in ran)
    assert capsys.readouterr().err.count("critical path") == len(names)


def test_the_depth_of_the_deep_study_is_its_points_so_the_modules_study_copies_them():
    deep = settings.compute_grid("mlp-deep", "cpu")
    depth = deep.model_kwargs["depth"]
    grids = settings.module_grids("cpu")
    assert depth in grids and settings.module_sources("cpu") == [deep]
    ids = {p["point_id"] for p in grids[depth].points()}
    assert ids <= {p["point_id"] for p in deep.points()}
    for other, grid in grids.items():   # the other depths are new runs
        if other != depth:
            assert not {p["point_id"] for p in grid.points()} & {p["point_id"] for p in deep.points()}
    assert settings.module_sources("quick") == []


def test_reading_names_the_depths_whose_store_is_not_there_yet(monkeypatch, tmp_path):
    monkeypatch.setitem(settings._MODULES["mlp-modules"], "cpu", dict(TINY, depths=[2]))
    monkeypatch.setitem(settings.STUDIES, "mlp-modules", ("quick", "cpu"))
    monkeypatch.setitem(settings._ANALYSIS, ("mlp-modules", "cpu"), dict(rule="eval", rules=["eval"],
                                                                         targets=[1.8]))
    study = studies.modules_study("cpu", results_dir=tmp_path, train_missing=False)
    assert study.table.empty and len(study.missing) == 1
    assert "depth 2" in study.missing[0] and "mlp_depth2_tiny" in study.missing[0]
    assert "paper-repro sweep mlp-modules --profile cpu" in study.missing[0]
    assert not (tmp_path / "mlp_depth2_tiny").exists()    # reading trains nothing


def test_a_depth_extends_its_learning_rates_where_its_best_sat_at_the_edge():
    grids = settings.module_grids("cpu")
    extra = {d: f["extra_lrs"] for d, f in settings._MODULES["mlp-modules"]["cpu"]["per_depth"].items()}
    for depth, grid in grids.items():
        grid.validate()
        for batch in grid.batch_sizes:
            assert grid.lrs_for(batch) == [*grid.lrs, *extra.get(depth, {}).get(batch, [])]
    assert any(extra.values()) and set(extra) <= set(grids)


def test_a_method_whose_modules_are_a_swept_methods_at_some_depth_reads_that_run(monkeypatch, tmp_path):
    # depth 2 sweeps greedy only: chunked-2's two chunks of a 2-block net are greedy's modules
    series = dict(TINY, depths=[2, 4], grid=dict(TINY["grid"], methods=["backprop", "chunked-2"], steps=40),
                  per_depth={2: dict(methods=["backprop", "greedy"])})
    monkeypatch.setitem(settings._MODULES["mlp-modules"], "cpu", series)
    monkeypatch.setitem(settings.STUDIES, "mlp-modules", ("quick", "cpu"))
    monkeypatch.setitem(settings._ANALYSIS, ("mlp-modules", "cpu"), dict(rule="eval", rules=["eval"],
                                                                         targets=[2.0]))
    grids = settings.module_grids("cpu")
    assert grids[2].methods == ["backprop", "greedy"] and grids[4].methods == ["backprop", "chunked-2"]
    frame = studies.modules_study("cpu", results_dir=tmp_path).table
    assert set(sweep.load_results(tmp_path / "mlp_depth2_tiny").method) == {"backprop", "greedy"}
    two = frame[frame.depth == 2].set_index("method")
    assert set(two.index) == {"greedy", "chunked-2"}
    assert two.loc["chunked-2", "same_run_as"] == "greedy" and pd.isna(two.loc["greedy", "same_run_as"])
    cols = ["high_compute_speedup", "max_speedup", "critical_path_ratio", "num_modules"]
    assert two.loc["chunked-2", cols].tolist() == two.loc["greedy", cols].tolist()
    four = frame[frame.depth == 4]   # chunked-2 trains its own runs where its modules are its own
    assert list(four.method) == ["chunked-2"] and four.same_run_as.isna().all()


def test_same_runs_pairs_a_method_only_with_a_swept_method_of_the_same_modules():
    assert studies._same_runs(["backprop", "greedy"], ["backprop", "greedy", "chunked-2"], 2) == {"chunked-2": "greedy"}
    assert studies._same_runs(["backprop", "greedy"], ["chunked-2", "chunked-4"], 4) == {"chunked-4": "greedy"}
    assert studies._same_runs(["backprop", "greedy", "chunked-2"], ["chunked-2"], 2) == {}
    assert studies._same_runs(["backprop"], ["chunked-1", "greedy"], 3) == {"chunked-1": "backprop"}


def test_the_transformer_series_trains_chunked_2_at_two_layers_once_as_greedy():
    grids = settings.module_grids("cpu", "transformer-lm-modules")
    assert "chunked-2" not in grids[2].methods and "chunked-2" in grids[4].methods and "chunked-2" in grids[8].methods
    assert studies._same_runs(grids[2].methods, grids[4].methods, 2) == {"chunked-2": "greedy"}
    # the same run bit for bit: the depth-2 point's configuration, a few small steps
    point = next(p for p in grids[2].points() if p["config"]["method"] == "greedy")
    runs = {m: train.train(train.TrainConfig(**{**point["config"], "method": m, "batch_size": 4, "steps": 3,
                                                "progress": False}))
            for m in ("greedy", "chunked-2")}
    a, b = (runs[m] for m in ("greedy", "chunked-2"))
    assert a.records.filter(like="loss").equals(b.records.filter(like="loss"))
    assert len(a.learner.module_blocks) == len(b.learner.module_blocks) == 2   # a 2-layer net, one head per module
    for (name, x), (other, y) in zip(a.learner.state_dict().items(), b.learner.state_dict().items(), strict=True):
        assert name == other and torch.equal(x, y), name
