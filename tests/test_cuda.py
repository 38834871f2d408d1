"""What only a GPU can check: training on cuda, a one-GPU pipeline stage, the CUDA-event
stopwatch (the memory accounting against ``torch.cuda.max_memory_allocated``:
tests/research/test_memcheck_cuda.py).

Every test here carries the ``cuda`` marker (``pytest -m cuda`` runs them alone, as
tools/gpu_session.sh does first) and is skipped on a machine without a CUDA device."""
import math

import pytest
import torch

from paper_repro import train
from paper_repro.distributed import PipelineConfig
from paper_repro.distributed.bench import run_pipeline
from paper_repro.distributed.stopwatch import Stopwatch

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def cfg(**kw):
    base = dict(model="mlp", method="greedy", dataset="digits", steps=120, batch_size=32, lr=1e-3, eval_every=40,
                progress=False, model_kwargs=dict(depth=3, width=32), device="cuda")
    return train.TrainConfig(**{**base, **kw})


@pytest.mark.parametrize("method", ["backprop", "greedy", "chunked-2"])
def test_training_on_cuda_records_every_step_and_learns(method):
    # 120 steps: the losses are read in blocks (at the evaluations and every LOSS_READ_EVERY steps)
    result = train.train(cfg(method=method))
    rec = result.records
    assert result.status == "finished" and rec["step"].tolist() == list(range(1, 121))
    assert rec["final_loss"].map(math.isfinite).all() and rec["eval_acc"].notna().sum() == 3
    assert rec["final_loss"].tail(20).mean() < rec["final_loss"].head(5).mean()
    assert next(result.learner.parameters()).device.type == "cuda"


def test_a_diverging_run_on_cuda_ends_at_its_first_non_finite_loss():
    result = train.train(cfg(method="backprop", optimizer="sgd", lr=1e9, eval_every=0))
    rec = result.records
    assert result.status == "diverged" and len(rec) < 120
    assert not math.isfinite(rec["final_loss"].iloc[-1]) and rec["final_loss"].iloc[:-1].map(math.isfinite).all()


def test_a_one_gpu_local_pipeline_trains_and_reports_the_allocator_peak():
    record, = run_pipeline(PipelineConfig(schedule="local", stages=1, device="cuda", model="mlp",
                                          model_kwargs={"depth": 4, "width": 64}, image_size=8, micro_batch=8,
                                          micro_batches=4, steps=3, warmup_steps=1), timeout=240, progress=False)
    assert record["device"] == "cuda" and record["samples_per_s"] > 0
    assert record["memory_method"] == "cuda.max_memory_allocated" and record["peak_mem_bytes_per_stage"][0] > 0


def test_the_stopwatch_times_the_stream_with_cuda_events():
    device = torch.device("cuda", 0)
    watch = Stopwatch(device)
    assert watch.on_stream
    a = torch.randn(1024, 1024, device=device)
    with watch.phase("matmul"):
        for _ in range(20):
            a = a @ a / 1024
    times = watch.read()
    assert list(times) == ["matmul"] and 0 < times["matmul"] < 60 and watch.read() == {}


def test_training_on_gpu_processes_equals_one_process_on_the_gpu(tmp_path):
    """``train_stages`` on cuda (nccl, one process per GPU; one process on a one-GPU machine):
    the local schedule's records are single-process training's at the micro-batch size, and the
    saved learner reloads with the accuracy the run reported."""
    import pandas as pd

    from paper_repro import checkpoint
    from paper_repro import data as data_mod
    from paper_repro.distributed.fields import TrainingFields
    from paper_repro.distributed.trainer import train_stages
    n = min(2, torch.cuda.device_count())
    net = dict(depth=4, width=32)
    run = train_stages(PipelineConfig(model="mlp", model_kwargs=net, dataset="digits", stages=n, schedule="local",
                                      method="greedy", cut="blocks", micro_batch=16, micro_batches=4, steps=10,
                                      lr=1e-3, device="cuda"),
                       TrainingFields(eval_every=20, eval_every_examples=320, save=str(tmp_path / "m.pt")),
                       progress=False)
    ref = train.train(cfg(method="greedy", batch_size=16, steps=40, eval_every=20, eval_every_examples=320,
                          model_kwargs=net))
    assert run.status == "finished" and len(run.records) == 40
    pd.testing.assert_frame_equal(run.records.drop(columns="wall_time"), ref.records.drop(columns="wall_time"),
                                  check_exact=False, rtol=1e-4, atol=1e-5)
    learner = checkpoint.load_learner(tmp_path / "m.pt", data_mod.load("digits"), device="cuda")
    loss, acc = train.evaluate(learner.net, data_mod.load("digits").to("cuda"), "test", 2000, "cuda")
    assert acc == pytest.approx(run.summary()["eval_acc"], abs=1e-6)

