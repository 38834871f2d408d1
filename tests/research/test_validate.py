"""The simulator against real runs (:mod:`research.simulator_validation.validate`): the comparison,
its command line, the stored runs simulated again, and the link measurement."""
import dataclasses
import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from paper_repro.distributed import PipelineConfig
from research.simulator_validation import linkcal, validate
from research.simulator_validation.linkcal import measure_link
from research.simulator_validation.validate import main

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(model="mlp", model_kwargs={"depth": 4, "width": 16}, image_size=4)


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
    args = ["--model", "mlp", "--model-kwargs", json.dumps(TINY["model_kwargs"]), "--image-size", "4",
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
    assert "Made with `python -m research.simulator_validation.validate --model mlp" in (tmp_path / "again.md").read_text()
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
