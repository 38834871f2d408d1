"""The sweep store: atomic point files, resume, shards, divergence, workers, CLI."""
import json
import os

import pandas as pd
import pytest

from paper_repro import cli, sweep
from paper_repro.sweep.store import check_point_file


def tiny_grid(**over):
    kw = dict(name="tiny", model="mlp", dataset="digits", model_kwargs=dict(depth=2, width=16),
              methods=["backprop", "greedy"], batch_sizes=[8, 32], lrs=[1e-2], steps=6, eval_examples=50)
    kw.update(over)
    return sweep.Grid(**kw)


def test_point_ids_are_stable_unique_and_ignore_where_data_lives():
    pts = tiny_grid().points()
    assert [p["point_id"] for p in pts] == [p["point_id"] for p in tiny_grid().points()]
    assert len({p["point_id"] for p in pts}) == 4
    assert pts[0]["point_id"].startswith("backprop-b8-lr0.01-s0-")
    cfg = dict(pts[0]["config"])
    assert sweep.point_id({**cfg, "data_dir": "/somewhere", "device": "cuda"}) == pts[0]["point_id"]
    assert sweep.point_id({**cfg, "lr": 0.02}) != pts[0]["point_id"]


def test_steps_follow_the_examples_budget():
    g = tiny_grid(steps=100, examples=640, min_steps=10)
    assert [g.steps_for(b) for b in (8, 32, 128)] == [80, 20, 10]


@pytest.mark.parametrize("over, match", [(dict(batch_sizes=[8, 24]), "powers of 2"),
                                         (dict(methods=["sideways"]), "unknown method"),
                                         (dict(name="a/b"), "grid name"),
                                         (dict(lrs=[]), "non-empty"),
                                         (dict(seeds=[0, 0]), "repeated")])
def test_bad_grids_are_clear_errors(over, match):
    with pytest.raises(ValueError, match=match):
        tiny_grid(**over).validate()


def test_a_sweep_copies_the_points_another_store_already_holds_instead_of_training_them(tmp_path):
    wide = tmp_path / "wide"
    sweep.run_sweep(tiny_grid(name="wide", batch_sizes=[8, 16, 32]), wide, progress=False, threads=1)
    narrow = tiny_grid(name="narrow", batch_sizes=[8, 32], methods=["backprop", "greedy", "chunked-2"])
    root = tmp_path / "narrow"
    pending = next(p["point_id"] for p in narrow.points() if p["config"]["method"] == "chunked-2")   # in progress
    sweep.open_store(root, narrow)
    sweep.store.partial_path(root, pending).parent.mkdir(exist_ok=True)
    sweep.store.partial_path(root, pending).touch()
    assert sweep.progress_line(narrow, root, [tmp_path / "absent", wide]) == \
        "0 of 6 points saved, 4 to copy, 2 to train (1 resume from partial/)"
    sweep.store.partial_path(root, pending).unlink()   # not a checkpoint: the point trains from the start
    rep = sweep.run_sweep(narrow, root, progress=False, threads=1, reuse=[tmp_path / "absent", wide])
    assert sweep.progress_line(narrow, root, [wide]) == "6 of 6 points saved, 0 to train"
    shared = {p["point_id"] for p in narrow.points()} & sweep.finished_ids(wide)
    assert len(shared) == 4 and rep.reused == {str(wide): 4} and rep.skipped == 4
    assert sorted(rep.finished) == sorted(p["point_id"] for p in narrow.points() if p["point_id"] not in shared)
    assert "4 of them copied from" in str(rep)
    for pid in shared:  # the copy is the other store's file, byte for byte
        name = f"{pid}.csv.gz"
        assert (root / "points" / name).read_bytes() == (wide / "points" / name).read_bytes()
    again = sweep.run_sweep(narrow, root, progress=False, threads=1, reuse=[wide])
    assert again.reused == {} and again.skipped == 6 and not again.finished
    assert sweep.adopt_points(root, ["greedy-b8-none"], [wide]) == {}   # an id no store holds


def test_parse_shard():
    assert sweep.parse_shard("2/8") == (2, 8)
    for bad in ("8/8", "x", "1/0", "-1/3"):
        with pytest.raises(ValueError, match="shard"):
            sweep.parse_shard(bad)


def test_run_resume_and_load(tmp_path):
    root = tmp_path / "tiny"
    rep = sweep.run_sweep(tiny_grid(), root, progress=False, threads=1)
    assert len(rep.finished) == 4 and rep.skipped == 0 and not rep.failed
    files = sorted((root / "points").glob("*.csv.gz"))
    assert len(files) == 4 and (root / "grid.json").is_file()
    df = sweep.load_results(root)
    assert set(df.point_id) == {f.name.removesuffix(".csv.gz") for f in files}
    assert (df.groupby("point_id").step.max() == 6).all()
    assert set(df.status) == {"finished"} and df.total_flops_pe.gt(0).all()
    per = df.groupby("method").critical_path_flops_pe.first()
    assert per["greedy"] < per["backprop"]
    # a killed sweep: one point missing, a stale temporary file left behind -> only that point reruns
    mtimes = {f.name: f.stat().st_mtime_ns for f in files}
    files[0].unlink()
    (root / "points" / f".{files[0].name}.999.tmp").write_text("half a file")
    rep = sweep.run_sweep(tiny_grid(), root, progress=False, threads=1)
    assert rep.skipped == 3 and rep.finished == [files[0].name.removesuffix(".csv.gz")]
    assert all(f.stat().st_mtime_ns == mtimes[f.name] for f in files[1:])
    assert len(sweep.load_results(root)) == len(df)  # nothing duplicated, the .tmp ignored
    rep = sweep.run_sweep(tiny_grid(), root, progress=False)
    assert rep.skipped == 4 and not rep.finished


def test_shards_partition_the_grid(tmp_path):
    g = tiny_grid()
    done = []
    for i in range(3):
        rep = sweep.run_sweep(g, tmp_path / "s", shard=(i, 3), progress=False, threads=1)
        done.append(set(rep.finished))
    assert sum(map(len, done)) == 4 and set().union(*done) == {p["point_id"] for p in g.points()}


def test_divergence_is_recorded_not_fatal(tmp_path):
    g = tiny_grid(name="boom", methods=["backprop"], batch_sizes=[8], lrs=[1e12, 1e-2], optimizer="sgd", steps=30)
    rep = sweep.run_sweep(g, tmp_path / "boom", progress=False, threads=1)
    assert len(rep.diverged) == 1 and len(rep.finished) == 1
    df = sweep.load_results(tmp_path / "boom")
    bad = df[df.status == "diverged"]
    assert bad.lr.unique().tolist() == [1e12] and bad.step.max() < 30


def test_store_errors(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        sweep.load_results(tmp_path / "nope")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a sweep results folder"):
        sweep.load_results(tmp_path / "foreign")
    with pytest.raises(ValueError, match="no grid.json"):
        sweep.run_sweep(tiny_grid(), tmp_path / "foreign", progress=False)
    sweep.open_store(tmp_path / "empty", tiny_grid())
    with pytest.raises(ValueError, match="no finished points"):
        sweep.load_results(tmp_path / "empty")
    with pytest.raises(ValueError, match="different sweep grid.*lrs"):
        sweep.open_store(tmp_path / "empty", tiny_grid(lrs=[0.5]))


def test_a_grid_that_adds_points_takes_over_its_store(tmp_path, capsys):
    g = tiny_grid(methods=["greedy"], batch_sizes=[8])
    sweep.run_sweep(g, tmp_path / "s", progress=False, threads=1)
    saved = sweep.finished_ids(tmp_path / "s")
    grown = tiny_grid(methods=["greedy"], batch_sizes=[8], extra_lrs={"greedy@8": [3e-2]}, seeds=[0, 1])
    sweep.open_store(tmp_path / "s", grown)
    assert "gained 3 point(s)" in capsys.readouterr().err
    assert sweep.Grid.from_dict(json.loads((tmp_path / "s" / "grid.json").read_text())) == grown
    rep = sweep.run_sweep(grown, tmp_path / "s", progress=False, threads=1)
    assert rep.skipped == 1 and len(rep.finished) == 3 and saved < sweep.finished_ids(tmp_path / "s")
    for smaller in (g, tiny_grid(methods=["greedy"], batch_sizes=[8], seeds=[0, 1])):  # drops points
        with pytest.raises(ValueError, match="different sweep grid.*extra_lrs"):
            sweep.open_store(tmp_path / "s", smaller)
    with pytest.raises(ValueError, match="different sweep grid.*steps"):  # same lrs, other points
        sweep.open_store(tmp_path / "s", tiny_grid(methods=["greedy"], batch_sizes=[8], seeds=[0, 1],
                                                   extra_lrs={"greedy@8": [3e-2]}, steps=7))
    assert sweep.Grid.from_dict(json.loads((tmp_path / "s" / "grid.json").read_text())) == grown


def test_parallel_workers_write_the_same_points(tmp_path):
    g = tiny_grid(methods=["greedy"], steps=3)
    rep = sweep.run_sweep(g, tmp_path / "par", workers=2, progress=False)
    assert len(rep.finished) == 2 and not rep.failed
    assert sweep.load_results(tmp_path / "par").groupby("point_id").step.max().tolist() == [3, 3]


def test_cli_runs_a_grid_file(tmp_path, capsys):
    grid_file = tmp_path / "g.json"
    grid_file.write_text(json.dumps(tiny_grid(name="cli", methods=["greedy"], batch_sizes=[8]).to_dict()))
    parser = cli.build_parser()
    args = parser.parse_args(["sweep", "--grid", str(grid_file), "--results", str(tmp_path), "--no-progress",
                              "--threads", "1"])
    assert args.func(args) == 0
    out, err = capsys.readouterr()
    assert "1 finished" in out and "0 of 1 points saved, 1 to train" in err
    assert args.func(args) == 0                     # a rerun says where the sweep stands, and trains nothing
    assert "1 of 1 points saved, 0 to train" in capsys.readouterr().err
    assert len(os.listdir(tmp_path / "cli" / "points")) == 1
    for argv, match in ((["sweep"], "exactly one"), (["sweep", "mlp", "--shard", "3"], "shard")):
        with pytest.raises(ValueError, match=match):
            a = parser.parse_args(argv)
            a.func(a)


def test_missing_data_is_one_clear_error(tmp_path):
    g = tiny_grid(name="nodata", dataset="cifar10")
    with pytest.raises(ValueError, match="cifar10 needs a data directory"):
        sweep.run_sweep(g, tmp_path / "nodata", progress=False)


def test_store_named_after_the_text_it_trains_on():
    text = sweep.Grid(name="lm", model="transformer", dataset="text", methods=["backprop"], batch_sizes=[4],
                      lrs=[1e-3])
    assert sweep.store_name(text) == "lm"                                   # the built-in corpus
    assert sweep.store_name(text, "/data/lm1b/train.txt") == "lm-train"
    assert sweep.store_name(text, "/data/lm1b/") == "lm-lm1b"
    images = sweep.Grid(name="c", model="mlp", dataset="cifar10", methods=["backprop"], batch_sizes=[4],
                        lrs=[1e-3])
    assert sweep.store_name(images, "/anywhere/cifar10") == "c"             # CIFAR-10 is CIFAR-10


# ------------------------------------------------------------------- damaged and read-only stores
def _point_id(path):
    return path.name.removesuffix(".csv.gz")


@pytest.mark.parametrize("damage", ["truncated", "empty", "cut at a row"])
def test_a_damaged_point_file_is_set_aside_and_trained_again_on_resume(tmp_path, capfd, damage):
    import gzip

    root = tmp_path / "tiny"
    g = tiny_grid(methods=["greedy"])
    sweep.run_sweep(g, root, progress=False, threads=1)
    files = sorted((root / "points").glob("*.csv.gz"))
    good = files[0].read_bytes()
    bad, kept = files[1], files[0]
    whole = bad.read_bytes()
    if damage == "truncated":        # a copy cut short: the gzip stream ends early
        bad.write_bytes(whole[:len(whole) // 2])
    elif damage == "empty":
        bad.write_bytes(b"")
    else:                            # a whole gzip stream of a CSV that stops mid-row
        text = gzip.decompress(whole).decode()
        bad.write_bytes(gzip.compress(text[:len(text) - 7].encode()))
    assert check_point_file(bad) is not None and check_point_file(kept) is None
    # loading names the file instead of failing inside pandas or gzip
    if damage != "cut at a row":     # (pandas reads a CSV cut mid-row as a short last row)
        with pytest.raises(ValueError, match=f"cannot read sweep point file {bad}"):
            sweep.load_results(root)
    capfd.readouterr()
    rep = sweep.run_sweep(g, root, progress=False, threads=1)
    err = capfd.readouterr().err
    assert rep.skipped == 1 and rep.finished == [_point_id(bad)], rep
    assert f"damaged point file {bad}" in err and "the point is trained again" in err
    assert "1 damaged point files set aside and trained again" in str(rep)
    before = tmp_path / "before.csv.gz"
    before.write_bytes(whole)
    retrained, original = (pd.read_csv(f).drop(columns="wall_time") for f in (bad, before))
    pd.testing.assert_frame_equal(retrained, original)          # the same run again (all but its timing)
    assert kept.read_bytes() == good                           # the sound point untouched
    assert (root / "damaged" / bad.name).is_file() and list(rep.damaged) == [bad]
    assert sweep.load_results(root).groupby("point_id").step.max().tolist() == [6, 6]
    rep = sweep.run_sweep(g, root, progress=False, threads=1)
    assert rep.skipped == 2 and not rep.finished and not rep.damaged


@pytest.fixture
def read_only():
    """Makes a folder unwritable for this process (chmod, or as root the immutable attribute);
    undone afterwards."""
    import shutil
    import subprocess

    made = []

    def make(folder):
        if os.geteuid() != 0:
            folder.chmod(0o555)
        elif not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(folder)]).returncode:
            pytest.skip("no way to make a folder read-only for root here (chattr +i)")
        made.append(folder)

    yield make
    for folder in made:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(folder)])
        else:
            folder.chmod(0o755)


def test_a_read_only_store_is_refused_before_anything_trains(tmp_path, read_only, capsys):
    g = tiny_grid(methods=["greedy"])
    store = tmp_path / "ro" / g.name
    sweep.run_sweep(g, store, progress=False, threads=1)
    first, second = (p["point_id"] for p in g.points())
    (store / "points" / f"{second}.csv.gz").unlink()
    read_only(store / "points")
    # shard 0 of 2 holds only the finished point: nothing to write, so a read-only store is fine
    assert sweep.run_sweep(g, store, shard=(0, 2), progress=False).skipped == 1
    with pytest.raises(ValueError, match=f"^cannot write to sweep results folder {store}: "):
        sweep.run_sweep(g, store, progress=False, threads=1)
    assert not (store / "partial").exists()                   # no point began training
    grid_file = tmp_path / "g.json"
    grid_file.write_text(json.dumps(g.to_dict()))
    capsys.readouterr()
    assert cli.main(["sweep", "--grid", str(grid_file), "--results", str(tmp_path / "ro"), "--no-progress",
                     "--threads", "1"]) == 2
    err = capsys.readouterr().err
    # (after the grid's cost line) one line, and no traceback
    assert err.splitlines()[-1].startswith(f"error: cannot write to sweep results folder {store}: ")
    assert err.count("error") == 1 and "Traceback" not in err


def _image_tree(root, per_class=3):
    """A CIFAR-10-like ImageFolder tree of 8x8 PNGs, two classes, train and test."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for c in ("a", "b"):
            (root / split / c).mkdir(parents=True)
            for k in range(per_class):
                Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(root / split / c / f"{k}.png")


@pytest.mark.parametrize("progress", [False, True])
def test_no_progress_also_silences_decoding_the_images(tmp_path, capfd, progress):
    data_dir = tmp_path / "cifar"
    _image_tree(data_dir)
    g = tiny_grid(name="c10", dataset="cifar10", methods=["greedy"], batch_sizes=[4], steps=2, eval_examples=4,
                  model_kwargs=dict(depth=2, width=8), data_kwargs=dict(image_size=8))
    grid_file = tmp_path / "g.json"
    grid_file.write_text(json.dumps(g.to_dict()))
    argv = ["sweep", "--grid", str(grid_file), "--results", str(tmp_path / "r"), "--data-dir", str(data_dir),
            "--threads", "1"]
    capfd.readouterr()
    assert cli.main(argv + ([] if progress else ["--no-progress"])) == 0
    err = capfd.readouterr().err
    assert ("decoding" in err) == progress, err      # the images were decoded (no cache yet) either way
    assert (data_dir / ".paper_repro_cache").is_dir()
