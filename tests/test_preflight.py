"""Preflight: each check finds its problem in seconds, and the plan is the cost model's count."""
import re
from pathlib import Path

import pytest
import torch

from paper_repro import preflight, settings
from paper_repro.sweep import grid_flops

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(120)


def _cifar_pickles(root: Path) -> Path:
    """Files named like cifar-10-batches-py (locate looks, it does not unpickle)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (folder / name).write_bytes(b"\x80\x02}q\x00.")
    return root


# -- CUDA -------------------------------------------------------------------------------------
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_missing_cuda_is_reported():
    problems, n = preflight.check_cuda()
    assert n == 0 and len(problems) == 1
    assert "CUDA is not available" in problems[0] and torch.__version__ in problems[0]
    assert preflight.check_cuda(min_devices=0)[0] == [problems[0].replace("1 GPU(s)", "0 GPU(s)")]


def test_too_few_gpus_is_reported(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert preflight.check_cuda(1) == ([], 1)
    problems, n = preflight.check_cuda(2)
    assert n == 1 and problems == ["1 CUDA device(s) visible, 2 needed (check CUDA_VISIBLE_DEVICES)"]


# -- data -------------------------------------------------------------------------------------
def test_missing_data_names_the_data_set_its_notebooks_and_the_path(tmp_path):
    sources = preflight.data_sources("full", {"cifar10": str(tmp_path / "nowhere"),
                                               "imagenet": str(tmp_path / "imagenet")})
    assert sources["01_compute_efficiency[mlp]"] == ("cifar10", str(tmp_path / "nowhere"))
    assert sources["06_feature_similarity"][0] == "imagenet"
    assert sources["01_compute_efficiency[transformer]"] == ("text", None)
    problems = preflight.check_data(sources, "full")
    assert len(problems) == 3  # one per data set, not one per notebook
    cifar = next(p for p in problems if p.startswith("cifar10"))
    assert "00_quickstart" in cifar and "07_random_labels" in cifar
    assert f"{tmp_path / 'nowhere'} does not exist" in cifar and "--download" in cifar
    assert any(p.startswith("imagenet") and str(tmp_path / "imagenet") in p for p in problems)
    assert any(p.startswith("text") and "large text corpus" in p for p in problems)


def test_present_data_passes(tmp_path):
    (tmp_path / "lm1b.txt").write_text("tokens " * 100)
    for split in ("train", "val"):
        (tmp_path / "imagenet" / split / "n01").mkdir(parents=True)
        (tmp_path / "imagenet" / split / "n01" / "x.JPEG").write_bytes(b"jpeg")
    dirs = {"cifar10": str(_cifar_pickles(tmp_path / "cifar")), "imagenet": str(tmp_path / "imagenet"),
            "text": str(tmp_path / "lm1b.txt")}
    assert preflight.check_data(preflight.data_sources("full", dirs), "full") == []
    # the quick profile reads only the built-in text corpus (no path), which is fine there
    quick = preflight.data_sources("quick", {})
    assert quick == {"01_compute_efficiency[transformer]": ("text", None)}
    assert preflight.check_data(quick, "quick") == []


def test_unknown_data_set_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown data set.*cifar100.*valid: cifar10, imagenet, text"):
        preflight.data_sources("full", {"cifar100": "/data"})


# -- output folder ----------------------------------------------------------------------------
def test_unwritable_output_folder(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    problems = preflight.check_output(blocker / "results")
    assert len(problems) == 1 and f"output folder {blocker / 'results'} is not writable" in problems[0]


def test_output_folder_space_and_creation(tmp_path):
    out = tmp_path / "new" / "results"
    assert preflight.check_output(out, min_free_gb=0) == [] and out.is_dir()
    assert list(out.iterdir()) == []  # the probe file is gone
    problems = preflight.check_output(out, min_free_gb=1e9)
    assert len(problems) == 1 and "GiB free, 1e+09 GiB wanted" in problems[0]


# -- all together -------------------------------------------------------------------------------
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_check_and_command_fail_on_this_cpu_machine(tmp_path, capsys):
    report = preflight.check("full", {"cifar10": str(_cifar_pickles(tmp_path / "c"))}, tmp_path / "out",
                             with_plan=False)
    assert not report.ok and report.cuda_devices == 0
    assert [p.split(":")[0] for p in report.problems] == [
        "CUDA is not available", "text (read by 01_compute_efficiency[transformer])",
        "imagenet (read by 06_feature_similarity)"]
    rc = preflight.main(["--no-plan", "--data-dir", f"cifar10={tmp_path / 'c'}", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 1 and "problem: CUDA is not available" in err and "3 problem(s); 0 CUDA device(s)" in err
    with pytest.raises(SystemExit) as e:
        preflight.main(["--no-plan", "--data-dir", "cifar10"])
    assert e.value.code == 2 and "'cifar10' is not DATASET=PATH" in capsys.readouterr().err


def test_quick_profile_without_gpu_check_is_ready(tmp_path):
    report = preflight.check("quick", {}, tmp_path, min_devices=0, min_free_gb=0, with_plan=False)
    assert report.ok, report.problems


# -- the plan -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def quick_plan():
    return preflight.plan("quick", sustained_flops=1e12)


def test_plan_is_the_cost_model_count(quick_plan):
    table = quick_plan
    rows = table.set_index("workload")
    mlp_grid = settings.compute_grid("mlp", "quick")
    expected = grid_flops(mlp_grid, (1, 8, 8), 10)["flops"]  # counted on real CPU tensors
    row = rows.loc[mlp_grid.description]
    assert row["flops"] == expected and row["runs"] == len(mlp_grid.points())
    assert row["gpu_hours"] == pytest.approx(expected / 1e12 / 3600)
    body, total = table.iloc[:-1], table.iloc[-1]
    assert total["notebook"] == "total" and "1 TFLOP/s sustained (assumed)" in total["workload"]
    assert total["flops"] == pytest.approx(body["flops"].sum()) and total["runs"] == body["runs"].sum()
    assert (body["flops"].dropna() > 0).all()
    with pytest.raises(ValueError, match="sustained_flops must be > 0 FLOP/s, got 0"):
        preflight.plan("quick", sustained_flops=0)
    with pytest.raises(ValueError, match="unknown profile 'huge'"):
        preflight.plan("huge")


def test_plan_covers_every_notebook(quick_plan):
    stems = {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}
    planned = set(quick_plan["notebook"]) - {"total"}
    assert {name.split("[")[0] for name in planned} == stems     # notebook 01: one row per study it runs
    assert {"01_compute_efficiency[mlp]", "01_compute_efficiency[transformer]", "01_compute_efficiency[resnet]"} \
        <= planned


def test_full_plan_uses_paper_scale_shapes():
    by_nb = {w.notebook: w for w in preflight.workloads("full")}
    assert by_nb["06_feature_similarity"].input_shape == (3, 224, 224)
    assert by_nb["06_feature_similarity"].num_classes == 1000
    assert by_nb["01_compute_efficiency[transformer]"].input_shape == (128,)
    assert by_nb["01_compute_efficiency[mlp]"].grid == settings.compute_grid("mlp", "full")
    # a study given (-p study mlp-deep) is notebook 01's only run
    [run] = [w for w in preflight.workloads("cpu", study="mlp-deep") if w.notebook.startswith("01")]
    assert run.notebook == "01_compute_efficiency" and run.grid == settings.compute_grid("mlp-deep", "cpu")
    labels = [w for w in preflight.workloads("full") if w.notebook == "07_random_labels"]
    assert [w.grid.steps for w in labels] == [100 * 391, 100 * 391]  # 100 epochs of 50,000 / 128


def test_cost_table_is_what_the_plan_computes():
    """The expected-cost table (docs/gpu_servers.md) is the full plan at the default assumed rate, rounded."""
    text = (ROOT / "docs" / "gpu_servers.md").read_text()
    rows = re.findall(r"^\| (\d\d_\w+(?:\[[\w-]+\])?|total)[^|]*\| ([0-9.e+]+) \| ([<0-9. ]+) \|$", text, re.M)
    assert len(rows) == 8, rows  # seven trained notebooks and the total
    table = preflight.plan("full")
    sums = table.groupby("notebook")[["flops", "gpu_hours"]].sum()
    for notebook, flops, hours in rows:
        assert float(flops) == float(f"{sums.loc[notebook, 'flops']:.3g}"), notebook
        want = sums.loc[notebook, "gpu_hours"]
        assert hours.strip() == "< 0.01" if want < 0.01 else abs(float(hours) - want) < 0.05, notebook
    m = re.search(r"resnet-imagenet`, not part of the notebook\s+batch\) adds ([0-9.e+]+) FLOPs, ([0-9.]+) GPU-hours",
                  text)
    with torch.device("meta"):
        imagenet = grid_flops(settings.compute_grid("resnet-imagenet", "full"), (3, 224, 224), 1000)
    assert m and float(m.group(1)) == float(f"{imagenet['flops']:.3g}")
    assert abs(float(m.group(2)) - imagenet["flops"] / preflight.DEFAULT_SUSTAINED_FLOPS / 3600) < 0.05
