"""Bad input: every mistake a user can type costs seconds, not a night.

Each case runs ``paper-repro`` in-process (``cli.main``) as a user would and checks exit status 2
and that stderr names the bad value and what is allowed; one case runs the real console script
to check the status and a one-line, traceback-free stderr. Nothing here trains more than one
step. See docs/reliability.md for the list.
"""
import ast
import json
import pickle
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
import torch

from paper_repro import analysis, cli, methods, models, settings, sweep, train
from paper_repro.plots import efficiency as efficiency_plots

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
# one step of a 2-block MLP on digits: the defaults a bad option is added to (argparse keeps the last value)
TRAIN = ["train", "--no-progress", "--steps", "1", "--eval-every", "0", "--model-kwargs", '{"depth": 2, "width": 8}']


def run_cli(argv, capsys):
    """(exit status, stderr) of ``paper-repro ARGV``; argparse's own rejections exit via SystemExit."""
    try:
        rc = cli.main([str(a) for a in argv])
    except SystemExit as exc:
        rc = exc.code
    return rc, capsys.readouterr().err


def assert_clear(rc, err, *words):
    """Exit status 2, an ``error:`` line naming every word, and no traceback."""
    assert rc == 2, err
    assert "Traceback" not in err
    assert "error:" in err
    for word in words:
        assert word in err, f"{word!r} not in {err!r}"


# ---------------------------------------------------------------------------- train options
TRAIN_CASES = {
    "unknown model": (["--model", "vgg"], ["'vgg'", "mlp", "transformer", "resnet18"]),
    "unknown method": (["--method", "sideways"], ["'sideways'", "backprop", "greedy", "overlapping", "chunked-K"]),
    "unknown data set": (["--dataset", "mnist"], ["'mnist'", "digits", "cifar10", "imagenet", "text"]),
    "unknown optimizer": (["--optimizer", "adagrad"], ["'adagrad'", "adam", "sgd"]),
    "chunked K < 1": (["--method", "chunked-0"], ["chunked-0", "between 1 and the number of blocks"]),
    "chunked K > blocks": (["--method", "chunked-99"], ["chunked-99", "number of blocks (2)", "got 99"]),
    "zero steps": (["--steps", "0"], ["--steps", "'0'", "positive integer"]),
    "zero batch size": (["--batch-size", "0"], ["--batch-size", "'0'", "positive integer"]),
    "negative batch size": (["--batch-size", "-1"], ["--batch-size", "'-1'", "positive integer"]),
    "zero learning rate": (["--lr", "0"], ["--lr", "'0'", "positive number"]),
    "negative learning rate": (["--lr", "-1"], ["--lr", "'-1'", "positive number"]),
    "negative eval_every": (["--eval-every", "-1"], ["eval_every", "-1", "non-negative"]),
    "unknown device": (["--device", "tpu9"], ["'tpu9'", "cpu", "cuda"]),
    "unknown model kwarg": (["--model-kwargs", '{"depht": 3}'], ["'depht'", "depth", "width"]),
    "model kwargs not an object": (["--model-kwargs", "[1]"], ["--model-kwargs", "JSON object"]),
    "bad model kwarg value": (["--model-kwargs", '{"depth": 0}'], ["depth", "positive integer", "0"]),
    "unknown data kwarg": (["--data-kwargs", '{"max_trian": 10}'], ["'max_trian'", "max_train", "image_size"]),
    "bad data kwarg value": (["--data-kwargs", '{"max_train": 0}'], ["max_train", "positive integer", "0"]),
    "transformer on images": (["--model", "transformer"], ["'transformer'", "text", "'digits'"]),
    "mlp on text": (["--dataset", "text"], ["'mlp'", "image", "'text'"]),
    "unknown text level": (["--model", "transformer", "--dataset", "text", "--model-kwargs", "{}",
                            "--data-kwargs", '{"level": "word"}'], ["'word'", "byte", "char"]),
    # images of the wrong shape for the model
    "mlp in_dim vs digits": (["--model-kwargs", '{"in_dim": 10}'], ["in_dim=10", "64", "(1, 8, 8)"]),
    "resnet channels vs digits": (["--model", "resnet18", "--model-kwargs", '{"in_channels": 3, "width": 4}'],
                                  ["in_channels=3", "must be 1", "(1, 8, 8)"]),
    "classes vs digits": (["--model-kwargs", '{"num_classes": 3}'], ["num_classes=3", "must be 10"]),
    "transformer seq_len vs data": (["--model", "transformer", "--dataset", "text",
                                     "--model-kwargs", '{"seq_len": 8}'], ["seq_len=8", "64", "data_kwargs"]),
}
if not torch.cuda.is_available():
    TRAIN_CASES["cuda without a GPU"] = (["--device", "cuda"], ["'cuda'", "not available", "cpu"])


@pytest.mark.parametrize("case", sorted(TRAIN_CASES))
def test_train_bad_option(case, capsys):
    extra, words = TRAIN_CASES[case]
    assert_clear(*run_cli(TRAIN + extra, capsys), *words)


def test_train_unwritable_out_fails_before_training(tmp_path, capsys):
    (tmp_path / "a_file").write_text("x")
    assert_clear(*run_cli(TRAIN + ["--out", tmp_path / "a_file" / "rec.csv"], capsys), "--out",
                 str(tmp_path / "a_file" / "rec.csv"))
    assert_clear(*run_cli(TRAIN + ["--out", tmp_path], capsys), "--out", str(tmp_path), "is a directory")
    assert not list(tmp_path.glob("*.tmp"))


# ----------------------------------------------------------------------------- data folders
def _corrupt_imagefolder(root, val="test"):
    for split in ("train", val):
        (root / split / "cat").mkdir(parents=True)
        (root / split / "cat" / "0.jpg").write_bytes(b"not a jpeg")
    return root / "train" / "cat" / "0.jpg"


def _save_images(folder, sizes_and_modes):
    from PIL import Image

    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i, ((w, h), mode) in enumerate(sizes_and_modes):
        channels = {"L": 1, "RGB": 3, "RGBA": 4}[mode]
        pixels = rng.integers(0, 256, (h, w, channels), dtype=np.uint8)
        image = Image.fromarray(pixels.squeeze(-1) if channels == 1 else pixels)
        assert image.mode == mode
        image.save(folder / f"{i}.png")


@pytest.mark.parametrize("dataset", ["cifar10", "imagenet"])
def test_image_data_dir_missing_absent_or_empty(dataset, tmp_path, capsys):
    args = TRAIN + ["--dataset", dataset]
    assert_clear(*run_cli(args, capsys), dataset, "needs a data directory", "--data-dir")
    assert_clear(*run_cli(args + ["--data-dir", tmp_path / "nowhere"], capsys), str(tmp_path / "nowhere"),
                 "does not exist", "--data-dir")
    (tmp_path / "empty").mkdir()
    assert_clear(*run_cli(args + ["--data-dir", tmp_path / "empty"], capsys), str(tmp_path / "empty"),
                 "is empty", "train/<class>")


@pytest.mark.parametrize("dataset, val", [("cifar10", "test"), ("imagenet", "val")])
def test_image_data_dir_malformed(dataset, val, tmp_path, capsys):
    bad = _corrupt_imagefolder(tmp_path / "corrupt", val)
    assert_clear(*run_cli(TRAIN + ["--dataset", dataset, "--data-dir", tmp_path / "corrupt"], capsys),
                 f"cannot read image {bad}", "corrupt")
    (tmp_path / "no_val" / "train" / "cat").mkdir(parents=True)
    assert_clear(*run_cli(TRAIN + ["--dataset", dataset, "--data-dir", tmp_path / "no_val"], capsys),
                 str(tmp_path / "no_val"), f"no {val}/")
    (tmp_path / "other" / "stuff").mkdir(parents=True)
    (tmp_path / "other" / "stuff" / "notes.txt").write_text("hello")
    assert_clear(*run_cli(TRAIN + ["--dataset", dataset, "--data-dir", tmp_path / "other"], capsys),
                 str(tmp_path / "other"), "train/")


def test_cifar10_corrupt_pickles(tmp_path, capsys):
    (tmp_path / "data_batch_1").write_bytes(b"garbage, not a pickle")
    assert_clear(*run_cli(TRAIN + ["--dataset", "cifar10", "--data-dir", tmp_path], capsys),
                 str(tmp_path / "data_batch_1"), "corrupt or not CIFAR-10")
    with open(tmp_path / "data_batch_1", "wb") as f:  # a pickle, but not of CIFAR-10's layout
        pickle.dump({b"data": np.zeros((2, 5), np.uint8), b"labels": [0, 1]}, f)
    assert_clear(*run_cli(TRAIN + ["--dataset", "cifar10", "--data-dir", tmp_path], capsys),
                 "data_batch_1", "(2, 5)", "3072")


def test_text_data_missing_empty_or_malformed(tmp_path, capsys):
    lm = ["--model", "transformer", "--dataset", "text", "--model-kwargs", '{"d_model": 8, "n_layers": 1, "n_heads": 1}']
    args = TRAIN + lm
    assert_clear(*run_cli(args + ["--data-dir", tmp_path / "nowhere.txt"], capsys),
                 str(tmp_path / "nowhere.txt"), "does not exist", "train.txt")
    (tmp_path / "empty").mkdir()
    assert_clear(*run_cli(args + ["--data-dir", tmp_path / "empty"], capsys), str(tmp_path / "empty"),
                 "no train.txt")
    (tmp_path / "blank.txt").write_text("")
    assert_clear(*run_cli(args + ["--data-dir", tmp_path / "blank.txt"], capsys), "blank.txt", "has 0 bytes",
                 "seq_len + 1 = 65")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 au lait ".encode("latin-1") * 20)
    assert_clear(*run_cli(args + ["--data-dir", tmp_path / "latin1.txt", "--data-kwargs", '{"level": "char"}'],
                          capsys), "latin1.txt", "not UTF-8", "level='byte'")


def test_imagefolder_of_mixed_sizes_and_modes_trains_or_says_why(tmp_path, capsys):
    """Images of different sizes and colour modes are resized / center-cropped to one shape, so
    the folder trains; a model built for other images is refused before training, naming both."""
    shapes = [((40, 30), "RGB"), ((17, 60), "L"), ((32, 32), "RGBA"), ((100, 80), "RGB")]
    for split in ("train", "test"):
        for c in ("a", "b"):
            _save_images(tmp_path / split / c, shapes)
    data = train.load_data(train.TrainConfig(dataset="cifar10", data_dir=str(tmp_path)))
    assert tuple(data.x_train.shape) == (8, 3, 32, 32) and data.input_shape == (3, 32, 32)
    args = TRAIN + ["--dataset", "cifar10", "--data-dir", tmp_path, "--batch-size", "4"]
    rc, err = run_cli(args, capsys)
    assert rc == 0, err
    assert_clear(*run_cli(args + ["--model", "resnet18", "--model-kwargs", '{"width": 4, "in_channels": 1}'], capsys),
                 "in_channels=1", "must be 3", "(3, 32, 32)")
    assert_clear(*run_cli(args + ["--model-kwargs", '{"in_dim": 64}'], capsys), "in_dim=64", "3072", "(3, 32, 32)")


def test_learner_built_for_other_data_is_refused_before_training():
    """The API path: ``train(cfg, learner=...)`` checks one batch first and names both shapes."""
    cfg = train.TrainConfig(steps=3, progress=False, eval_every=0)
    data = train.load_data(cfg)
    for net, words in [(models.mlp(depth=2, width=8, in_dim=3072), ["(N, 3072)", "(1, 8, 8)"]),
                       (models.resnet("resnet18", width=4, in_channels=3), ["(N, 3, H, W)", "(1, 8, 8)"])]:
        learner = methods.build(net, "greedy")
        before = [p.detach().clone() for p in learner.parameters()]
        with pytest.raises(ValueError) as err:
            train.train(cfg, data=data, learner=learner)
        for word in words + [net.name, "'digits'"]:
            assert word in str(err.value)
        assert all(torch.equal(a, b) for a, b in zip(before, learner.parameters()))  # nothing trained


# -------------------------------------------------------------------------------- sweep
def test_sweep_bad_study_profile_and_grid(tmp_path, capsys):
    assert_clear(*run_cli(["sweep", "nope"], capsys), "'nope'", "mlp", "transformer", "resnet")
    assert_clear(*run_cli(["sweep", "mlp", "--profile", "huge"], capsys), "'huge'", "quick", "cpu", "full")
    assert_clear(*run_cli(["sweep"], capsys), "STUDY", "--grid")
    assert_clear(*run_cli(["sweep", "--grid", tmp_path / "none.json"], capsys), str(tmp_path / "none.json"))
    (tmp_path / "broken.json").write_text('{"name": "x", "model": ')
    assert_clear(*run_cli(["sweep", "--grid", tmp_path / "broken.json"], capsys), "broken.json")
    grid = dict(name="g", model="mlp", dataset="digits", methods=["sideways"], batch_sizes=[8], lrs=[1e-3])
    (tmp_path / "g.json").write_text(json.dumps(grid))
    assert_clear(*run_cli(["sweep", "--grid", tmp_path / "g.json"], capsys), "'sideways'", "backprop")
    (tmp_path / "g.json").write_text(json.dumps({**grid, "methods": ["greedy"], "model": "vgg"}))
    assert_clear(*run_cli(["sweep", "--grid", tmp_path / "g.json"], capsys), "'vgg'", "mlp")
    assert_clear(*run_cli(["sweep", "mlp", "--shard", "3/2"], capsys), "3/2")


def test_sweep_bad_results_path_device_and_grid_file_shape(tmp_path, capsys):
    grid = dict(name="g", model="mlp", dataset="digits", methods=["greedy"], batch_sizes=[8], lrs=[1e-3],
                steps=1, model_kwargs={"depth": 2, "width": 8})
    (tmp_path / "g.json").write_text(json.dumps(grid))
    run = ["sweep", "--grid", tmp_path / "g.json", "--no-progress"]
    (tmp_path / "a_file").write_text("x")
    assert_clear(*run_cli(run + ["--results", tmp_path / "a_file"], capsys), str(tmp_path / "a_file"), "is a file")
    with pytest.raises(ValueError, match="a_file.*is a file"):
        sweep.open_store(tmp_path / "a_file", sweep.Grid(**grid))
    bad_devices = ["foo"] + ([] if torch.cuda.is_available() else ["cuda"])
    for device in bad_devices:  # refused before the store is created or any data is loaded
        assert_clear(*run_cli(run + ["--results", tmp_path / "r", "--device", device], capsys), f"'{device}'", "cpu")
        with pytest.raises(ValueError, match=f"'{device}'"):
            sweep.run_sweep(sweep.Grid(**grid), tmp_path / "r", device=device, progress=False)
    assert not (tmp_path / "r").exists()
    for bad, words in (([1, 2], ["JSON object", "list"]), ({"name": "g"}, ["lacks required keys", "'model'"])):
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        assert_clear(*run_cli(["sweep", "--grid", tmp_path / "bad.json"], capsys), *words)
    with pytest.raises(ValueError, match="JSON object"):
        sweep.Grid.from_dict([1, 2])


def test_sweep_into_a_foreign_results_folder(tmp_path, capsys):
    grid = settings.compute_grid("mlp", "quick")
    store = tmp_path / grid.name
    store.mkdir()
    (store / "notes.txt").write_text("someone else's files")
    assert_clear(*run_cli(["sweep", "mlp", "--results", tmp_path, "--no-progress"], capsys), str(store),
                 "not a sweep results folder")
    assert (store / "notes.txt").read_text() == "someone else's files" and not (store / "points").exists()
    (store / "notes.txt").unlink()
    (store / "grid.json").write_text(json.dumps({**grid.to_dict(), "lrs": [0.5]}))
    assert_clear(*run_cli(["sweep", "mlp", "--results", tmp_path, "--no-progress"], capsys), str(store),
                 "different sweep grid", "lrs")


def test_loading_an_empty_or_foreign_results_store(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        sweep.load_results(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no grid.json"):
        sweep.load_results(tmp_path / "empty")
    grid = sweep.Grid(name="g", model="mlp", dataset="digits", methods=["greedy"], batch_sizes=[8], lrs=[1e-3])
    root = sweep.open_store(tmp_path / "g", grid)
    with pytest.raises(ValueError, match="no finished points yet"):
        sweep.load_results(root)
    pd.DataFrame({"step": [1], "loss": [0.3]}).to_csv(root / "points" / "foreign.csv", index=False)
    with pytest.raises(ValueError, match=r"foreign.csv is not a sweep point file \(missing columns"):
        sweep.load_results(root)


# ------------------------------------------------------------------- a target nobody reaches
def _curve(pid, method):
    steps = np.arange(1, 6)
    return pd.DataFrame({"point_id": pid, "method": method, "batch_size": 8, "lr": 1e-3, "seed": 0,
                         "step": steps, "examples": 8 * steps, "final_loss": np.linspace(2.0, 1.5, 5),
                         "total_flops_pe": 10.0, "critical_path_flops_pe": 5.0, "fill_flops_pe": 0.0})


def test_unreached_target_is_reported_not_reached():
    table = pd.concat([_curve("a", "backprop"), _curve("b", "greedy")], ignore_index=True)
    ttt = analysis.time_to_target(table, [0.1, 1.8], "steps:1")
    low = ttt[ttt["target"] == 0.1]
    assert len(low) == 2 and not low["reached"].any() and low[["step", "compute", "time"]].isna().all().all()
    assert ttt[ttt["target"] == 1.8]["reached"].all()
    assert analysis.staircase(analysis.over_seeds(ttt))["target"].eq(1.8).all()


def test_unreached_target_says_so_in_the_plot_and_speedup():
    import matplotlib.pyplot as plt

    table = pd.concat([_curve("a", "backprop"), _curve("b", "greedy")], ignore_index=True)
    tables = analysis.study_tables(table, [0.1], "steps:1")
    assert analysis.unreached_targets(tables.ttt) == [0.1]
    fig = efficiency_plots.plot_frontiers(tables.configs, tables.fronts, "unreached")
    assert [t.get_text() for ax in fig.axes for t in ax.texts] == ["target 0.1 not reached\nby any run"]
    assert tables.speedup.empty and tables.headline.empty  # nothing to compare: empty tables, not an error
    fig2 = efficiency_plots.plot_speedup_band(tables.speedup, [], "unreached")
    assert any("no speedup defined" in t.get_text() for ax in fig2.axes for t in ax.texts)
    assert analysis.claims_table(tables.headline, 10, "MLP").loc[0, "measured_max"].startswith("none (no target")
    # target 1.8 reached by both methods, 1.0 by greedy only, 0.1 by nobody: every target keeps its
    # panel, the speedup is computed where backprop reached the target and skipped elsewhere
    def run(pid, method, batch, losses, cp):
        return _curve(pid, method).assign(batch_size=batch, examples=lambda d: d["step"] * batch,
                                          final_loss=losses, critical_path_flops_pe=cp)

    table = pd.concat([run("a", "backprop", 8, np.linspace(2.0, 1.5, 5), 5.0),
                       run("a2", "backprop", 32, [2.0, 1.7, 1.4, 1.1, 1.05], 5.0),
                       run("b", "greedy", 8, np.linspace(2.0, 1.5, 5), 2.5),
                       run("b2", "greedy", 32, [2.0, 1.7, 1.2, 0.95, 0.8], 2.5)], ignore_index=True)
    tables = analysis.study_tables(table, [1.8, 0.1, 1.0], "steps:1")
    assert analysis.unreached_targets(tables.ttt) == [0.1]
    fig3 = efficiency_plots.plot_frontiers(tables.configs, tables.fronts, "some unreached")
    texts = {ax.get_title(): [t.get_text() for t in ax.texts] for ax in fig3.axes}
    assert texts == {"target 1.8": [], "target 1": ["not reached by backprop"],
                     "target 0.1": ["target 0.1 not reached\nby any run"]}
    # at 1.8: backprop (240, 15) and (640, 10), greedy (240, 7.5) and (640, 5): twice as fast
    s = tables.speedup
    assert s["target"].tolist() == [1.8, 1.8] and s["compute"].tolist() == [240, 640]
    assert s["speedup"].tolist() == pytest.approx([2.0, 2.0])
    plt.close("all")


# -------------------------------------------------------------------------------- bench
TINY_PIPE = ["--model", "mlp", "--model-kwargs", '{"depth": 4, "width": 16}', "--image-size", "4",
             "--no-progress"]


@pytest.mark.parametrize("argv, words", [
    (["bench", "overhead", "--model", "vgg"], ["'vgg'", "mlp", "resnet18"]),
    (["bench", "overhead", "--batch-size", "0"], ["batch_size", "0", "positive integer"]),
    (["bench", "overhead", "--steps", "0"], ["steps", "0", "positive integer"]),
    (["bench", "overhead", "--model-kwargs", '{"depht": 2}'], ["'depht'", "depth"]),
    (["bench", "overhead", "--model-kwargs", '{depth: 2}'], ["--model-kwargs", "JSON object", "'{depth: 2}'"]),
    (["bench", "overhead", "--model-kwargs", "[2]"], ["--model-kwargs", "JSON object", "'[2]'"]),
    (["bench", "overhead", "--device", "foo"], ["'foo'", "cpu", "cuda"]),
    *([] if torch.cuda.is_available() else [(["bench", "overhead", "--device", "cuda"], ["'cuda'", "not available"])]),
    (["bench", "pipeline", "--schedule", "sideways"], ["'sideways'", "local", "gpipe", "1f1b", "ddp"]),
    (["bench", "pipeline", "--method", "sideways", "--comm-only"], ["'sideways'", "greedy", "chunked-K"]),
    (["bench", "pipeline", "--stages", "0"], ["stages", "0", "positive integer"]),
    # more stages than local modules: refused before any process starts, with and without --comm-only
    (["bench", "pipeline", "--method", "greedy", "--stages", "9", *TINY_PIPE],
     ["stages=9", "more than the 4 local modules", "'greedy'"]),
    (["bench", "pipeline", "--method", "chunked-2", "--stages", "3", "--comm-only", *TINY_PIPE],
     ["stages=3", "more than the 2 local modules", "'chunked-2'"]),
    (["bench", "pipeline", "--stages", "9", *TINY_PIPE], ["stages=9", "more than the 4 blocks", "'mlp'"]),
])
def test_bench_bad_option(argv, words, capsys):
    assert_clear(*run_cli(argv, capsys), *words)


# ------------------------------------------------------------------------------ notebooks
def test_notebooks_run_bad_profile_and_name(capsys):
    assert_clear(*run_cli(["notebooks", "run", "--profile", "huge"], capsys), "'huge'", "quick", "cpu", "full")
    assert_clear(*run_cli(["notebooks", "run", "--only", "fig99"], capsys), "'fig99'", "00_quickstart")


def _parameters_and_checked(path):
    """(names assigned in the parameters cell, names passed to check_parameters in any cell)."""
    nb = nbformat.read(str(path), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    params = next(c for c in code if "parameters" in c.metadata.get("tags", []))
    names = {t.id for node in ast.parse(params.source).body if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Name)}
    checked = set()
    for cell in code:
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:  # IPython magics
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == \
                    "check_parameters" and node.args:
                values, types = node.args[0], node.args[1] if len(node.args) > 1 else None
                if isinstance(values, ast.Call) and isinstance(types, ast.Call):
                    checked |= {k.arg for k in values.keywords} & {k.arg for k in types.keywords}
    return names, checked


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.stem)
def test_every_notebook_checks_the_type_of_every_parameter(path):
    names, checked = _parameters_and_checked(path)
    assert {"profile", "figures_dir"} <= names
    assert names <= checked, f"{path.name}: parameters not checked: {sorted(names - checked)}"


def test_quickstart_with_a_wrongly_typed_parameter_fails_at_once(tmp_path):
    """``papermill -p seed abc`` hands the notebook the string 'abc': it stops in the cell after
    the parameters, before loading data or training, with a message naming seed='abc'."""
    import papermill as pm

    with pytest.raises(pm.PapermillExecutionError) as err:
        pm.execute_notebook(str(NOTEBOOKS / "00_quickstart.ipynb"), str(tmp_path / "out.ipynb"),
                            parameters={"seed": "abc", "figures_dir": str(tmp_path)}, kernel_name="python3",
                            cwd=str(NOTEBOOKS), progress_bar=False, execution_timeout=120)
    assert err.value.ename == "ValueError"
    assert "seed='abc' has type str; expected int" in err.value.evalue
    executed = nbformat.read(str(tmp_path / "out.ipynb"), as_version=4)
    ran = [c for c in executed.cells if c.cell_type == "code" and c.get("execution_count")]
    assert len(ran) <= 3  # injected parameters, defaults, the check: nothing trained
    assert not list(tmp_path.glob("*.png"))


# ------------------------------------------------------------------ the real console script
def test_console_script_exits_2_with_one_line_and_no_traceback():
    script = Path(sys.executable).with_name("paper-repro")
    if not script.exists():
        pytest.skip(f"{script} not installed (pip install -e .)")
    proc = subprocess.run([str(script), "train", "--method", "chunked-0", "--no-progress"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == ["error: chunked-0: K must be between 1 and the number of blocks, got 0"], proc.stderr
    assert proc.stdout == ""
