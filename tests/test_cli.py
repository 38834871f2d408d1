"""The ``paper-repro`` command explains itself: fast ``--help`` (no torch), help and a default
for every option, choices that agree with the package; output formats chosen by extension;
a batch larger than the training set refused."""
import argparse
import importlib
import json
import subprocess
import sys

import pandas as pd
import pytest

from paper_repro import cli, commands, config, data, models, names, notebooks, settings


def test_the_parser_choices_are_the_package_names():
    assert cli.MODELS == models.MODELS
    assert cli.DATASETS == data.DATASETS
    assert cli.OPTIMIZERS == names.OPTIMIZERS
    assert cli.PROFILES == settings.PROFILES
    assert cli.SWEEP_STUDIES == (*settings.COMPUTE_STUDIES, *settings.DEPTH_SERIES)
    assert cli.NOTEBOOKS_DIR == notebooks.NOTEBOOKS_DIR


def test_every_handler_names_a_function_of_commands():
    """Handlers live in paper_repro.commands; simulate's in the simulator (it imports matplotlib)."""
    for command, target in cli.HANDLERS.items():
        module, function = target.split(":")
        where = {"simulate": "paper_repro.simulate.command"}.get(command, "paper_repro.commands")
        assert module == where and callable(getattr(importlib.import_module(module), function)), command


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["sweep", "--help"], ["bench", "overhead", "--help"],
                                  ["bench", "pipeline", "--help"], ["notebooks", "run", "--help"],
                                  ["simulate", "--help"]])
def test_help_does_not_import_torch(argv):
    """Checked in a fresh interpreter: help comes from the parser alone."""
    code = ("import sys\nfrom paper_repro import cli\ntry:\n    cli.main(sys.argv[1:])\nexcept SystemExit as e:\n"
            "    assert e.code == 0, e.code\nprint('TORCH', 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("TORCH False"), proc.stdout[-300:]
    assert "usage: paper-repro" in proc.stdout


def _subparsers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                yield from ((f"{name} {n}", s) for n, s in _subparsers(sub))


def test_every_option_has_help_and_shows_its_default():
    parser = cli.build_parser()
    assert "train one model with one method" in parser.format_help()
    leaves = dict(_subparsers(parser))
    assert set(cli.HANDLERS) <= set(leaves)
    for name in cli.HANDLERS:
        sub = leaves[name]
        assert sub.formatter_class is cli.HelpFormatter, name  # appends "(default: ...)" to every help
        options = [a for a in sub._actions if a.option_strings and not isinstance(a, argparse._HelpAction)
                   and a.help != argparse.SUPPRESS]           # a former spelling is hidden from --help
        for action in sub._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, f"{name} {action.option_strings or action.dest} has no help"
        assert sub.format_help().count("(default:") >= len(options), name


def test_bench_pipeline_takes_its_options_and_defaults_from_the_torch_free_fields():
    """The parser is the worker's (paper_repro.distributed.arguments); its defaults are a
    pipeline run's (PipelineFields, which PipelineConfig checks)."""
    from paper_repro.distributed.config import PipelineConfig
    pipeline = dict(_subparsers(cli.build_parser()))["bench pipeline"]
    args = pipeline.parse_args([])
    defaults = PipelineConfig()
    for key in ("stages", "micro_batches", "steps", "warmup_steps", "cut", "dtype", "device", "prefetch",
                "timeout", "image_size", "optimizer", "lr"):
        assert getattr(args, key) == getattr(defaults, key), key
    assert args.micro_batch == [defaults.micro_batch] and args.schedule == ["local"]


# ------------------------------------------------------------------------------ output formats
FRAME = pd.DataFrame({"step": [1, 2], "final_loss": [2.5, float("nan")], "method": ["greedy", "greedy"]})


@pytest.mark.parametrize("ext, read", [(".csv", pd.read_csv), (".json", pd.read_json)])
def test_tables_are_written_in_the_format_of_the_extension(tmp_path, ext, read):
    out = commands.write_table(FRAME, str(tmp_path / f"rec{ext}"))
    back = read(out)
    pd.testing.assert_frame_equal(back, FRAME, check_dtype=False)
    assert not list(tmp_path.glob("*.tmp"))
    if ext == ".json":
        assert json.loads(out.read_text())[0] == {"step": 1, "final_loss": 2.5, "method": "greedy"}


def test_parquet_is_written_when_a_library_is_installed_and_refused_clearly_otherwise(tmp_path):
    path = str(tmp_path / "rec.parquet")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        try:
            import fastparquet  # noqa: F401
        except ImportError:
            with pytest.raises(ValueError, match=r"needs pyarrow or fastparquet.*pip install pyarrow"):
                commands.write_table(FRAME, path)
            return
    pd.testing.assert_frame_equal(pd.read_parquet(commands.write_table(FRAME, path)), FRAME)


@pytest.mark.parametrize("out, match", [("rec.txt", r"unknown output format '.txt'; valid: .csv"),
                                        ("rec", r"unknown output format '\(no extension\)'")])
def test_train_refuses_an_unknown_output_format_before_training(tmp_path, capsys, out, match):
    rc = cli.main(["train", "--steps", "1", "--no-progress", "--out", str(tmp_path / out)])
    assert rc == 2
    assert __import__("re").search(match, capsys.readouterr().err)
    assert not list(tmp_path.iterdir())


def test_train_writes_json_records_naming_model_and_method(tmp_path, capsys):
    out = tmp_path / "rec.json"
    rc = cli.main(["train", "--method", "greedy", "--steps", "3", "--eval-every", "0", "--no-progress",
                   "--model-kwargs", '{"depth": 2, "width": 8}', "--out", str(out)])
    assert rc == 0
    rows = json.loads(out.read_text())
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert {(r["model"], r["method"], r["status"]) for r in rows} == {("mlp", "greedy", "finished")}
    assert f"records written to {out}" in capsys.readouterr().out


def test_a_batch_larger_than_the_training_set_is_refused(capsys):
    rc = cli.main(["train", "--batch-size", "100000", "--steps", "1", "--no-progress"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--batch-size 100000 is larger than the training split of 'digits' (1,437 examples)" in err
    assert "use at most 1437" in err


@pytest.mark.parametrize("command", [["train", "--stages", "2"], ["bench", "pipeline"], ["simulate"]])
def test_the_cut_options_keep_their_former_spellings_for_a_release(command, capsys):
    parser = cli.build_parser()
    new = parser.parse_args(command + ["--cut", "flops"])
    assert new.cut == "flops" and "warning" not in capsys.readouterr().err
    old = parser.parse_args(command + ["--balance", "flops"])
    assert old.cut == "flops"
    assert "warning: --balance is now --cut; --balance goes in the next release" in capsys.readouterr().err
    if command[0] != "simulate":
        for former, spelling, dest in (("--split", "--cut-at", "cut_at"),
                                       ("--block-split", "--cut-at-blocks", "cut_at_blocks")):
            assert getattr(parser.parse_args(command + [spelling, "1,2"]), dest) == [1, 2]
            assert getattr(parser.parse_args(command + [former, "1,2"]), dest) == [1, 2]
            assert f"warning: {former} is now {spelling}" in capsys.readouterr().err
    with pytest.raises(SystemExit):                     # a former spelling still checks its value
        parser.parse_args(command + ["--balance", "nope"])
    capsys.readouterr()
    with pytest.raises(SystemExit):
        parser.parse_args(command + ["--help"])
    shown = capsys.readouterr().out
    assert "--cut" in shown and "--balance" not in shown and "--split" not in shown   # hidden from --help
