"""A run stopped mid-way resumes from its checkpoint with the records of an uninterrupted run."""
import pandas as pd
import pytest
import torch

from paper_repro import checkpoint, sweep, train
from paper_repro.sweep import runner


def cfg(**kw):
    base = dict(model="mlp", dataset="digits", steps=40, batch_size=32, lr=3e-3, progress=False,
                model_kwargs=dict(depth=3, width=32, layer_norm=True), eval_every=15, eval_every_examples=160,
                train_eval_examples=200)
    base.update(kw)
    return train.TrainConfig(**base)


def _stop_at(step):
    def callback(s, *_):
        if s == step:
            raise KeyboardInterrupt
    return callback


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.drop(columns="wall_time").reset_index(drop=True),
                                  b.drop(columns="wall_time").reset_index(drop=True), check_exact=True)


@pytest.mark.parametrize("method", ["backprop", "greedy", "chunked-2"])
def test_a_run_stopped_and_resumed_has_the_records_of_an_uninterrupted_run(method, tmp_path):
    whole = train.train(cfg(method=method)).records
    path = tmp_path / "run.pt"
    with pytest.raises(train.TrainInterrupted) as stopped:
        train.train(cfg(method=method), callback=_stop_at(23), checkpoint=path, checkpoint_every_s=0)
    assert len(stopped.value.result.records) == 22 and path.is_file()
    assert checkpoint.load(path, cfg(method=method).to_dict())["step"] == 22
    resumed = train.train(cfg(method=method), checkpoint=path, checkpoint_every_s=0)
    assert resumed.status == "finished"
    _same(resumed.records, whole)
    assert resumed.records.wall_time.is_monotonic_increasing
    # the parameters too, bit for bit
    again = train.train(cfg(method=method))
    for a, b in zip(resumed.learner.state_dict().values(), again.learner.state_dict().values()):
        assert torch.equal(a, b)


def test_the_stop_rule_carries_over_a_resume(tmp_path):
    """A run stopped after reaching stop_loss, inside its overshoot, stops where it would have."""
    kw = dict(method="backprop", steps=80)
    full = train.train(cfg(**kw)).records
    target = float(full.dropna(subset=["train_eval_loss"]).train_eval_loss.iloc[2])
    whole = train.train(cfg(**kw, stop_loss=target, stop_overshoot=0.5)).records
    first = int(full.loc[full.train_eval_loss <= target, "step"].iloc[0])
    assert first + 1 < len(whole) < 80
    path = tmp_path / "run.pt"
    with pytest.raises(train.TrainInterrupted):
        train.train(cfg(**kw, stop_loss=target, stop_overshoot=0.5), callback=_stop_at(first + 2), checkpoint=path,
                    checkpoint_every_s=0)
    _same(train.train(cfg(**kw, stop_loss=target, stop_overshoot=0.5), checkpoint=path).records, whole)


def test_saves_come_at_most_every_checkpoint_every_s(tmp_path, monkeypatch):
    saved = []
    monkeypatch.setattr(checkpoint, "save", lambda path, config, **kw: saved.append(kw["step"]))
    train.train(cfg(method="greedy", steps=10), checkpoint=tmp_path / "x.pt", checkpoint_every_s=3600)
    assert saved == []
    train.train(cfg(method="greedy", steps=10), checkpoint=tmp_path / "x.pt", checkpoint_every_s=0)
    assert saved == list(range(1, 10))  # every finished step but the last (the result is kept instead)


def test_a_checkpoint_of_another_run_or_a_broken_file_is_refused_by_name(tmp_path):
    path = tmp_path / "run.pt"
    with pytest.raises(train.TrainInterrupted):
        train.train(cfg(method="greedy"), callback=_stop_at(5), checkpoint=path, checkpoint_every_s=0)
    with pytest.raises(ValueError, match=r"another run \(it differs in \['lr'\]\)"):
        train.train(cfg(method="greedy", lr=1e-2), checkpoint=path)
    assert checkpoint.load(path, dict(cfg(method="greedy").to_dict(), progress=True))  # display options don't count
    path.write_text("not a checkpoint")
    with pytest.raises(ValueError, match="cannot read the checkpoint"):
        train.train(cfg(method="greedy"), checkpoint=path)
    checkpoint.remove(path)
    assert not tmp_path.exists()  # the emptied folder goes too
    assert checkpoint.load(path, {}) is None


def test_a_sweep_point_resumes_from_its_checkpoint_and_removes_it(tmp_path, monkeypatch):
    grid = sweep.Grid(name="ckpt", model="mlp", dataset="digits", model_kwargs=dict(depth=3, width=32),
                      methods=["greedy"], batch_sizes=[32], lrs=[3e-3], seeds=[0], steps=30,
                      eval_every_examples=160, train_eval_examples=200)
    point = grid.points()[0]
    whole = tmp_path / "whole"
    sweep.run_sweep(grid, whole)
    # the same point stopped at step 12 with a checkpoint every step, then rerun by the sweep
    root = sweep.store.open_store(tmp_path / "stopped", grid)
    monkeypatch.setattr(runner, "CHECKPOINT_EVERY_S", 0.0)
    real_train = train.train
    monkeypatch.setattr(train, "train", lambda *a, **kw: real_train(*a, **kw, callback=_stop_at(12)))
    with pytest.raises(train.TrainInterrupted):
        runner.run_point(point, str(root))
    assert sweep.store.partial_path(root, point["point_id"]).is_file()
    assert not sweep.store.finished_ids(root)
    monkeypatch.setattr(train, "train", real_train)
    sweep.run_sweep(grid, root)
    assert not (root / "partial").exists()
    a, b = sweep.load_results(whole), sweep.load_results(root)
    _same(b, a)
