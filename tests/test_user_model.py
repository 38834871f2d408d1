"""A model written outside the package, named ``user_models:small_cnn``, in the multi-process
pipeline: the same parameters as the single-process learner after the same micro-batches
(2 CPU processes), and a clear error for every way the name can be wrong."""
import os
from pathlib import Path

import pytest
import torch

from paper_repro import cli, factory, methods, train
from paper_repro.blocknet import BlockNet
from paper_repro.distributed import PipelineConfig, build_learner, data_spec, micro_batches
from paper_repro.distributed.bench import run_pipeline
from paper_repro.build import make_optimizer
from user_models import small_cnn

TESTS_DIR = str(Path(__file__).resolve().parent)
SMALL = dict(micro_batch=4, micro_batches=3, steps=1, warmup_steps=1, timeout=60.0, image_size=6,
             dtype="float64")


@pytest.fixture
def user_path(monkeypatch):
    """The stage processes import ``user_models`` too: this folder on their PYTHONPATH."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [TESTS_DIR, os.environ.get("PYTHONPATH")])))


def reference(cfg: PipelineConfig):
    """The single-process learner after the pipeline's micro-batches, one step after each."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the stages run one thread each: same kernels, same sums
    try:
        _, spec = data_spec(cfg)
        learner = build_learner(cfg, spec)
        opt = make_optimizer(cfg, learner.parameters())
        batches = micro_batches(cfg, None, spec, cfg.seed)
        for _ in range(cfg.total_micro_batches):
            x, y = next(batches)
            sum(learner.losses(x, y)).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return learner.state_dict()
    finally:
        torch.set_num_threads(threads)


def test_a_user_model_in_two_processes_equals_the_single_process_learner(tmp_path, user_path):
    configs = [PipelineConfig(model="user_models:small_cnn", model_kwargs={"width": 4}, method="greedy",
                              stages=2, save_params=str(tmp_path / "cnn"), **SMALL),
               PipelineConfig(model="user_models:small_mlp_net", model_kwargs={"width": 8}, method="chunked-2",
                              stages=2, save_params=str(tmp_path / "mlp"), **SMALL)]
    records = run_pipeline(configs, timeout=240, progress=False)
    for cfg, record, folder in zip(configs, records, ("cnn", "mlp")):
        assert (record["model"], record["method"]) == (cfg.model, cfg.local_method)
        ref = reference(cfg)
        seen = set()
        for s in range(2):
            saved = torch.load(tmp_path / folder / f"stage{s}.pt")["state"]
            for name, value in saved.items():
                assert torch.equal(value, ref[name]), f"{cfg.model} stage {s}: {name} differs"
                seen.add(name)
        assert seen == set(ref), f"{cfg.model}: not held by any stage: {sorted(set(ref) - seen)}"


def test_the_factory_builds_the_same_net_in_every_process_and_wraps_a_sequential():
    cfg = PipelineConfig(model="user_models:small_cnn", model_kwargs={"width": 3}, stages=2, **SMALL)
    a, b = build_learner(cfg), build_learner(cfg)
    assert isinstance(a.net, BlockNet) and a.net.model == "user_models:small_cnn" and len(a.net.blocks) == 3
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(pa, pb), name
    x = torch.randn(5, 3, 6, 6, dtype=torch.float64)
    assert tuple(a(x).shape) == (5, 10)  # the default head: average pool + linear to num_classes


@pytest.mark.parametrize("model, kwargs, match", [
    ("no_such_module:f", {}, r"cannot import module 'no_such_module'.*PYTHONPATH"),
    ("user_models:missing", {}, r"has no function 'missing'"),
    ("user_models:", {}, r"package.module:function"),
    ("user_models:small_cnn", {"depth": 3}, r"does not take model_kwargs \{'depth': 3\}"),
])
def test_a_bad_factory_name_is_one_clear_error(model, kwargs, match):
    with pytest.raises(ValueError, match=match):
        PipelineConfig(model=model, model_kwargs=kwargs).validate()


def test_a_factory_returning_something_else_is_refused():
    with pytest.raises(ValueError, match=r"returned a int; it must return a BlockNet"):
        factory.build_from_factory("user_models:not_a_model", {}, 10, torch.zeros(2, 3, 6, 6))


def test_bench_pipeline_takes_a_user_model(capsys):
    rc = cli.main(["bench", "pipeline", "--comm-only", "--model", "user_models:small_cnn", "--model-kwargs",
                   '{"width": 4}', "--image-size", "8", "--stages", "2", "--method", "greedy"])
    assert rc == 0, capsys.readouterr().err
    assert cli.main(["bench", "pipeline", "--comm-only", "--model", "user_models:nothing"]) == 2
    assert "has no function 'nothing'" in capsys.readouterr().err


# ------------------------------------------------------------------- one process: records
def test_records_of_a_wrapped_sequential_name_it_and_a_contradicting_config_is_refused():
    ds = train.load_data(train.TrainConfig())
    x, _ = ds.batch("train", torch.arange(2))
    torch.manual_seed(0)
    learner = methods.build(small_cnn(width=4, in_channels=1), "chunked-2", num_classes=ds.num_classes, example=x)
    with pytest.raises(ValueError, match=r"config model='mlp' contradicts the learner given, whose model is "
                                         r"'sequential'; set model='sequential' or model=None"):
        train.train(train.TrainConfig(steps=2, method=None, progress=False), data=ds, learner=learner)
    result = train.train(train.TrainConfig(model=None, method=None, steps=3, eval_every=0, eval_examples=32,
                                           progress=False), data=ds, learner=learner)
    s = result.summary()
    assert (s["model"], s["method"], s["steps"]) == ("sequential", "chunked-2", 3)
    assert list(result.records.columns[:4]) == ["step", "examples", "loss_0", "loss_1"]
