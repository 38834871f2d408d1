"""The communication-by-size and stored-runs tables and figures of notebook 04."""
import json
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

from paper_repro import plots, settings  # noqa: E402
from paper_repro.distributed import bench, report  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results" / "pipeline"


def test_comm_by_size_counts_local_as_half_of_pipelined_backprop():
    cfg = dict(model="resnet18", model_kwargs={"width": 8}, image_size=16, num_classes=10, micro_batch=[1, 4],
               micro_batches=3)
    frame = report.comm_sizes_frame(bench.comm_by_size(cfg, [2, 3]))
    assert sorted(frame.processors.unique()) == [2, 3] and sorted(frame.micro_batch.unique()) == [1, 4]
    table = frame.pivot_table(index=["processors", "micro_batch"], columns="schedule", values="total_MB")
    # local sends activations (and labels) forward only; 1F1B sends activations forward and
    # their gradients back, and the labels once to the last stage
    assert ((table["local"] / table["1f1b"]).between(0.49, 0.51)).all()
    local = frame[frame.schedule == "local"].set_index(["processors", "micro_batch"]).total_MB
    assert local[(2, 4)] == pytest.approx(4 * local[(2, 1)])          # linear in the micro-batch size
    assert local[(3, 1)] > local[(2, 1)]                                # one more boundary
    assert (frame[frame.schedule == "local"].backward_MB == 0).all()
    fig = plots.pipeline.plot_comm_sizes(frame, "title")
    assert len(fig.axes) == 2


def test_runs_frame_gives_median_and_range_over_repeats():
    base = dict(model="mlp", model_kwargs={"depth": 2}, image_size=8, micro_batch=4, micro_batches=2,
                schedule="1f1b", busy_fraction_per_stage=[0.5, 0.5])
    repeats = [dict(base, samples_per_s=v) for v in (10.0, 30.0, 20.0)]
    frame = report.runs_frame({"a": repeats})
    row = frame.iloc[0]
    assert (row.samples_per_s, row.lo, row.hi, row.repeats) == (20.0, 10.0, 30.0, 3)


def test_stored_runs_exist_and_draw():
    stored = {name: [r for f in files for r in json.loads((RESULTS / f).read_text())]
              for name, files in settings.stored_pipeline_runs().items()}
    frame = report.runs_frame(stored)
    assert set(frame.model) == {"mlp", "resnet18"}
    assert (frame.lo <= frame.samples_per_s).all() and (frame.samples_per_s <= frame.hi).all()
    assert (frame.repeats == 3).all()
    # every run holds every schedule of both models
    assert frame.groupby("run").schedule.nunique().nunique() == 1
    fig = plots.pipeline.plot_schedule_runs(frame, "title")
    assert len(fig.axes) == 2
