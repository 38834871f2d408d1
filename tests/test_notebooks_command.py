"""`paper-repro notebooks run` as the GPU-server entry point: parameters passed through, data
folders per data set, the preflight (--dry-run and at the start of a full run), --download."""

import papermill as pm
import pytest
import torch

from paper_repro import commands, notebooks
from clirun import run_cli as run

NB = notebooks.NOTEBOOKS_DIR


@pytest.fixture
def captured(monkeypatch):
    """Record the keyword arguments notebooks.run_notebooks is called with (nothing runs)."""
    calls = []
    monkeypatch.setattr(notebooks, "run_notebooks", lambda **kw: calls.append(kw) or [])
    return calls


def test_parameters_data_dirs_device_and_workers_reach_the_notebooks(captured, capsys, tmp_path):
    rc, _, err = run(["notebooks", "run", "--profile", "cpu", "--data-dir", f"cifar10={tmp_path}",
                      "--device", "cpu", "--workers", "2", "-p", "targets", "[1.5, 1.2]", "-p", "rule", "eval"],
                     capsys)
    assert rc == 0, err
    kw = captured[0]
    assert kw["parameters"] == {"targets": [1.5, 1.2], "rule": "eval", "device": "cpu", "workers": 2}
    assert kw["per_notebook"]["01_compute_efficiency[mlp]"] == {"data_dir": str(tmp_path)}
    assert kw["per_notebook"]["01_compute_efficiency[resnet]"] == {"data_dir": str(tmp_path)}
    assert "01_compute_efficiency[transformer]" not in kw["per_notebook"]  # text: no folder given


def test_only_declared_parameters_are_injected():
    base = {"profile": "quick"}
    got = notebooks.notebook_parameters(pm, NB / "01_compute_efficiency.ipynb", base,
                                        {"workers": 3, "no_such_parameter": 1}, {"data_dir": "/d"})
    assert got == {"profile": "quick", "workers": 3, "data_dir": "/d"}
    assert notebooks.notebook_parameters(pm, NB / "00_quickstart.ipynb", base, {"workers": 3}) == base


@pytest.mark.parametrize("argv, words", [
    (["--data-dir", "cifar10"], ["DATASET=PATH", "'cifar10'"]),
    (["--data-dir", "mnist=/x"], ["mnist", "cifar10", "imagenet", "text"]),
])
def test_bad_data_dir_is_named(argv, words, captured, capsys):
    rc, _, err = run(["notebooks", "run", "--profile", "cpu", *argv], capsys)
    assert rc == 2 and "Traceback" not in err and all(w in err for w in words), err
    assert not captured


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_dry_run_on_a_cpu_machine_lists_every_missing_requirement(captured, capsys, tmp_path):
    rc, out, err = run(["notebooks", "run", "--profile", "full", "--dry-run",
                        "--data-dir", f"cifar10={tmp_path / 'missing'}"], capsys)
    assert rc == 1
    problems = [line for line in err.splitlines() if line.startswith("problem:")]
    assert any("CUDA" in p for p in problems)
    assert any(str(tmp_path / "missing") in p for p in problems)
    assert any("imagenet" in p.lower() for p in problems)
    assert "total" in out and not captured


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_full_run_refuses_to_start_without_cuda_unless_asked(captured, capsys):
    rc, _, err = run(["notebooks", "run", "--profile", "full", "--only", "00"], capsys)
    assert rc == 2 and "--device cpu" in err and not captured


def test_download_is_offered_by_train_sweep_and_notebooks(monkeypatch, capsys, tmp_path):
    asked = []
    monkeypatch.setattr(commands.datafiles, "locate", lambda name, path, download=False: asked.append(
        (name, path, download)) or (_ for _ in ()).throw(ValueError(f"stop after locate({name!r})")))
    rc, _, err = run(["train", "--dataset", "cifar10", "--data-dir", tmp_path, "--download"], capsys)
    assert rc == 2 and asked[-1] == ("cifar10", str(tmp_path), True)
    rc, _, err = run(["sweep", "mlp", "--profile", "cpu", "--data-dir", tmp_path, "--download",
                      "--results", tmp_path / "r"], capsys)
    assert rc == 2 and asked[-1] == ("cifar10", str(tmp_path), True)
    rc, _, err = run(["notebooks", "run", "--profile", "cpu", "--data-dir", f"cifar10={tmp_path}", "--download"],
                     capsys)
    assert rc == 2 and asked[-1] == ("cifar10", str(tmp_path), True)


def test_full_profile_study_refuses_the_cpu_unless_asked(tmp_path):
    from paper_repro import studies

    with pytest.raises(ValueError, match="full profile of 'mlp' trains for GPU-hours.*allow_cpu=True"):
        studies.compute_study("mlp", "full", results_dir=tmp_path, device="cpu")
    assert not any(tmp_path.iterdir())  # refused before a store was made


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_explicit_cpu_device_lets_the_full_notebooks_train_on_the_cpu(captured, capsys, monkeypatch):
    from paper_repro import preflight

    monkeypatch.setattr(preflight, "check", lambda *a, **k: preflight.Report([], preflight.plan("quick"), 0))
    rc, _, err = run(["notebooks", "run", "--profile", "full", "--device", "cpu", "--only", "01"], capsys)
    assert rc == 0, err
    assert captured[0]["parameters"]["allow_cpu"] is True and captured[0]["parameters"]["device"] == "cpu"
