"""Shared config parts, the builder both the trainer and the pipeline use, and the optimizer
implementations (fused / foreach / default) against each other."""
import dataclasses

import pytest
import torch

from paper_repro import build, config, methods, models, train
from paper_repro.distributed import PipelineConfig
from paper_repro.distributed import build_learner as pipeline_learner

TRAIN_KEYS = {"model", "method", "dataset", "data_dir", "steps", "batch_size", "lr", "optimizer", "momentum",
              "weight_decay", "seed", "eval_every", "eval_examples", "device", "model_kwargs", "data_kwargs",
              "progress", "eval_every_examples", "train_eval_examples", "stop_loss", "stop_overshoot",
              "micro_batches", "threads"}


def test_configs_are_composed_from_the_shared_parts_with_flat_keys():
    for cls in (train.TrainConfig, PipelineConfig):
        assert issubclass(cls, (config.ModelParts, config.DataParts, config.OptimParts))
    assert set(train.TrainConfig().to_dict()) == TRAIN_KEYS
    pipe = PipelineConfig(model="resnet18", lr=0.5, dataset="digits", momentum=0.8).to_dict()
    assert pipe["lr"] == 0.5 and pipe["momentum"] == 0.8 and pipe["dataset"] == "digits"
    assert PipelineConfig().dataset == "synthetic" and train.TrainConfig().dataset == "digits"


@pytest.mark.parametrize("cls", [train.TrainConfig, PipelineConfig])
@pytest.mark.parametrize("kw, word", [(dict(optimizer="adagrad"), "adagrad"), (dict(lr=-1.0), "lr"),
                                      (dict(momentum=1.5), "momentum"), (dict(weight_decay=-0.1), "weight_decay"),
                                      (dict(model="vgg"), "vgg"), (dict(dataset="mnist"), "mnist"),
                                      (dict(data_kwargs={"colour": 1}), "colour"),
                                      (dict(model_kwargs={"depht": 3}), "depht")])
def test_shared_parts_are_checked_the_same_way_for_both_configs(cls, kw, word):
    with pytest.raises(ValueError, match=word):
        cls(**kw).validate()


def test_trainer_and_pipeline_build_the_same_learner_through_one_builder():
    kw = dict(model="mlp", model_kwargs=dict(depth=3, width=16), dataset="digits", seed=5)
    data = train.load_data(train.TrainConfig(**kw))
    a = train.build_learner(train.TrainConfig(method="chunked-3", **kw), data)
    b = pipeline_learner(PipelineConfig(stages=3, **kw), data)  # local method chunked-3
    c = build.build_learner(config.ModelParts("mlp", dict(depth=3, width=16)), data, "chunked-3", seed=5)
    assert a.spec == b.spec == c.spec == "chunked-3"
    for other in (b, c):
        for (name, p), (_, q) in zip(a.named_parameters(), other.named_parameters()):
            assert torch.equal(p, q), name
    with pytest.raises(ValueError, match="model is None"):
        build.build_model(config.ModelParts(None), data)


def _trajectory(opt_factory, steps=5):
    torch.manual_seed(0)
    net = models.mlp(depth=3, width=32, in_dim=20, num_classes=5)
    x, y = torch.randn(16, 20), torch.randint(5, (16,))
    opt = opt_factory(net.parameters())
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        net.loss(net(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in net.parameters()], opt


@pytest.mark.parametrize("name, reference", [
    ("adam", lambda params: torch.optim.Adam(params, lr=1e-2, weight_decay=1e-3, foreach=False)),
    ("sgd", lambda params: torch.optim.SGD(params, lr=5e-2, momentum=0.9, weight_decay=1e-3, foreach=False))])
def test_cheapest_optimizer_follows_the_default_trajectory(name, reference):
    cfg = config.OptimParts(optimizer=name, lr=1e-2 if name == "adam" else 5e-2, weight_decay=1e-3)
    got, opt = _trajectory(lambda params: build.make_optimizer(cfg, params))
    want, ref = _trajectory(reference)
    assert build.optimizer_impl(ref) == "default"
    impl = build.optimizer_impl(opt)
    assert impl in ("fused", "foreach")  # torch >= 2.4 has both for float32 on CPU
    assert opt.defaults[impl] is True
    moved = False
    for g, w, p0 in zip(got, want, _trajectory(reference, steps=0)[0]):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
        moved |= not torch.equal(w, p0)
    assert moved  # the comparison is between trained parameters, not the initial ones


def test_optimizer_falls_back_when_an_implementation_is_refused(monkeypatch):
    class PickyAdam(torch.optim.Adam):
        refuse = ("fused",)

        def __init__(self, params, **kw):
            for impl in self.refuse:
                if kw.get(impl):
                    raise RuntimeError(f"{impl}=True is not supported here")
            super().__init__(params, **kw)

    monkeypatch.setattr(torch.optim, "Adam", PickyAdam)
    p = [torch.nn.Parameter(torch.zeros(3))]
    assert build.optimizer_impl(build.make_optimizer(config.OptimParts(), p)) == "foreach"
    PickyAdam.refuse = ("fused", "foreach")
    assert build.optimizer_impl(build.make_optimizer(config.OptimParts(), p)) == "default"


def test_trainer_records_the_optimizer_implementation():
    result = train.train(train.TrainConfig(steps=2, eval_every=0, eval_examples=32, progress=False,
                                           model_kwargs=dict(depth=2, width=8)))
    assert result.summary()["optimizer_impl"] == result.optimizer_impl in build.OPTIMIZER_IMPLS


# ------------------------------------------------------------- train(cfg, learner=...)
def _small(**kw):
    base = dict(steps=2, eval_every=0, eval_examples=32, progress=False, model_kwargs=dict(depth=2, width=8))
    return train.TrainConfig(**{**base, **kw})


def test_records_name_the_learner_that_ran():
    data = train.load_data(_small())
    learner = methods.build(models.mlp(depth=2, width=8, in_dim=64), "greedy")
    result = train.train(_small(model=None, method=None), data=data, learner=learner)
    assert result.config.model == "mlp" and result.config.method == "greedy"
    s = result.summary()
    assert (s["model"], s["method"]) == ("mlp", "greedy")
    same = train.train(_small(model="mlp", method="greedy"), data=data,
                       learner=methods.build(models.mlp(depth=2, width=8, in_dim=64), "greedy"))
    assert same.summary()["method"] == "greedy"


@pytest.mark.parametrize("kw, words", [(dict(method="backprop", model=None), ["method='backprop'", "'greedy'"]),
                                       (dict(model="resnet18", method=None), ["model='resnet18'", "'mlp'"])])
def test_a_config_contradicting_the_learner_is_refused(kw, words):
    data = train.load_data(_small())
    learner = methods.build(models.mlp(depth=2, width=8, in_dim=64), "greedy")
    before = [p.detach().clone() for p in learner.parameters()]
    with pytest.raises(ValueError) as err:
        train.train(_small(**{**kw, "model_kwargs": {}}), data=data, learner=learner)
    for word in words:
        assert word in str(err.value)
    assert all(torch.equal(a, b) for a, b in zip(before, learner.parameters()))


def test_none_model_or_method_needs_a_learner():
    with pytest.raises(ValueError, match="method is None"):
        train.train(_small(method=None))
    with pytest.raises(ValueError, match="model is None"):
        train.train(_small(model=None, model_kwargs={}))


def test_replace_keeps_the_composed_config_intact():
    cfg = dataclasses.replace(_small(), lr=0.5, method="chunked-2")
    assert isinstance(cfg, train.TrainConfig) and cfg.lr == 0.5 and cfg.steps == 2
