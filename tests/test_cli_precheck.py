"""Bad command-line input is refused before torch loads (:mod:`paper_repro.precheck`): exit
status 2, one line, and the same message the command itself gives once it has loaded."""
import subprocess
import sys
from pathlib import Path

import pytest

from paper_repro import cli, notebooks

ROOT = Path(__file__).resolve().parent.parent

BAD = [
    (["train", "--method", "sideways"], "unknown method 'sideways'; valid: backprop, greedy, overlapping, chunked-K"),
    (["train", "--model", "vgg"], "unknown model 'vgg'"),
    (["train", "--device", "tpu9"], "unknown device 'tpu9'"),
    (["simulate", "--schedule", "1f1b,pipedream", "--uniform-times", "1,2"], "unknown schedule 'pipedream'"),
    (["simulate", "--model", "nope"], "unknown model 'nope'"),
    (["simulate", "--uniform-times", "1,2", "--link", "0.1,0"], "link bandwidth must be > 0"),
    (["simulate", "--uniform-times", "1,2", "--json", "/proc/no/such.json"], "cannot write --json '/proc/no/such.json'"),
    (["sweep"], "give exactly one of STUDY"),
    (["sweep", "mlp", "--shard", "5/2"], "shard '5/2': need n >= 1"),
    (["sweep", "mlp", "--shard", "3"], "shard must look like i/n"),
    (["sweep", "mlp", "--workers", "-1"], "workers must be a non-negative integer, got -1"),
    (["sweep", "mlp", "--device", "gpu"], "unknown device 'gpu'"),
    (["bench", "pipeline", "--stages", "0"], "stages must be a positive integer, got 0"),
    (["bench", "pipeline", "--model", "nope"], "unknown model 'nope'"),
    (["bench", "pipeline", "--dataset", "mnist"], "unknown dataset 'mnist'"),
    (["bench", "overhead", "--threads", "0"], "--threads must be a positive integer, got 0"),
    (["notebooks", "run", "--only", "nope"], "unknown notebook 'nope'"),
    (["notebooks", "run", "-p", "nope", "1"], "unknown notebook parameter 'nope'"),
    (["notebooks", "run", "--only", "09", "-p", "seed", "abc"],
     "notebook parameter seed='abc' has type str; expected int (notebook 09_your_model)"),
    (["notebooks", "run", "--only", "09", "-p", "lr", "fast"], "notebook parameter lr='fast' has type str; expected float"),
    (["notebooks", "run", "-p", "train_missing", "maybe"], "notebook parameter train_missing='maybe' has type str; "
                                                           "expected bool (notebook 01_compute_efficiency)"),
    (["notebooks", "run", "--data-dir", "cifar10"], "--data-dir expects DATASET=PATH"),
]


@pytest.mark.parametrize("argv,message", BAD, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_bad_input_is_refused_in_one_line_without_importing_torch(argv, message):
    code = ("import sys\nfrom paper_repro.cli import main\nrc = main(sys.argv[1:])\n"
            "print('TORCH', 'torch' in sys.modules)\nsys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert "TORCH False" in proc.stdout


# the command's own check, once loaded, says the same (the type of a notebook parameter the
# command only learns from the kernel: that case is left out)
@pytest.mark.parametrize("argv,message", [b for b in BAD if "has type" not in b[1]],
                         ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_the_command_itself_gives_the_same_message(argv, message, monkeypatch):
    monkeypatch.setattr(notebooks, "run_notebooks", lambda **kw: pytest.fail("a notebook ran"))
    args = cli.build_parser().parse_args(argv)
    if argv[0] == "bench" and argv[1] == "pipeline":
        from paper_repro.distributed.options import configs_from_args
        run = lambda a: configs_from_args(a)  # noqa: E731  (the command's first step; runs no process)
    else:
        run = args.func
    with pytest.raises(ValueError) as err:
        run(args)
    assert message in str(err.value)


def test_a_wrongly_typed_notebook_parameter_exits_2_as_an_unknown_one(capsys, monkeypatch):
    monkeypatch.setattr(notebooks, "run_notebooks", lambda **kw: pytest.fail("a notebook ran"))
    assert cli.main(["notebooks", "run", "--only", "09", "-p", "seed", "abc"]) == 2
    assert cli.main(["notebooks", "run", "--only", "09", "-p", "sed", "1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: notebook parameter seed='abc'") and err[1].startswith("error: unknown notebook parameter 'sed'")
    # values of the right type pass on to the notebooks (JSON null where None is allowed)
    seen = []
    monkeypatch.setattr(notebooks, "run_notebooks", lambda **kw: seen.append(kw) or [])
    assert cli.main(["notebooks", "run", "--only", "00", "-p", "seed", "3", "-p", "data_dir", "null"]) == 0
    assert seen[0]["parameters"] == {"seed": 3, "data_dir": None}


def test_notebook_parameters_read_without_papermill_are_papermills():
    import papermill as pm

    for path in notebooks.list_notebooks():
        assert notebooks.parameter_names(path) == list(pm.inspect_notebook(str(path))), path.stem
        types = notebooks.declared_types(path)
        assert types and set(types) <= set(notebooks.parameter_names(path)), path.stem
        assert types["profile"] is str
