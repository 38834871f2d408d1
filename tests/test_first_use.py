"""What a new user meets first: the notebook runner's --only and -p, user models whose blocks
write their input in place, the records and errors of train(), estimate and data.load, the
simulator's stage count, ``train --model package.module:function``, and make check-figures."""
import dataclasses
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from paper_repro import cli, cost, data, estimate, methods, notebooks, preflight, train
from paper_repro.distributed import PipelineConfig
from paper_repro.simulate import api
from paper_repro.simulate.calibrate import measure
from paper_repro.simulate.memory import MetaNet, stage_memory
from user_models import inplace_cnn, small_cnn
from clirun import run_cli

ROOT = Path(__file__).resolve().parents[1]
TESTS_DIR = str(Path(__file__).resolve().parent)
NB05 = "05_gradient_similarity"
CIFAR = Path("/work/shared/data/cifar10-jpeg")


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


# ------------------------------------------------------------- notebooks run --only, -p
def test_preflight_checks_and_plans_only_the_selected_notebooks(tmp_path):
    missing = tmp_path / "no_cifar"
    report = preflight.check("full", {"cifar10": str(missing)}, tmp_path, min_devices=0, min_free_gb=0,
                             notebooks=[NB05])
    assert len(report.problems) == 1 and f"cifar10 (read by {NB05})" in report.problems[0], report.problems
    assert report.plan["notebook"].tolist() == [NB05, "total"]
    assert set(preflight.data_sources("full", {}, [NB05])) == {NB05}


def test_notebooks_dry_run_with_only_checks_that_notebook(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(notebooks, "REPO_ROOT", tmp_path)       # the output folder checked: results/ there
    rc, out, err = run_cli(["notebooks", "run", "--profile", "full", "--device", "cpu", "--dry-run",
                            "--data-dir", f"cifar10={tmp_path / 'no_cifar'}", "--only", "05"], capsys)
    assert rc == 1, err                                          # the missing CIFAR-10 of notebook 05
    assert f"read by {NB05}" in err
    assert "text (read by" not in err and "imagenet (read by" not in err
    assert NB05 in out and "01_compute" not in out and "06_feature" not in out


@pytest.mark.skipif(not CIFAR.is_dir(), reason="needs CIFAR-10 at " + str(CIFAR))
def test_full_profile_with_only_runs_past_the_checks_of_other_notebooks(tmp_path, capsys, monkeypatch):
    """The user's command: only 05's data is given; the checks pass and the run starts."""
    monkeypatch.setattr(notebooks, "REPO_ROOT", tmp_path)
    ran = {}
    monkeypatch.setattr(notebooks, "run_notebooks", lambda **kw: ran.update(kw) or [])
    rc, out, err = run_cli(["notebooks", "run", "--profile", "full", "--device", "cpu",
                            "--data-dir", f"cifar10={CIFAR}", "--only", "05", "--no-progress"], capsys)
    assert rc == 0, err
    assert ran["only"] == ["05"] and ran["progress"] is False
    assert ran["per_notebook"] == {NB05: {"data_dir": str(CIFAR)}}


def test_a_misspelt_notebook_parameter_is_refused(capsys, monkeypatch):
    monkeypatch.setattr(notebooks, "run_notebooks", lambda **kw: pytest.fail("ran despite a bad -p"))
    rc, out, err = run_cli(["notebooks", "run", "-p", "stepz", "10", "--only", "00"], capsys)
    assert rc == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "'stepz'" in lines[0] and "seed" in lines[0] and "profile" in lines[0]


def test_a_declared_notebook_parameter_is_accepted():
    notebooks.check_parameter_names(notebooks.select_notebooks(notebooks.list_notebooks(), "00"), ["seed"])


def test_notebooks_run_takes_tflops_and_no_progress():
    args = cli.build_parser().parse_args(["notebooks", "run", "--tflops", "400", "--no-progress"])
    assert args.tflops == 400.0 and args.no_progress
    assert args.tflops * 1e12 != preflight.DEFAULT_SUSTAINED_FLOPS
    assert cli.build_parser().parse_args(["notebooks", "run"]).tflops * 1e12 == preflight.DEFAULT_SUSTAINED_FLOPS


def test_the_kernels_leave_out_the_tcp_warning_only():
    import logging

    from paper_repro import kernel_log

    f = kernel_log.NoTcpWarning()
    record = lambda msg: logging.LogRecord("IPKernelApp", logging.WARNING, "", 0, msg, (), None)  # noqa: E731
    assert not f.filter(record("Kernel is running over TCP without encryption. All communication ..."))
    assert f.filter(record("something else"))
    assert any("IPKernelApp.logging_config" in a and "NoTcpWarning" in a for a in notebooks.KERNEL_ARGUMENTS)


# ------------------------------------------------- blocks whose first operation is in place
@pytest.fixture
def image_batch():
    torch.manual_seed(0)
    return torch.randn(8, 3, 8, 8), torch.randint(10, (8,))


def test_estimate_takes_blocks_that_write_their_input(image_batch):
    x, y = image_batch
    table = estimate.pipeline_estimate(lambda: inplace_cnn(width=4), x, y, devices=3)
    assert len(table) == 4 and (table["speedup"] > 0).all()


def test_module_costs_of_in_place_blocks_equal_those_of_the_same_net_without(image_batch):
    x, y = image_batch
    torch.manual_seed(0)
    net = inplace_cnn(width=4)
    plain = nn.Sequential(*(nn.ReLU() if isinstance(m, nn.ReLU) else m for m in net))
    costs = [cost.module_costs(methods.build(n, "chunked-2", num_classes=10, example=x), x, y)
             for n in (net, plain)]
    assert costs[0][["forward", "backward"]].equals(costs[1][["forward", "backward"]])


def test_calibration_and_memory_take_blocks_that_write_their_input():
    cfg = PipelineConfig(model="user_models:inplace_cnn", model_kwargs={"width": 4}, image_size=8,
                         micro_batch=4, stages=3)
    bc = measure(cfg, reps=1)
    assert bc.blocks == 6 and all(v > 0 for v in bc.forward) and all(v > 0 for v in bc.backward)
    records = api.run(cfg, ["local", "1f1b"], [4], block_costs=bc, memory=True)
    assert [r["schedule"] for r in records] == ["local", "1f1b"]
    assert all(r["peak_mem_bytes_per_stage"] and min(r["peak_mem_bytes_per_stage"]) > 0 for r in records)


def test_memory_accounting_is_unchanged_by_an_in_place_first_op():
    """The copy that an in-place block writes is made outside the meters: the same bytes."""
    common = dict(image_size=8, micro_batch=4, stages=2)
    cut = [[0, 1, 2], [3, 4, 5]]
    mem = []
    for inplace in (True, False):
        cfg = PipelineConfig(model="user_models:inplace_cnn", model_kwargs={"width": 4, "inplace": inplace}, **common)
        mem.append([m["saved_for_backward"] for m in stage_memory(MetaNet(cfg), "1f1b", 2, 4, 8, cut, "adam", 2)])
    assert mem[0] == mem[1]


def test_simulate_command_takes_blocks_that_write_their_input(capsys, monkeypatch):
    rc, out, err = run_cli(["simulate", "--model", "user_models:inplace_cnn", "--model-kwargs", '{"width": 4}',
                            "--image-size", "8", "--stages", "2", "--micro-batch", "4", "--micro-batches", "4",
                            "--steps", "1", "--reps", "1", "--schedule", "local,1f1b"], capsys)
    assert rc == 0, err
    assert "local" in out and "1f1b" in out and "Traceback" not in err


# --------------------------------------------------------------------- train records, errors
def cifar_like(n: int = 40) -> data.DataSet:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g)
    y = torch.arange(n) % 10
    return data.DataSet(name="cifar10", kind="image", x_train=x, y_train=y, x_test=x[:10], y_test=y[:10],
                        num_classes=10, input_shape=(3, 32, 32), mean=(0.5,) * 3, std=(0.25,) * 3)


def test_records_name_the_data_set_handed_in():
    ds = cifar_like()
    torch.manual_seed(0)
    learner = methods.build(small_cnn(width=2), "greedy", num_classes=10, example=ds.batch("train", torch.arange(2))[0])
    cfg = train.TrainConfig(model=None, method=None, steps=2, batch_size=8, eval_every=0, progress=False)
    result = train.train(cfg, data=ds, learner=learner)
    assert result.config.dataset == "cifar10" and result.summary()["dataset"] == "cifar10"


def test_a_shape_error_names_the_data_set_handed_in():
    ds = cifar_like()
    learner = methods.build(nn.Sequential(nn.Sequential(nn.Flatten(), nn.Linear(64, 8))), "backprop", num_classes=10)
    cfg = train.TrainConfig(model=None, method=None, steps=1, batch_size=8, progress=False)
    with pytest.raises(ValueError, match=r"data set 'cifar10' gives examples of shape \(3, 32, 32\)"):
        train.train(cfg, data=ds, learner=learner)


def test_a_transformer_config_trains_on_text_handed_in():
    text = data.load("text", seq_len=16, max_train=2000, max_test=500)
    cfg = train.TrainConfig(model="transformer", model_kwargs=dict(d_model=16, n_layers=2, n_heads=2),
                            steps=1, batch_size=4, eval_every=0, eval_examples=32, progress=False)
    assert train.train(cfg, data=text).config.dataset == "text"


def test_train_refuses_a_batch_larger_than_the_training_set(digits):
    cfg = train.TrainConfig(model="mlp", method="backprop", steps=1, batch_size=100000, progress=False)
    with pytest.raises(ValueError, match=r"batch_size 100000 is larger than the training split of 'digits' "
                                         r"\(1,437 examples\); use at most 1437"):
        train.train(cfg, data=digits)
    with pytest.raises(ValueError, match=r"batch_size 100000 .* 1437"):
        train.train(cfg)                                         # the data set loaded from the config


def test_labels_beyond_num_classes_are_named(digits):
    x = digits.batch("train", torch.arange(4))[0]
    learner = methods.build(small_cnn(width=2, in_channels=1), "greedy", num_classes=5, example=x)
    cfg = train.TrainConfig(model=None, method=None, steps=1, batch_size=8, progress=False)
    with pytest.raises(ValueError, match=r"labels of data set 'digits' exceed num_classes: .* predicts 5 classes, "
                                         r"but the data set has 10 .*num_classes=10"):
        train.train(cfg, data=digits, learner=learner)


def test_estimate_takes_a_model_instead_of_a_factory(digits):
    x, y = digits.batch("train", torch.arange(16))
    model = small_cnn(width=2, in_channels=1)
    table = estimate.pipeline_estimate(model, x, y, devices=3)
    assert len(table) == 4
    with pytest.raises(TypeError, match="make_net must be a function"):
        estimate.pipeline_estimate(42, x, y, devices=3)


def test_a_data_dir_that_is_not_a_path_is_named():
    with pytest.raises(TypeError, match=r"data_dir must be a path .* got 42 \(int\)"):
        data.load("cifar10", 42)
    with pytest.raises(TypeError, match="data_dir"):
        data.locate("cifar10", 42)


def test_simulate_with_more_stages_than_blocks_names_the_blocks(capsys):
    rc, out, err = run_cli(["simulate", "--model", "user_models:small_cnn", "--model-kwargs", '{"width": 2}',
                            "--image-size", "4", "--stages", "8", "--micro-batch", "2", "--reps", "1",
                            "--steps", "1", "--schedule", "local,1f1b"], capsys)
    assert rc == 2
    assert "has 3 blocks and cannot be cut into 8 stages" in err and "chunked-8" not in err


# ------------------------------------------------------------------------- train --model
def test_train_takes_a_model_factory(capsys, tmp_path):
    out = tmp_path / "records.csv"
    rc, stdout, err = run_cli(["train", "--model", "user_models:small_cnn", "--model-kwargs",
                               '{"width": 2, "in_channels": 1}', "--method", "chunked-2", "--steps", "3",
                               "--batch-size", "8", "--eval-every", "0", "--no-progress", "--out", out], capsys)
    assert rc == 0, err
    assert "user_models:small_cnn" in stdout
    import pandas as pd
    assert set(pd.read_csv(out)["model"]) == {"user_models:small_cnn"}


def test_train_names_a_bad_model_factory(capsys):
    rc, _, err = run_cli(["train", "--model", "user_models:missing", "--steps", "1"], capsys)
    assert rc == 2 and "has no function 'missing'" in err
    rc, _, err = run_cli(["train", "--model", "vgg", "--steps", "1"], capsys)
    assert rc == 2 and "'vgg'" in err and "package.module:function" in err


def test_help_says_which_commands_take_user_models_and_what_chunked_at_means(capsys):
    for argv in (["simulate", "--help"], ["train", "--help"]):
        with pytest.raises(SystemExit):
            cli.main(argv)
        text = " ".join(capsys.readouterr().out.split())
        assert "package.module:function" in text, argv
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    assert "chunked@4 is two chunks" in " ".join(capsys.readouterr().out.split())
    assert "chunked@4" in methods.__doc__


# --------------------------------------------------------------------------------- Makefile
def _make_check_figures(repo: Path, here: str) -> subprocess.CompletedProcess:
    fake = repo / "fakepy"
    fake.write_text(f"#!/bin/sh\necho '{here}'\n")
    fake.chmod(0o755)
    return subprocess.run(["make", "-s", "check-figures", f"PY={fake}", "STAMP="], cwd=repo,
                          capture_output=True, text=True)


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("git") is None, reason="needs make and git")
def test_check_figures_compares_with_the_committed_machine(tmp_path):
    """``make figures`` on another CPU model redraws the figures and rewrites figures/MACHINE;
    check-figures must still see that the committed figures come from another machine."""
    repo = tmp_path / "repo"
    (repo / "figures").mkdir(parents=True)
    shutil.copy(ROOT / "Makefile", repo / "Makefile")
    (repo / "figures" / "MACHINE").write_text("machine A\n")
    (repo / "figures" / "f.png").write_bytes(b"drawn on A")
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "figures"]):
        subprocess.run(cmd, cwd=repo, check=True, env=env)
    # make figures on machine B: the figure differs in its last bits, MACHINE names B
    (repo / "figures" / "f.png").write_bytes(b"drawn on B")
    (repo / "figures" / "MACHINE").write_text("machine B\n")
    r = _make_check_figures(repo, "machine B")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "drawn on 'machine A'" in r.stdout and "not a failure" in r.stdout
    # on machine A itself a changed figure is a failure
    (repo / "figures" / "MACHINE").write_text("machine A\n")
    r = _make_check_figures(repo, "machine A")
    assert r.returncode != 0 and "not deterministic" in r.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lab_allows_root_only_as_root():
    r = subprocess.run(["make", "-n", "lab", "STAMP="], cwd=ROOT, capture_output=True, text=True)
    assert "jupyter lab notebooks/" in r.stdout
    assert ("--allow-root" in r.stdout) == (os.geteuid() == 0)
