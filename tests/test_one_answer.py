"""estimate, simulate and bench pipeline give one kind of answer: the names come from one module,
the three cut a net by the same rule by default, print the same table (every column, every
stage), and bench on a model of the user's reports ratios rather than the project's targets.
A SIGTERM to bench pipeline keeps the runs that had finished."""
import ast
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

import paper_repro
from paper_repro import cli, config, data, estimate, methods, models, names, report_table, settings
from paper_repro.distributed import PipelineConfig, options
from paper_repro.distributed import config as pipeline_config
from paper_repro.simulate import api, costs, schedules

PACKAGE = Path(paper_repro.__file__).parent
TUPLES = {"MODELS": names.MODELS, "DATASETS": names.DATASETS, "OPTIMIZERS": names.OPTIMIZERS,
          "PROFILES": names.PROFILES, "COMPUTE_STUDIES": names.COMPUTE_STUDIES,
          "SIMULATED_SCHEDULES": names.SIMULATED_SCHEDULES, "RUN_NAMES": names.RUN_NAMES,
          "MULTI_STAGE": names.MULTI_STAGE, "CUTS": names.CUTS, "DTYPES": names.DTYPES, "METHODS": names.METHODS}


# ------------------------------------------------------------------------------------ names
def _tuple_literals(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Tuple) and node.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            yield node.lineno, tuple(e.value for e in node.elts)


def test_every_name_tuple_is_written_once_in_names():
    """No module but names.py spells out a name tuple (or its first three names in a row)."""
    copies = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "names.py":
            continue
        for line, values in _tuple_literals(path):
            for key, names_tuple in TUPLES.items():
                head = names_tuple[:3]
                if len(values) >= 2 and (values == names_tuple or values[:len(head)] == head):
                    copies.append(f"{path.relative_to(PACKAGE.parent)}:{line} repeats names.{key}")
    assert not copies, "\n".join(copies)


def test_the_parser_and_the_modules_hold_the_same_objects():
    assert cli.MODELS is models.MODELS is names.MODELS
    assert cli.DATASETS is data.DATASETS is names.DATASETS
    assert cli.OPTIMIZERS is names.OPTIMIZERS
    assert cli.PROFILES is settings.PROFILES is names.PROFILES
    assert cli.SWEEP_STUDIES is names.SWEEP_STUDIES and settings.COMPUTE_STUDIES is names.COMPUTE_STUDIES
    assert cli.SIMULATED_SCHEDULES is schedules.SCHEDULES is names.SIMULATED_SCHEDULES
    assert options.RUN_NAMES is names.RUN_NAMES and pipeline_config.RUN_SCHEDULES is names.RUN_SCHEDULES
    assert pipeline_config.CUTS is costs.CUTS is names.CUTS
    assert tuple(sorted(pipeline_config.DTYPES)) == names.DTYPES and pipeline_config.DEVICES is names.DEVICES


def test_bench_pipeline_help_imports_no_torch_and_lists_the_names_as_choices():
    """The options come from the torch-free paper_repro.distributed.arguments; checked in a
    fresh interpreter."""
    code = ("import sys\nfrom paper_repro import cli\ntry:\n    cli.main(['bench', 'pipeline', '--help'])\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\nprint('TORCH', 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "10000"})   # no wrapping inside a name
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("TORCH False"), proc.stdout[-300:]
    text = " ".join(proc.stdout.split())
    for option, choices in (("--schedule", names.RUN_NAMES), ("--cut", names.CUTS), ("--dtype", names.DTYPES),
                            ("--device", names.DEVICES), ("--optimizer", names.OPTIMIZERS)):
        assert option in text, option
        if option == "--schedule":                       # a comma list: the names are in its help
            assert " | ".join(choices) in text
        else:
            assert f"{option} {{{','.join(choices)}}}" in text, option
    assert "--stages STAGES" in text and "processes, one stage each" in text


def test_names_import_nothing_heavy():
    code = "import sys, paper_repro.names, paper_repro.report_table; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_the_simulator_takes_bench_names_and_the_old_spellings_with_a_warning():
    assert set(names.SIMULATED_SCHEDULES) - {"gpipe-recompute"} <= set(names.RUN_NAMES)
    for old, new in names.SCHEDULE_ALIASES.items():
        with pytest.warns(names.DeprecatedName, match=f"schedule '{old}' is deprecated; use '{new}'"):
            assert schedules.check_schedule(old) == new
        with pytest.warns(names.DeprecatedName):
            assert api.parse_schedules(old) == [new]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert api.parse_schedules("local/M,interleaved-zb") == ["local/M", "interleaved-zb"]
    with pytest.raises(ValueError, match="unknown schedule 'local-per-micro'"):
        schedules.check_schedule("local-per-micro")


# ------------------------------------------------------------------------------ default cut
def _default(parser_name: str, dest: str):
    leaves = {}
    for action in cli.build_parser()._actions:
        if hasattr(action, "choices") and isinstance(action.choices, dict):
            for name, sub in action.choices.items():
                leaves[name] = sub
                for a in sub._actions:
                    if hasattr(a, "choices") and isinstance(a.choices, dict):
                        leaves.update({f"{name} {n}": s for n, s in a.choices.items()})
    return next(a.default for a in leaves[parser_name]._actions if a.dest == dest)


def test_the_three_tools_default_to_the_measured_time_cut():
    assert names.DEFAULT_CUT == "time"
    assert inspect.signature(estimate.pipeline_estimate).parameters["cut"].default == names.DEFAULT_CUT
    assert inspect.signature(api.run).parameters["cut"].default == names.DEFAULT_CUT
    assert inspect.signature(costs.pieces).parameters["cut"].default == names.DEFAULT_CUT
    assert PipelineConfig().cut == names.DEFAULT_CUT
    assert _default("simulate", "cut") == _default("bench pipeline", "cut") == names.DEFAULT_CUT


def tiny_resnet():
    """A ResNet-18-like net small enough for a test: stem, four residual stages, one block each."""
    return models.build("resnet18", num_classes=10, width=4)


def test_estimate_simulate_and_bench_name_the_same_schedules_and_cut_on_a_small_resnet():
    torch.manual_seed(0)
    x, y = torch.randn(4, 3, 8, 8), torch.randint(10, (4,))
    est = estimate.pipeline_estimate(tiny_resnet, x, y, devices=4)
    assert set(est["schedule"]) - {"backprop"} <= set(names.RUN_NAMES)
    assert set(est["cut"]) == {"time"}
    assert est.loc[est["schedule"] == "local", "method"].item().startswith("chunked@")
    cfg = PipelineConfig(model="resnet18", model_kwargs={"width": 4}, image_size=8, stages=4, micro_batch=4,
                         micro_batches=8, steps=1, warmup_steps=0).validate()
    bc = api.calibration(cfg, reps=1)
    sim = api.run(cfg, ["local", "local/M", "1f1b", "1f1b-recompute"], [4], block_costs=bc, memory=False)
    assert [r["schedule"] for r in sim] == ["local", "local/M", "1f1b", "1f1b-recompute"]
    assert {r["cut"] for r in sim} == {"time"}
    assert set(est["schedule"]) - {"backprop"} <= {r["schedule"] for r in sim}
    # every cut rule is accepted by every tool
    for cut in names.CUTS:
        estimate.pipeline_estimate(tiny_resnet, x, y, devices=4, cut=cut)
        api.run(cfg, ["1f1b"], [4], block_costs=bc, memory=False, cut=cut)
        PipelineConfig(model="resnet18", cut=cut).validate()
    for bad in (lambda: estimate.pipeline_estimate(tiny_resnet, x, y, devices=4, cut="even"),
                lambda: PipelineConfig(model="resnet18", cut="even").validate()):
        with pytest.raises(ValueError, match="unknown cut 'even'"):
            bad()
    # the former keyword, for one release: the same cut, with a FutureWarning naming the new one
    with pytest.warns(FutureWarning, match=r"pipeline_estimate\(balance=...\) is now pipeline_estimate\(cut=...\)"):
        former = estimate.pipeline_estimate(tiny_resnet, x, y, devices=4, balance="blocks")
    assert set(former["cut"]) == {"blocks"}
    with pytest.warns(FutureWarning, match=r"run\(balance=...\) is now run\(cut=...\)"):
        assert {r["cut"] for r in api.run(cfg, ["1f1b"], [4], block_costs=bc, memory=False, balance="flops")} == {"flops"}


# -------------------------------------------------------------------------------- the table
def _record(schedule, stages, sps, **extra):
    return dict(schedule=schedule, stages=stages, micro_batch=8, micro_batches=16, samples_per_s=sps,
                comm_bytes_per_sample={"forward": 1000.0, "backward": 0.0},
                peak_mem_bytes_per_stage=[(s + 1) * 2 ** 20 for s in range(stages)],
                busy_fraction_per_stage=[0.5 + s / 100 for s in range(stages)], **extra)


def test_the_table_has_every_column_a_legend_and_every_stage():
    stages = 12
    records = [_record("1f1b", stages, 100.0), _record("1f1b-recompute", stages, 80.0),
               _record("local", stages, 150.0), _record("local", stages, 120.0, update_every=16)]
    text = report_table.format_table(records)
    head = text.splitlines()[0]
    for column in ("schedule", "S", "B", "M", "samples/s", "min-max", "x1f1b", "x1f1b-recompute", "fwd B/sample",
                   "bwd B/sample", "blocks per stage", "peak MiB per stage", "busy per stage"):
        assert column in head, column
    for word in ("S:", "B:", "M:", "x1f1b", "x1f1b-recompute", "fwd B/sample", "peak MiB", "busy", "min-max:",
                 "blocks per stage:"):
        assert word in text.split("\n\n")[-1], word       # the legend explains every header
    for s in range(stages):
        assert f"{0.5 + s / 100:.2f}" in text             # busy of every stage, none cut off
        assert f"{s + 1:.1f}" in text                     # memory of every stage
    assert "..." not in text
    local = next(line for line in text.splitlines() if line.startswith("local "))
    assert re.search(r"150\.0\s+-\s+1\.50\s+1\.88", local)  # no spread; ratio to 1F1B and to 1F1B+recompute
    assert any(line.startswith("local/M ") for line in text.splitlines())


def test_the_three_tools_print_that_table():
    torch.manual_seed(0)
    x, y = torch.randn(4, 3, 8, 8), torch.randint(10, (4,))
    est = estimate.pipeline_estimate(tiny_resnet, x, y, devices=4, cut="blocks")
    header = report_table.format_table([]).splitlines()[0]
    assert str(est).splitlines()[0] == repr(est).splitlines()[0] == est.to_string().splitlines()[0] == header
    assert "x1f1b-recompute" in str(est) and "speedup" in est.columns     # the DataFrame is still there
    cfg = PipelineConfig(model="mlp", stages=9, micro_batches=16).validate()
    sim = api.run(cfg, ["local", "1f1b"], [8], uniform=(1.0, 2.0))
    text = api.format_table(sim)
    assert text.splitlines()[0] == header
    busy = " ".join(re.findall(r"\d\.\d\d", "\n".join(text.splitlines()[2:4])))
    assert len(text.splitlines()[2:]) > 3 and busy       # nine stages wrap onto a second line
    from paper_repro.distributed import report
    assert report.format_table([_record("local", 2, 1.0)]).splitlines()[0] == header


# ------------------------------------------------------------------- bench on a user's model
SMALL = ["--stages", "2", "--micro-batch", "2", "--micro-batches", "2", "--steps", "1", "--warmup-steps", "0",
         "--image-size", "4", "--cut", "blocks", "--no-progress"]


def _bench(argv, env=None, **kw):
    return subprocess.run([sys.executable, "-m", "paper_repro", "bench", "pipeline", *argv, *SMALL],
                          capture_output=True, text=True, timeout=600, cwd=Path(__file__).parent,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parent), **(env or {})}, **kw)


def test_bench_on_a_users_model_prints_ratios_and_no_targets():
    proc = _bench(["--model", "user_models:small_cnn", "--model-kwargs", '{"width": 2}', "--schedule",
                   "local,1f1b,1f1b-recompute"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "x1f1b-recompute" in proc.stdout and "MISSED" not in proc.stdout and "target" not in proc.stdout
    local = next(line for line in proc.stdout.splitlines() if line.startswith("local "))
    assert re.search(r"\s\d+\.\d\d\s+\d+\.\d\d\s", local), local


# ------------------------------------------------------------------------- SIGTERM keeps runs
def test_sigterm_saves_the_bench_runs_that_had_finished(tmp_path):
    out = tmp_path / "runs.json"
    argv = [sys.executable, "-m", "paper_repro", "bench", "pipeline", "--model", "mlp", "--model-kwargs",
            '{"depth": 2, "width": 8}', "--schedule", "local,1f1b", "--repeats", "200", "--json", str(out),
            *SMALL]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"},
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not list(tmp_path.glob("paper_repro_pipeline_*/partial.json")):
            assert proc.poll() is None and time.monotonic() < deadline, "no run finished"
            time.sleep(0.2)
        time.sleep(0.5)
        os.kill(proc.pid, signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, stderr[-2000:]
    saved = json.loads(out.read_text())
    assert 1 <= len(saved) < 400 and {r["schedule"] for r in saved} <= {"local", "1f1b"}
    assert re.search(rf"terminated \(SIGTERM\): .* the {len(saved)} of 400 runs that had finished are saved in "
                     rf"{re.escape(str(out))}", stderr), stderr[-2000:]
    assert out.with_suffix(".csv").exists() and "samples/s" in stdout
