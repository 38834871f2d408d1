"""``paper-repro simulate``: records, JSON, Gantt chart, errors, and the validation against real runs."""
import argparse
import dataclasses
import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from paper_repro import cli, cliargs, distributed
from paper_repro.cli import main
from paper_repro.distributed import PipelineConfig
from paper_repro.simulate import api, costs, schedules, validate
from paper_repro.simulate.calibrate import measure
from paper_repro.simulate.linkcal import measure_link

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(model="mlp", model_kwargs={"depth": 4, "width": 16}, image_size=4)


def test_the_parser_choices_and_defaults_are_the_package_names():
    """Both take the names from paper_repro.names; the defaults cli.py repeats so that ``--help``
    needs no torch."""
    assert cli.SIMULATED_SCHEDULES is schedules.SCHEDULES
    assert cli.CUTS is costs.BALANCES
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
                "busy_per_stage", "peak_mem_bytes_per_stage"):
        assert key in one["zbv"]
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


def test_validation_runs_real_pipelines_and_simulator_side_by_side(tmp_path):
    """Tiny sizes (the real check runs on an idle machine): the table has both sides for every
    schedule, the ratios are computed against 1F1B, and the memory accounting is exact."""
    base = PipelineConfig(**TINY, micro_batches=4, steps=1, warmup_steps=1, timeout=60.0)
    df = validate.compare(base, [2], [4], ["local", "local/M", "gpipe", "1f1b", "1f1b-recompute"], reps=1)
    assert sorted(df.schedule) == sorted(["local", "local/M", "gpipe", "1f1b", "1f1b-recompute"])
    assert (df.measured_samples_per_s > 0).all() and (df.simulated_samples_per_s > 0).all()
    assert df[df.schedule == "1f1b"].measured_ratio_vs_1f1b.tolist() == [1.0]
    assert df.saved_bytes_max_rel_error.max() == 0.0
    assert df.measured_busy.between(0, 1).all() and df.simulated_busy.between(0, 1 + 1e-9).all()
    assert len(df.attrs["malloc_env"]) == 1 and json.loads(df.attrs["malloc_env"][0]) is not None   # recorded
    md, csv = validate.write(df, tmp_path / "v.md", "test note")
    assert "test note" in md.read_text() and "| local |" in md.read_text().replace("| mlp | 2 | 4 ", "")
    assert csv.exists()


def test_calibration_measures_every_block_and_head():
    bc = measure(PipelineConfig(**TINY, micro_batch=4), reps=1)
    assert bc.blocks == 4
    for name in ("forward", "backward", "backward_weight", "optimizer", "head_forward", "head_backward"):
        assert len(getattr(bc, name)) == 4 and all(v > 0 for v in getattr(bc, name))
    assert len(bc.accumulate) == 4 and all(v >= 0 for v in bc.accumulate)
    assert bc.out_bytes == [4 * 16 * 4] * 4        # micro-batch x width x float32 bytes
    assert bc.data > 0 and bc.concat > 0            # the input drawn, and a step's batch joined


def test_link_is_measured_between_two_processes():
    for compute_s in (0.0, 0.002):      # back to back, and after some compute as stages do
        link = measure_link(small=4, large=1 << 20, reps=3, compute_s=compute_s)
        assert 0 <= link.latency < 0.1 and link.bandwidth > 1e6
    with pytest.raises(ValueError, match="small=8, large=4"):
        measure_link(small=8, large=4)
    with pytest.raises(ValueError, match="compute_s must be >= 0 seconds, got -1"):
        measure_link(compute_s=-1)
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda', got 'tpu'"):
        measure_link(device="tpu")


def test_the_cuda_link_needs_two_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match="needs 2 GPUs \\(one per process\\), 1 visible"):
        measure_link(device="cuda")


def test_validate_writes_the_real_runs_and_simulates_them_again(tmp_path, capsys):
    """``--validate`` keeps the real runs beside the table; ``--validate-against`` that file
    compares the same measurements with a new simulation."""
    args = ["simulate", "--model", "mlp", "--model-kwargs", json.dumps(TINY["model_kwargs"]), "--image-size", "4",
            "--stages", "2", "--micro-batch", "4", "--micro-batches", "4", "--steps", "1", "--warmup-steps", "1",
            "--schedule", "local,1f1b", "--reps", "1", "--link", "1e-4,1e9"]
    assert main([*args, "--validate", str(tmp_path / "v")]) == 0
    runs = tmp_path / "v.runs.json"
    records = json.loads(runs.read_text())
    assert sorted(r["schedule"] for r in records) == ["1f1b", "local"]
    assert main([*args, "--validate", str(tmp_path / "again"), "--validate-against", str(runs)]) == 0
    first, again = (pd.read_csv(tmp_path / f"{n}.csv") for n in ("v", "again"))
    assert first.measured_samples_per_s.tolist() == again.measured_samples_per_s.tolist()
    assert not (tmp_path / "again.runs.json").exists()      # nothing new was run
    assert "v.runs.json" in capsys.readouterr().out
    assert "Made with `paper-repro simulate --model mlp" in (tmp_path / "again.md").read_text()
    # the same runs, simulated with stage costs replayed in each schedule's order
    again_replayed = ["--validate", str(tmp_path / "replayed"), "--validate-against", str(runs), "--replay", "1"]
    assert main([*args, *again_replayed]) == 0
    replayed = pd.read_csv(tmp_path / "replayed.csv")
    assert replayed.measured_samples_per_s.tolist() == first.measured_samples_per_s.tolist()
    assert (replayed.simulated_samples_per_s > 0).all()
    assert "replaying its compute in the run's schedule order" in (tmp_path / "replayed.md").read_text()
    # and with the durations the runs measured themselves (a check of the engine alone)
    assert main([*args, "--validate", str(tmp_path / "in_situ"), "--validate-against", str(runs), "--in-situ"]) == 0
    assert "not a prediction" in (tmp_path / "in_situ.md").read_text()


def test_validation_against_stored_runs_uses_their_cuts_and_settings():
    records = [r for r in json.loads(open(ROOT / "results/pipeline/resnet18w16_chunked2_cpu2.json").read())
               if r["micro_batch"] == 8]
    df = validate.against(records, reps=1)
    assert sorted(df.schedule) == sorted(["local", "local/M", "gpipe", "1f1b", "1f1b-recompute"])
    assert df.measured_samples_per_s.tolist() == [r["samples_per_s"] for r in records if r["schedule"] != "ddp"]
    assert df.saved_bytes_max_rel_error.max() == 0.0
    runs = {r["schedule"] if (r.get("update_every") or 1) == 1 else "local/M": r["samples_per_s_runs"]
            for r in records if r["schedule"] != "ddp"}
    for row in df.itertuples():      # the spread of the paired repeats, and the two checks
        ratios = [a / b for a, b in zip(runs[row.schedule], runs["1f1b"])]
        assert (row.measured_ratio_min, row.measured_ratio_max) == pytest.approx((min(ratios), max(ratios)))
        assert row.within_15pct == (abs(row.ratio_rel_error) <= 0.15)
        assert row.within_repeats == (min(ratios) <= row.simulated_ratio_vs_1f1b <= max(ratios))
        busy = next(r["busy_fraction_per_stage"] for r in records
                    if (r["schedule"] if (r.get("update_every") or 1) == 1 else "local/M") == row.schedule)
        assert row.measured_busy == pytest.approx(sum(busy) / len(busy))
    assert df.attrs["malloc_env"] == ["null"]     # runs made before the settings were recorded
    with pytest.raises(ValueError, match="no 1f1b run"):
        validate.against([r for r in records if r["schedule"] != "1f1b"], reps=1)


def test_paired_ratios_pair_repeat_by_repeat():
    assert validate.paired_ratios([10, 20, 30], [10, 10, 20]) == [1.0, 2.0, 1.5]
    assert validate.paired_ratios([10, 30], [20]) == [1.0]     # unpaired: ratio of the medians


def test_memory_errors_compare_saved_bytes_on_cpu_and_the_allocators_peak_on_cuda():
    acc = [{"saved_for_backward": 100, "peak_bytes": 1000}, {"saved_for_backward": 50, "peak_bytes": 600}]
    cpu = [{"saved_for_backward": 100, "peak_bytes": 700, "method": "cpu: saved_tensors_hooks peak"},
           {"saved_for_backward": 40, "peak_bytes": 300, "method": "cpu: saved_tensors_hooks peak"}]
    saved, peak = validate.memory_errors(acc, cpu)
    assert saved == pytest.approx(0.25) and math.isnan(peak)       # a CPU peak is itself an accounting
    cuda = [{"saved_for_backward": 0, "peak_bytes": 800, "method": "cuda.max_memory_allocated"},
            {"saved_for_backward": 0, "peak_bytes": 600, "method": "cuda.max_memory_allocated"}]
    saved, peak = validate.memory_errors(acc, cuda)
    assert math.isnan(saved) and peak == pytest.approx(0.25)


def test_validation_of_gpu_records_reports_the_peak_instead_of_saved_bytes(tmp_path):
    """GPU runs meter no saved tensors (the allocator measures the peak): the table compares peaks."""
    records = [r for r in json.loads(open(ROOT / "results/pipeline/resnet18w16_chunked2_cpu2.json").read())
               if r["micro_batch"] == 8 and r["schedule"] in ("local", "1f1b")]
    for r in records:
        r["memory_per_stage"] = [dict(m, saved_for_backward=0, method="cuda.max_memory_allocated")
                                 for m in r["memory_per_stage"]]
    df = validate.against(records, reps=1)
    assert df.saved_bytes_max_rel_error.isna().all() and (df.peak_bytes_max_rel_error >= 0).all()
    text = validate.write(df, tmp_path / "gpu.md", "note")[0].read_text()
    assert "peak_bytes_max_rel_error" in text and "peak bytes against the allocator's" in text
    assert "saved-for-backward bytes:" not in text


def test_a_link_whose_bytes_are_lost_in_the_noise_is_taken_as_free(monkeypatch):
    """On a busy VM the wake-up latency can swamp the time of the bytes: the bandwidth is then
    reported as unmeasurable (inf, with a warning) instead of a nonsense number."""
    from paper_repro.simulate import linkcal

    def fake_processes(fn, args, nprocs, start_method):       # 4 B: 5 ms, 1 MiB: 4 ms (noise)
        for rank in range(nprocs):
            with open(f"{args[4]}.{rank}", "w") as f:
                f.write("0.005 0.004")
    monkeypatch.setattr(linkcal.mp, "start_processes", fake_processes)
    with pytest.warns(UserWarning, match="took no longer"):
        link = linkcal.measure_link(small=4, large=1 << 20, reps=3)
    assert link.bandwidth == float("inf") and link.latency == pytest.approx(0.0045)


def test_runs_that_prefetched_their_inputs_are_simulated_without_drawing_them(monkeypatch):
    """A run whose first stage drew its inputs ahead in a thread is simulated without the input's
    cost; one that drew them in line pays it (here made to dominate: 0.5 s per micro-batch, far above
    a micro-batch's compute on any machine, loaded or not)."""
    records = [r for r in json.loads(open(ROOT / "results/pipeline/resnet18w16_chunked2_cpu2.json").read())
               if r["micro_batch"] == 8 and r["schedule"] in ("local", "1f1b")]
    real, measured = validate.measure, {}

    def measure_once(cfg, reps=3):  # both simulations on the same calibration
        if "costs" not in measured:
            measured["costs"] = dataclasses.replace(real(cfg, reps=reps), data=0.5)
        return measured["costs"]

    monkeypatch.setattr(validate, "measure", measure_once)
    drawn = validate.against(records, reps=1).set_index("schedule")
    ahead = validate.against([dict(r, input_prefetch=True) for r in records], reps=1).set_index("schedule")
    for schedule in ("local", "1f1b"):
        assert ahead.simulated_samples_per_s[schedule] > 3 * drawn.simulated_samples_per_s[schedule]
        # micro-batches of 8 drawn in line at 0.5 s each bound the in-line runs
        assert drawn.simulated_samples_per_s[schedule] <= 8 / 0.5
