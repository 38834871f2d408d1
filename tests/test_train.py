import math

import pandas as pd
import pytest
import torch

from paper_repro import cli, methods, train


def cfg(**kw):
    base = dict(model="mlp", method="greedy", dataset="digits", steps=30, batch_size=32, lr=1e-3,
                eval_every=10, progress=False, model_kwargs=dict(depth=3, width=32))
    base.update(kw)
    return train.TrainConfig(**base)


def test_records_columns_and_eval():
    result = train.train(cfg())
    rec = result.records
    assert result.status == "finished"
    assert list(rec["step"]) == list(range(1, 31))
    assert list(rec["examples"]) == [32 * s for s in range(1, 31)]
    for col in ["loss_0", "loss_1", "loss_2", "final_loss", "eval_loss", "eval_acc", "wall_time"]:
        assert col in rec
    assert (rec["final_loss"] == rec["loss_2"]).all()
    assert rec["eval_acc"].notna().sum() == 3
    assert rec["wall_time"].is_monotonic_increasing


def test_same_seed_gives_identical_losses_and_other_seed_differs():
    a, b = train.train(cfg(seed=3)), train.train(cfg(seed=3))
    pd.testing.assert_frame_equal(a.records.drop(columns="wall_time"), b.records.drop(columns="wall_time"))
    c = train.train(cfg(seed=4))
    assert not a.records["final_loss"].equals(c.records["final_loss"])


def test_divergence_is_recorded_not_raised():
    result = train.train(cfg(method="backprop", optimizer="sgd", lr=1e6, steps=200))
    assert result.status == "diverged"
    assert not math.isfinite(result.records["final_loss"].iloc[-1])
    assert len(result.records) < 200


def test_sgd_and_transformer_and_resnet_run():
    assert train.train(cfg(optimizer="sgd", lr=0.05, steps=5)).status == "finished"
    lm = train.train(cfg(model="transformer", dataset="text", method="chunked-2", steps=3, eval_every=0,
                         eval_examples=64, model_kwargs=dict(d_model=16, n_layers=2, n_heads=2),
                         data_kwargs=dict(seq_len=16)))
    assert lm.status == "finished" and lm.records["eval_loss"].notna().sum() == 1
    rn = train.train(cfg(model="resnet18", method="overlapping", steps=2, eval_every=0, eval_examples=64,
                         model_kwargs=dict(width=4)))
    assert rn.status == "finished" and len(rn.learner.heads) == 8


@pytest.mark.parametrize("kw, word", [(dict(steps=0), "steps"), (dict(batch_size=-1), "batch_size"),
                                      (dict(lr=0.0), "lr"), (dict(optimizer="adagrad"), "adagrad"),
                                      (dict(model="vgg"), "vgg"), (dict(dataset="mnist"), "mnist"),
                                      (dict(method="chunked-9"), "chunked-9"),
                                      (dict(model="transformer"), "text")])
def test_bad_config_raises_naming_value(kw, word):
    with pytest.raises(ValueError, match=word):
        train.train(cfg(**kw))


def test_digits_accuracy_targets():
    """The accuracy bar: a 4-block MLP on digits reaches >= 95% test accuracy with backprop and
    chunked-2, >= 90% with greedy and overlapping (400 steps of Adam, batch 64)."""
    accs = {}
    for method, bar in [("backprop", 0.95), ("chunked-2", 0.95), ("greedy", 0.90), ("overlapping", 0.90)]:
        r = train.train(cfg(method=method, steps=400, batch_size=64, eval_every=0, eval_examples=None,
                            model_kwargs=dict(depth=4, width=128)))
        accs[method] = r.summary()["eval_acc"]
        assert accs[method] >= bar, accs


def test_cli_train_writes_records(tmp_path, capsys):
    out = tmp_path / "rec.csv"
    rc = cli.main(["train", "--method", "chunked-2", "--steps", "5", "--eval-every", "5", "--no-progress",
                   "--model-kwargs", '{"depth": 2, "width": 16}', "--out", str(out)])
    assert rc == 0
    rec = pd.read_csv(out)
    assert len(rec) == 5 and set(rec["method"]) == {"chunked-2"}
    assert "final_loss" in capsys.readouterr().out


@pytest.mark.parametrize("argv, word", [(["train", "--method", "chunked-0"], "chunked-0"),
                                        (["train", "--steps", "0"], "steps"),
                                        (["train", "--model", "vgg"], "vgg"),
                                        (["train", "--lr", "-1"], "-1"),
                                        (["train", "--model-kwargs", "[1]"], "JSON")])
def test_cli_bad_input_exits_2(argv, word, capsys):
    with pytest.raises(SystemExit) as err:
        rc = cli.main(argv + ["--no-progress"])
        raise SystemExit(rc)
    assert err.value.code == 2
    assert word in capsys.readouterr().err


def test_train_eval_cadence_is_in_examples_for_every_batch_size():
    """Evaluations fall where the examples seen cross multiples of eval_every_examples, plus
    the last step; a batch larger than the cadence evaluates at every step."""
    for batch, expected in [(32, [4, 8, 12, 15]), (48, [3, 6, 8, 10]), (200, list(range(1, 6)))]:
        steps = {32: 15, 48: 10, 200: 5}[batch]
        rec = train.train(cfg(batch_size=batch, steps=steps, eval_every_examples=128,
                              train_eval_examples=100)).records
        assert list(rec.loc[rec["train_eval_loss"].notna(), "step"]) == expected, batch
        crossed = [s for s in range(1, steps + 1) if (s * batch) // 128 > ((s - 1) * batch) // 128]
        assert set(crossed) | {steps} == set(expected)


def test_train_eval_loss_is_the_heads_loss_on_a_fixed_training_subset():
    data = train.load_data(cfg())
    idx = train.train_eval_indices(data, 100)
    assert len(idx) == 100 and len(set(idx.tolist())) == 100 and bool((idx[1:] > idx[:-1]).all())
    assert torch.equal(idx, train.train_eval_indices(data, 100))  # the same subset every time
    assert len(train.train_eval_indices(data, None)) == data.num_examples("train")
    result = train.train(cfg(steps=7, eval_every_examples=10_000, train_eval_examples=100), data=data)
    rec = result.records
    assert rec["train_eval_loss"].notna().sum() == 1  # only the last step
    x, y = data.batch("train", idx)
    net = result.learner.net.eval()
    with torch.no_grad():
        direct = torch.nn.functional.cross_entropy(net(x), y).item()
    assert rec["train_eval_loss"].iloc[-1] == pytest.approx(direct, rel=1e-5)
    assert result.summary()["train_eval_loss"] == rec["train_eval_loss"].iloc[-1]
    off = train.train(cfg(steps=3), data=data).records  # eval_every_examples=0: never
    assert off["train_eval_loss"].isna().all()


def test_text_train_subset_uses_non_overlapping_windows():
    data = train.load_data(cfg(model="transformer", dataset="text", data_kwargs=dict(seq_len=16)))
    idx = train.train_eval_indices(data, 50)
    assert len(idx) == 50 and bool((idx % 16 == 0).all()) and int(idx.max()) < data.num_examples("train")


def test_stop_loss_stops_at_the_first_evaluation_reaching_it():
    full = train.train(cfg(method="backprop", steps=60, eval_every_examples=320, train_eval_examples=200)).records
    evals = full.dropna(subset=["train_eval_loss"])
    target = float(evals["train_eval_loss"].iloc[2])  # reached at the third evaluation (or earlier)
    first = int(evals.loc[evals["train_eval_loss"] <= target, "step"].iloc[0])
    assert first < 60
    stopped = train.train(cfg(method="backprop", steps=60, eval_every_examples=320, train_eval_examples=200,
                              stop_loss=target))
    assert stopped.status == "finished" and int(stopped.records["step"].iloc[-1]) == first
    pd.testing.assert_frame_equal(stopped.records.drop(columns="wall_time"),
                                  full.iloc[:first].drop(columns="wall_time"))
    never = train.train(cfg(steps=5, eval_every_examples=64, stop_loss=-1.0))
    assert never.status == "finished" and len(never.records) == 5
    # with an overshoot the run goes on to 1.5x the examples it had seen at `first`, the same run
    on = train.train(cfg(method="backprop", steps=60, eval_every_examples=320, train_eval_examples=200,
                         stop_loss=target, stop_overshoot=0.5)).records
    last = int(on["step"].iloc[-1])
    assert last == min(60, -(-first * 3 // 2)) and last > first
    pd.testing.assert_frame_equal(on.drop(columns="wall_time"), full.iloc[:last].drop(columns="wall_time"))


@pytest.mark.parametrize("kw, word", [(dict(eval_every_examples=-5), "eval_every_examples"),
                                      (dict(train_eval_examples=0), "train_eval_examples"),
                                      (dict(stop_loss=0.5), "eval_every_examples"),
                                      (dict(stop_loss="low", eval_every_examples=10), "low"),
                                      (dict(stop_overshoot=0.25), "needs stop_loss"),
                                      (dict(stop_overshoot=-1.0, stop_loss=1.0, eval_every_examples=10),
                                       "stop_overshoot")])
def test_bad_train_eval_options_raise(kw, word):
    with pytest.raises(ValueError, match=word):
        cfg(**kw).validate()


def test_a_wrapped_sequential_trains_and_the_records_name_it():
    seq = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 32), torch.nn.ReLU()),
                              torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU()))
    torch.manual_seed(0)
    learner = methods.build(seq, "greedy", num_classes=10)  # lazy heads: sized by the trainer's first check
    cfg = train.TrainConfig(model=None, method=None, steps=100, eval_every=0, eval_examples=None,
                            progress=False)
    result = train.train(cfg, learner=learner)
    assert result.summary()["model"] == "sequential" and result.summary()["method"] == "greedy"
    assert result.summary()["eval_acc"] > 0.6  # digits: 10 classes, chance 0.1


def test_losses_are_read_every_step_on_the_cpu_and_in_blocks_on_an_accelerator():
    assert train._loss_read_every("cpu") == 1
    assert train._loss_read_every("cuda") == train._loss_read_every(torch.device("cuda", 0)) == train.LOSS_READ_EVERY > 1


@pytest.mark.parametrize("kw", [
    dict(method="backprop", steps=40, eval_every=15),                                       # reads between evals
    dict(method="greedy", steps=60, eval_every=0, eval_every_examples=200, stop_loss=1.5,   # stops between reads
         stop_overshoot=0.5, optimizer="sgd", lr=0.05),
    dict(method="chunked-2", steps=40, optimizer="sgd", lr=1e9),                             # diverges at once
    dict(method="overlapping", steps=30, eval_every=9, optimizer="sgd", lr=1e3),             # diverges mid-block
], ids=["finished", "stop_loss", "diverged-early", "diverged-late"])
def test_reading_the_losses_in_blocks_gives_the_records_of_reading_every_step(kw, monkeypatch):
    every_step = train.train(cfg(**kw))
    monkeypatch.setattr(train, "_loss_read_every", lambda device: 5)  # what an accelerator does, every 5 steps
    in_blocks = train.train(cfg(**kw))
    assert in_blocks.status == every_step.status
    assert list(in_blocks.records.columns) == list(every_step.records.columns)
    pd.testing.assert_frame_equal(in_blocks.records.drop(columns="wall_time"),
                                  every_step.records.drop(columns="wall_time"), check_exact=True)
