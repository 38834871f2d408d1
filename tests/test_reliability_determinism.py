"""Determinism: the same seed and config give bitwise-identical training on CPU.

Covers the single-process trainer (MLP, Transformer, ResNet; greedy and chunked) and a sweep
point (run twice into two stores, and against the trainer run directly). The local pipeline
against the single-process learner is tests/test_distributed.py::
test_local_pipeline_parameters_equal_single_process_learner (parameters compared with torch.equal).
"""
import pytest
import torch

from paper_repro import sweep, train

LOSS_COLUMNS = ["final_loss", "eval_loss", "eval_acc"]

TINY = {
    "mlp": dict(model="mlp", dataset="digits", model_kwargs=dict(depth=3, width=16)),
    "transformer": dict(model="transformer", dataset="text", data_kwargs=dict(seq_len=16),
                        model_kwargs=dict(d_model=16, n_layers=2, n_heads=2)),
    "resnet": dict(model="resnet18", dataset="digits", model_kwargs=dict(width=4)),
}


def _cfg(name, method, seed=0, **over):
    kw = dict(TINY[name], method=method, steps=4, batch_size=8, lr=3e-3, seed=seed, eval_every=2,
              eval_examples=32, progress=False)
    kw.update(over)
    return train.TrainConfig(**kw)


def _bits(records):
    """The exact bytes of every loss and metric of every step (wall_time is the one column allowed to differ)."""
    cols = [c for c in records.columns if c.startswith("loss_")] + LOSS_COLUMNS
    return records[["step", "examples"]].to_numpy().tobytes() + records[cols].to_numpy("float64").tobytes()


@pytest.fixture(scope="module")
def data():
    return {name: train.load_data(_cfg(name, "greedy")) for name in TINY}


@pytest.mark.parametrize("method", ["greedy", "chunked-2"])
@pytest.mark.parametrize("name", sorted(TINY))
def test_trainer_is_bitwise_reproducible(name, method, data):
    a = train.train(_cfg(name, method), data=data[name])
    b = train.train(_cfg(name, method))  # data loaded afresh: loading is deterministic too
    assert a.status == b.status == "finished"
    assert len(a.records) == 4 and a.records["eval_loss"].notna().sum() == 2
    assert _bits(a.records) == _bits(b.records)
    sa, sb = a.learner.state_dict(), b.learner.state_dict()
    assert list(sa) == list(sb)
    for key in sa:  # parameters, BatchNorm statistics and heads, bit for bit
        assert torch.equal(sa[key], sb[key]), key


def test_another_seed_gives_other_losses(data):
    """The check above is not vacuous: the seed does reach the initialisation and the batches."""
    a = train.train(_cfg("mlp", "greedy", seed=0), data=data["mlp"])
    b = train.train(_cfg("mlp", "greedy", seed=1), data=data["mlp"])
    assert not (a.records["final_loss"].to_numpy() == b.records["final_loss"].to_numpy()).any()


def _grid():
    return sweep.Grid(name="determinism", model="mlp", dataset="digits", model_kwargs=dict(depth=3, width=16),
                      methods=["greedy", "chunked-2"], batch_sizes=[8], lrs=[3e-3], steps=4, eval_every=2,
                      eval_examples=32)


def test_sweep_point_is_bitwise_reproducible_and_equals_the_trainer(tmp_path):
    frames = []
    for store in ("first", "second"):
        report = sweep.run_sweep(_grid(), tmp_path / store, progress=False, threads=1)
        assert len(report.finished) == 2 and not report.failed
        frames.append(sweep.load_results(tmp_path / store).sort_values(["point_id", "step"], ignore_index=True))
    a, b = (f.drop(columns="wall_time") for f in frames)
    assert list(a.columns) == list(b.columns) and a["point_id"].tolist() == b["point_id"].tolist()
    for col in a.columns:
        assert a[col].tolist() == b[col].tolist() or (
            a[col].dtype.kind == "f" and a[col].to_numpy().tobytes() == b[col].to_numpy().tobytes()), col
    # a point is the single-process trainer run with the point's config (the store keeps 6 digits)
    for point in _grid().points():
        direct = train.train(train.TrainConfig(**point["config"], progress=False)).records
        stored = a[a["point_id"] == point["point_id"]]
        assert stored["final_loss"].tolist() == [float(f"{v:.6g}") for v in direct["final_loss"]]


def test_no_notebook_output_is_compared_unless_deterministic():
    """nbval-lax compares only cells marked ``# NBVAL_CHECK_OUTPUT``. Timings, losses of
    threaded runs and progress bars vary between runs, so no cell may be marked unless it is
    listed here (with a test that its output is deterministic)."""
    import json
    from pathlib import Path

    deterministic = set()  # (notebook stem, cell index) of cells proven deterministic
    marked = set()
    for path in sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        marked |= {(path.stem, i) for i, c in enumerate(cells)
                   if c["cell_type"] == "code" and "NBVAL_CHECK_OUTPUT" in "".join(c["source"])}
    assert marked <= deterministic, f"cells marked NBVAL_CHECK_OUTPUT without a determinism test: {sorted(marked)}"
