"""``paper-repro simulate``: records, JSON, Gantt chart, errors, the calibration."""
import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from paper_repro import cli, cliargs, distributed
from paper_repro.cli import main
from paper_repro.distributed import PipelineConfig
from paper_repro.simulate import api, costs, schedules
from paper_repro.simulate.calibrate import measure

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(model="mlp", model_kwargs={"depth": 4, "width": 16}, image_size=4)


def test_the_parser_choices_and_defaults_are_the_package_names():
    """Both take the names from paper_repro.names; the defaults cli.py repeats so that ``--help``
    needs no torch."""
    assert cli.SIMULATED_SCHEDULES is schedules.SCHEDULES
    assert cli.CUTS is costs.CUTS
    assert cli.DTYPES == tuple(sorted(distributed.DTYPES)) and cli.DEVICES == distributed.DEVICES
    defaults = dataclasses.asdict(PipelineConfig())
    assert cli.PIPELINE_DEFAULTS == {k: defaults[k] for k in cli.PIPELINE_DEFAULTS}


def test_float_list_takes_counts_of_non_negative_numbers_or_a_keyword():
    two_or_three = cliargs.float_list(2, 3)
    assert two_or_three("1,2.5") == (1.0, 2.5) and two_or_three("0,1,2") == (0.0, 1.0, 2.0)
    for bad in ("1", "1,2,3,4", "1,-2", "1,x", "", "nan,1"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"expected 2 to 3 comma-separated non-negative numbers, "
                                                             f"got {bad!r}"):
            two_or_three(bad)
    link = cliargs.float_list(2, 2, keywords=("auto",))
    assert link("auto") == "auto" and link("1e-5,4e9") == (1e-5, 4e9)
    with pytest.raises(argparse.ArgumentTypeError, match="expected 2 comma-separated non-negative numbers or auto"):
        link("fast")


def test_uniform_times_print_a_table_and_write_json_and_gantt(tmp_path, capsys):
    out, png = tmp_path / "sim.json", tmp_path / "g.png"
    rc = main(["simulate", "--stages", "4", "--micro-batches", "8", "--schedule", "1f1b,gpipe,local,zbv",
               "--uniform-times", "1,2", "--json", str(out), "--gantt", str(png)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "1f1b" in text and "zbv" in text
    records = json.loads(out.read_text())
    one = {r["schedule"]: r for r in records}
    assert one["1f1b"]["makespan_s"] == pytest.approx((8 + 3) * 3)
    assert one["1f1b"]["bubble_fraction"] == pytest.approx(3 / 11)
    for key in ("schedule", "stages", "micro_batch", "samples_per_s", "makespan_s", "bubble_fraction",
                "busy_fraction_per_stage", "peak_mem_bytes_per_stage"):
        assert key in one["zbv"]
    assert one["zbv"]["busy_per_stage"] == one["zbv"]["busy_fraction_per_stage"]     # the former name, one release
    assert [r["schedule"] for r in records] == ["local", "gpipe", "1f1b", "zbv"]     # the tables' row order
    assert png.stat().st_size > 10_000


def test_calibrated_run_has_memory_per_stage_and_reuses_a_saved_calibration(tmp_path, capsys):
    cal, out = tmp_path / "cal.json", tmp_path / "sim.json"
    args = ["simulate", "--model", "mlp", "--model-kwargs", json.dumps(TINY["model_kwargs"]), "--image-size", "4",
            "--stages", "2", "--micro-batch", "4,8", "--micro-batches", "4", "--schedule", "local,1f1b-recompute",
            "--reps", "1", "--json", str(out)]
    assert main([*args, "--save-calibration", str(cal)]) == 0
    first = json.loads(out.read_text())
    assert main([*args, "--calibration", str(cal)]) == 0
    again = json.loads(out.read_text())
    assert [r["samples_per_s"] for r in first] == pytest.approx([r["samples_per_s"] for r in again])
    assert all(len(r["peak_mem_bytes_per_stage"]) == 2 and r["costs"] == "calibrated" for r in again)
    # a calibration of another model (here: other image size) is refused
    other = [("8" if a == "4" and prev == "--image-size" else a) for prev, a in zip(["", *args], args)]
    assert main([*other, "--calibration", str(cal)]) == 2
    assert "calibration" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["--schedule", "pipedream", "--uniform-times", "1,2"], "unknown schedule 'pipedream'"),
    (["--schedule", "1f1b", "--stages", "4", "--micro-batches", "2", "--uniform-times", "1,2"], "micro_batches >= stages"),
    (["--uniform-times", "1,2", "--link", "0.1,0"], "bandwidth must be > 0"),
    (["--uniform-times", "1,2", "--json", "/proc/no/such.json"], "cannot write --json"),
])
def test_bad_input_exits_2_naming_the_value(argv, message, capsys):
    assert main(["simulate", *argv]) == 2
    assert message in capsys.readouterr().err


def test_api_ratio_to_1f1b():
    cfg = PipelineConfig(stages=2, micro_batches=4, steps=1, warmup_steps=0)
    records = api.run(cfg, ["1f1b", "local"], [2], uniform=(1.0, 2.0))
    ratios = {r["schedule"]: r["ratio"] for r in api.ratios(records)}
    assert ratios["1f1b"] == 1.0
    assert ratios["local"] == pytest.approx(((4 + 1) * 3) / (1 + 4 * 3))


def test_calibration_measures_every_block_and_head():
    bc = measure(PipelineConfig(**TINY, micro_batch=4), reps=1)
    assert bc.blocks == 4
    for name in ("forward", "backward", "backward_weight", "optimizer", "head_forward", "head_backward"):
        assert len(getattr(bc, name)) == 4 and all(v > 0 for v in getattr(bc, name))
    assert len(bc.accumulate) == 4 and all(v >= 0 for v in bc.accumulate)
    assert bc.out_bytes == [4 * 16 * 4] * 4        # micro-batch x width x float32 bytes
    assert bc.data > 0 and bc.concat > 0            # the input drawn, and a step's batch joined


# ------------------------------------------------------------- a token model of your own
TEXT = ["--stages", "2", "--micro-batch", "2", "--micro-batches", "4", "--schedule", "local,1f1b", "--reps", "1"]


def test_the_input_kinds_are_the_simulators():
    from paper_repro.simulate import inputs

    assert cli.SIMULATED_INPUTS == inputs.KINDS
    args = cli.build_parser().parse_args(["simulate", "--input", "text", "--channels", "1"])
    assert args.input == "text" and args.channels == 1
    assert cli.build_parser().parse_args(["simulate"]).input is None


@pytest.mark.parametrize("model", ["user_models:byte_lm", "user_models:byte_lm_net"])
def test_a_token_model_of_your_own_simulates_with_input_text(model, tmp_path, capsys):
    out = tmp_path / "sim.json"
    assert main(["simulate", "--model", model, "--input", "text", "--seq-len", "8", "--num-classes", "256",
                 *TEXT, "--json", str(out)]) == 0, capsys.readouterr().err
    records = {r["schedule"]: r for r in json.loads(out.read_text())}
    assert set(records) == {"local", "1f1b"}
    for r in records.values():    # calibrated on token windows; memory counted on them too
        assert r["costs"] == "calibrated" and r["samples_per_s"] > 0 and len(r["peak_mem_bytes_per_stage"]) == 2
    # 8 tokens x 16 features x 4 bytes forward per sample, plus 8 int64 next-token labels in the local pipeline
    assert records["local"]["comm_bytes_per_sample"] == {"forward": 8 * 16 * 4 + 8 * 8, "backward": 0.0}
    # without --input the model gets images: one line naming the model, the input and the way out
    assert main(["simulate", "--model", model, *TEXT]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: model {model} cannot take the simulator's image input of shape (2, 3, 32, 32)")
    assert "give --input text" in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_one_channel_model_of_your_own_takes_channels(capsys):
    argv = ["simulate", "--model", "user_models:small_cnn", "--model-kwargs", '{"in_channels": 1}',
            "--image-size", "8", *TEXT]
    assert main([*argv, "--channels", "1"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(argv) == 2
    assert "cannot take the simulator's image input of shape (2, 3, 8, 8)" in capsys.readouterr().err
