"""Real multi-process runs on CPU (gloo): the local-parallel pipeline computes exactly what the
single-process learner computes; the baselines compute backprop; the bytes counted where the
messages are sent are the bytes the boundary tensors' shapes predict.

Process start-up dominates the time, so all runs with the same number of processes share one
launch (module-scoped fixtures).
"""

import pytest
import torch

from paper_repro.distributed.bench import run_pipeline
from paper_repro.build import make_optimizer
from paper_repro.distributed import PipelineConfig, build_learner, data_spec, micro_batches

SMALL = dict(micro_batch=4, micro_batches=3, steps=1, warmup_steps=1, timeout=60.0)
MODELS = {
    "mlp": dict(model="mlp", model_kwargs={"depth": 5, "width": 32}, image_size=6),
    "resnet": dict(model="resnet18", model_kwargs={"width": 4}, image_size=8),   # BatchNorm buffers too
    "transformer": dict(model="transformer", model_kwargs={"d_model": 16, "n_layers": 3, "n_heads": 2},
                        num_classes=32, seq_len=8),
}
# (model, method, optimizer steps every N micro-batches)
LOCAL_RUNS = {2: [("mlp", "greedy", 1), ("resnet", "chunked-2", 1), ("transformer", "greedy", 1),
                  ("resnet", "chunked-2", 3)],
              3: [("mlp", "greedy", 1), ("resnet", "chunked-3", 1)]}
# greedy MLP cut where chunked-S cuts it (explicit split), so it moves the baselines' tensors
GREEDY_SPLIT = {2: [3], 3: [2, 4]}
BASELINES = ("gpipe", "1f1b", "1f1b-recompute", "interleaved-1f1b", "interleaved-1f1b-recompute", "interleaved-zb",
             "interleaved-zb-recompute", "zbv", "zbv-recompute", "dualpipev", "dualpipev-recompute", "ddp")
# local/M in float64: Adam, one step per step of 4 micro-batches
LOCAL_M = dict(schedule="local", stages=2, method="chunked-2", dtype="float64", update_every=4,
               **MODELS["mlp"], **{**SMALL, "micro_batches": 4, "steps": 2})


def _configs(stages, tmp):
    local = [PipelineConfig(schedule="local", stages=stages, method=method, save_params=str(tmp / f"local{i}"),
                            cut_at=GREEDY_SPLIT[stages] if model == "mlp" else None, update_every=every,
                            **MODELS[model], **SMALL)
             for i, (model, method, every) in enumerate(LOCAL_RUNS[stages])]
    # the baselines: same stage cut as chunked-S, SGD so that "equals backprop" can be checked closely
    base = [PipelineConfig(schedule=s, stages=stages, optimizer="sgd", lr=0.1, save_params=str(tmp / s), cut="blocks",
                           **MODELS["mlp"], **{**SMALL, "micro_batches": 4}) for s in BASELINES]
    local_m = [PipelineConfig(save_params=str(tmp / "local_m"), **LOCAL_M)]
    return local + (base + local_m if stages == 2 else base[:1])


@pytest.fixture(scope="module", params=[2, 3], ids=["2-processes", "3-processes"])
def launched(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"pipeline{request.param}")
    configs = _configs(request.param, tmp)
    records = run_pipeline(configs, timeout=240, progress=False)
    return request.param, tmp, configs, records


def _single_thread(fn):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the stages run with one thread each: same kernels, same sums
    try:
        return fn()
    finally:
        torch.set_num_threads(threads)


def local_reference(cfg: PipelineConfig):
    """The single-process learner after the same micro-batches: one step per micro-batch, or per
    ``update_every`` micro-batches with their gradients averaged."""
    def run():
        _, spec = data_spec(cfg)
        learner = build_learner(cfg, spec)
        opt = make_optimizer(cfg, learner.parameters())
        batches = micro_batches(cfg, None, spec, cfg.seed)
        for i in range(cfg.total_micro_batches):
            x, y = next(batches)
            losses = learner.losses(x, y)
            if cfg.update_every == 1:
                sum(losses).backward()
            else:
                for loss in losses:
                    (loss * (1.0 / cfg.update_every)).backward()  # modules are independent graphs
            if (i + 1) % cfg.update_every == 0:
                opt.step()
                opt.zero_grad(set_to_none=True)
        return learner, spec
    return _single_thread(run)


def backprop_reference(cfg: PipelineConfig, streams: int):
    """Plain backprop, one step per ``micro_batches`` micro-batches (mean loss); the micro-batches
    come from stage 0's stream (pipelines) or one stream per process (DDP)."""
    def run():
        _, spec = data_spec(cfg)
        learner = build_learner(cfg, spec)
        net = learner.net
        opt = make_optimizer(cfg, net.parameters())
        its = [micro_batches(cfg, None, spec, cfg.seed + 1000 * r) for r in range(streams)]
        for _ in range(cfg.warmup_steps + cfg.steps):
            opt.zero_grad(set_to_none=True)
            for it in its:
                for _ in range(cfg.micro_batches // streams):
                    x, y = next(it)
                    (net.loss(net(x), y) / cfg.micro_batches).backward()
            opt.step()
        return learner
    return _single_thread(run)


def boundary_bytes(cfg, learner, spec, send_blocks, with_labels):
    """Bytes per sample of the tensors at the stage boundaries, from a forward pass here."""
    x, y = next(micro_batches(cfg, None, spec, cfg.seed))
    outs, h = [], x
    with torch.no_grad():
        for block in learner.net.blocks:
            h = block(h)
            outs.append(h)
    acts = sum(outs[b].numel() * outs[b].element_size() for b in send_blocks)
    labels = y.numel() * y.element_size() * len(send_blocks)
    return acts / cfg.micro_batch, (labels if with_labels else 0) / cfg.micro_batch


def _stage_states(path, stages):
    return [torch.load(path / f"stage{s}.pt") for s in range(stages)]


def test_local_pipeline_parameters_equal_single_process_learner(launched):
    stages, tmp, configs, records = launched
    for i, (model, method, every) in enumerate(LOCAL_RUNS[stages]):
        record, cfg = records[i], configs[i]
        name = "local/M" if every == cfg.micro_batches > 1 else "local"      # one step per step: local/M
        assert (record["schedule"], record["method"], record["update_every"]) == (name, method, every)
        learner, _ = local_reference(cfg)
        ref = learner.state_dict()
        seen = set()
        for s, saved in enumerate(_stage_states(tmp / f"local{i}", stages)):
            for name, value in saved["state"].items():
                assert torch.equal(value, ref[name]), f"{model}/{method} stage {s}: {name} differs"
                seen.add(name)
        assert seen == set(ref), f"{model}/{method}: not held by any stage: {sorted(set(ref) - seen)}"


def test_local_bytes_match_boundary_shapes(launched):
    stages, tmp, configs, records = launched
    for i in range(len(LOCAL_RUNS[stages])):
        record, cfg = records[i], configs[i]
        _, spec = data_spec(cfg)
        learner = build_learner(cfg, spec)
        send_blocks = _stage_states(tmp / f"local{i}", stages)[0]["plan"]["send_blocks"]
        acts, labels = boundary_bytes(cfg, learner, spec, send_blocks, with_labels=True)
        detail = record["comm_bytes_detail_per_sample"]
        assert detail["forward_activations"] == acts
        assert detail["forward_labels"] == labels
        assert record["comm_bytes_per_sample"] == {"forward": acts + labels, "backward": 0}
        assert record["comm_bytes_per_sample"]["forward"] == record["comm_bytes_predicted_per_sample"]["forward"]
        for a, b in zip(record["per_stage"][:-1], record["per_stage"][1:]):
            assert a["sent_bytes"] == b["received_bytes"]  # counted at both ends of every boundary
        assert all(m > 0 for m in record["peak_mem_bytes_per_stage"]) and record["samples_per_s"] > 0


def test_baselines_compute_backprop_and_send_gradients_back(launched):
    stages, tmp, configs, records = launched
    base = [(c, r) for c, r in zip(configs, records) if c.schedule != "local"]
    assert [c.schedule for c, _ in base] == list(BASELINES if stages == 2 else BASELINES[:1])
    if stages == 2:  # two stages per process: four stages cut from the 5 blocks, every block held once
        for cfg, record in base:
            if "zb" in cfg.schedule or "interleaved" in cfg.schedule or "dualpipev" in cfg.schedule:
                held = sorted(b for st in record["per_stage"] for blocks in st["stage_blocks"] for b in blocks)
                assert held == list(range(5)) and len(record["cut_at_blocks"]) == 3, cfg.schedule
    for cfg, record in base:
        assert record["schedule"] == cfg.schedule and record["samples_per_s"] > 0
        ref = backprop_reference(cfg, stages if cfg.schedule == "ddp" else 1).state_dict()
        for saved in _stage_states(tmp / cfg.schedule, stages):
            for name, value in saved["state"].items():
                if name.startswith("net."):
                    torch.testing.assert_close(value, ref[name], rtol=1e-5, atol=1e-6,
                                               msg=f"{cfg.schedule}: {name} is not backprop's")
        if cfg.schedule != "ddp":      # the timed compute, split into forwards and backwards
            for st in record["per_stage"]:
                split = st["compute_split_s"]
                assert split["forward"] > 0 and split["backward"] > 0, cfg.schedule
                assert split["forward"] + split["backward"] == pytest.approx(st["phases_s"]["forward_backward"])
        if cfg.schedule == "ddp":
            grads = sum(p.numel() * p.element_size() for p in build_learner(cfg).net.parameters())
            steps = cfg.warmup_steps + cfg.steps
            expected = steps * grads * 2 * (stages - 1) / (cfg.micro_batch * cfg.micro_batches * steps)
            assert record["comm_bytes_per_sample"] == {"forward": 0, "backward": expected}
            continue
        if record["cut_at_blocks"] is not None:  # the boundaries between processes of the four stages
            _, spec = data_spec(cfg)
            crossing = [b["after_block"] for b in record["boundaries"]]
            acts, _ = boundary_bytes(cfg, build_learner(cfg, spec), spec, crossing, with_labels=False)
            assert record["comm_bytes_per_sample"]["backward"] == acts > 0
            assert record["comm_bytes_detail_per_sample"]["forward_activations"] == acts
            assert record["comm_bytes_per_sample"] == {k: record["comm_bytes_predicted_per_sample"][k]
                                                       for k in ("forward", "backward")}
            continue
        _, spec = data_spec(cfg)
        send_blocks = _stage_states(tmp / cfg.schedule, stages)[0]["plan"]["send_blocks"]
        acts, _ = boundary_bytes(cfg, build_learner(cfg, spec), spec, send_blocks, with_labels=False)
        detail = record["comm_bytes_detail_per_sample"]
        assert detail["forward_activations"] == acts
        assert record["comm_bytes_per_sample"]["backward"] == acts  # one gradient per activation
        assert detail["forward_labels"] == 8  # int64 labels, once, stage 0 -> last stage


def test_local_sends_half_the_bytes_of_pipelined_backprop(launched):
    stages, _, configs, records = launched
    mlp_local = next(r for c, r in zip(configs, records) if c.schedule == "local" and c.model == "mlp")
    gpipe = next(r for c, r in zip(configs, records) if c.schedule == "gpipe")
    assert mlp_local["stage_plan"]["send_blocks"] == gpipe["stage_plan"]["send_blocks"]  # same cut
    local_acts = mlp_local["comm_bytes_detail_per_sample"]["forward_activations"]
    gpipe_acts = gpipe["comm_bytes_per_sample"]["forward"] - gpipe["comm_bytes_detail_per_sample"]["forward_labels"]
    assert local_acts / (gpipe_acts + gpipe["comm_bytes_per_sample"]["backward"]) == 0.5
    # with labels: local sends them over every boundary, pipelined backprop once to the last stage
    labels = 8 * (stages - 1)
    assert sum(mlp_local["comm_bytes_per_sample"].values()) == local_acts + labels


def concatenated_batch_reference(cfg: PipelineConfig, streams: int):
    """The single-process learner stepping once per ``update_every`` micro-batches on the
    concatenation of ``streams`` micro-batch streams (seeds ``seed + 1000 r``), every module's
    loss the mean over all of those samples -- computed without any gradient accumulation."""
    def run():
        _, spec = data_spec(cfg)
        learner = build_learner(cfg, spec)
        opt = make_optimizer(cfg, learner.parameters())
        its = [micro_batches(cfg, None, spec, cfg.seed + 1000 * r) for r in range(streams)]
        for _ in range(cfg.total_micro_batches // cfg.update_every):
            parts = [next(it) for _ in range(cfg.update_every) for it in its]
            x, y = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
            sum(learner.losses(x, y)).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return learner
    return _single_thread(run)


def test_local_m_equals_the_single_process_learner_on_the_whole_step(launched):
    """local/M: each stage accumulates the step's M micro-batches and steps once, which is the
    single-process learner taking one step on the step's M x micro_batch samples (float64, Adam)."""
    stages, tmp, configs, records = launched
    if stages != 2:
        pytest.skip("run with 2 processes")
    record = records[-1]
    assert (record["schedule"], record["update_every"], record["optimizer_steps_per_step"]) == ("local/M", 4, 1)
    assert record["optimizer"] == "adam" and record["dtype"] == "float64"
    ref = concatenated_batch_reference(PipelineConfig(**LOCAL_M), streams=1).state_dict()
    for s, saved in enumerate(_stage_states(tmp / "local_m", stages)):
        for name, value in saved["state"].items():
            torch.testing.assert_close(value, ref[name], rtol=1e-12, atol=1e-12,
                                       msg=f"local/M stage {s}: {name} differs from one step on the whole batch")


# --------------------------------------------------------------------- data parallel stages
DP_RUNS = [dict(schedule="local", update_every=1), dict(schedule="local", update_every=3),
           dict(schedule="1f1b", update_every=1, optimizer="sgd", lr=0.1)]


def test_two_stages_of_two_replicas_equal_the_single_process_learner_on_the_concatenated_batch(tmp_path):
    """4 processes: 2 stages x 2 replicas, each replica reading its own micro-batches; the replicas
    average their gradients, so every replica ends where the single-process learner ends after
    training on both replicas' micro-batches concatenated (float64)."""
    configs = [PipelineConfig(stages=2, dp=2, method="chunked-2", dtype="float64", save_params=str(tmp_path / f"dp{i}"),
                              **MODELS["mlp"], **{**SMALL, "micro_batches": 3, **run})
               for i, run in enumerate(DP_RUNS)]
    records = run_pipeline(configs, timeout=240, progress=False)
    for i, (cfg, record) in enumerate(zip(configs, records)):
        assert (record["dp"], record["processes"], len(record["per_stage"])) == (2, 4, 4)
        assert [(st["stage"], st["replica"]) for st in record["per_stage"]] == [(0, 0), (1, 0), (0, 1), (1, 1)]
        # every replica all-reduces its stage's gradients (the local pipeline's DDP counts them too)
        assert all(st["replica_allreduce_bytes"] > 0 for st in record["per_stage"])
        if cfg.schedule == "local":
            ref = concatenated_batch_reference(cfg, streams=2)
        else:
            ref = backprop_reference_concatenated(cfg)
        ref = ref.state_dict()
        for s in range(2):
            for name in (f"stage{s}.pt", f"stage{s}_replica1.pt"):
                saved = torch.load(tmp_path / f"dp{i}" / name)["state"]
                for key, value in saved.items():
                    if cfg.schedule != "local" and not key.startswith("net."):
                        continue
                    torch.testing.assert_close(value, ref[key], rtol=1e-10, atol=1e-12,
                                               msg=f"{cfg.schedule}/{cfg.update_every} {name}: {key} differs")


def backprop_reference_concatenated(cfg: PipelineConfig):
    """Backprop, one step per step on both replicas' micro-batches (mean loss over all samples)."""
    def run():
        _, spec = data_spec(cfg)
        learner = build_learner(cfg, spec)
        opt = make_optimizer(cfg, learner.net.parameters())
        its = [micro_batches(cfg, None, spec, cfg.seed + 1000 * r) for r in range(cfg.dp)]
        for _ in range(cfg.warmup_steps + cfg.steps):
            parts = [next(it) for _ in range(cfg.micro_batches) for it in its]
            x, y = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
            learner.net.loss(learner.net(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return learner
    return _single_thread(run)


def test_the_gpus_event_timing_runs_through_real_pipelines(monkeypatch):
    """The stages time their phases the GPU's way (events, read once per step) with host-clock
    stand-ins: every phase of the local pipeline and of 1F1B is read, and adds up within the window."""
    from paper_repro.distributed.stopwatch import CLOCK_ENV
    monkeypatch.setenv(CLOCK_ENV, "events")
    cfgs = [PipelineConfig(schedule=s, stages=2, cut="blocks", **MODELS["mlp"], **{**SMALL, "steps": 2})
            for s in ("local", "1f1b")]
    for r in run_pipeline(cfgs, progress=False):
        for st in r["per_stage"]:
            assert st["phase_clock"] == "host events (stand-in for CUDA events)"
            compute = sum(st["phases_s"][k] for k in ("data", "forward_backward", "optimizer"))
            assert st["phases_s"]["forward_backward"] > 0 and st["phases_s"]["optimizer"] > 0
            assert 0 < compute <= st["window_s"] and st["busy_fraction"] == pytest.approx(compute / st["window_s"])
        if r["schedule"] == "1f1b":
            for st in r["per_stage"]:
                assert sum(st["compute_split_s"].values()) == pytest.approx(st["phases_s"]["forward_backward"])


def test_prefetched_inputs_train_exactly_as_drawn_in_line(tmp_path):
    """Drawing stage 0's inputs ahead in a thread changes when they are drawn, not what they are:
    every stage ends with the same parameters, bit for bit, on the local pipeline and on 1F1B."""
    runs = [(s, p) for s in ("local", "1f1b") for p in ("off", "on")]
    cfgs = [PipelineConfig(schedule=s, stages=2, cut="flops", dtype="float64", prefetch=p,
                           save_params=str(tmp_path / f"{s}_{p}"), **MODELS["mlp"], **{**SMALL, "steps": 2})
            for s, p in runs]
    records = run_pipeline(cfgs, progress=False)
    assert [r["input_prefetch"] for r in records] == [False, True, False, True]
    for schedule in ("local", "1f1b"):
        for stage in ("stage0.pt", "stage1.pt"):
            off, on = (torch.load(tmp_path / f"{schedule}_{p}" / stage)["state"] for p in ("off", "on"))
            assert off.keys() == on.keys() and len(off) > 0
            for key in off:
                assert torch.equal(off[key], on[key]), f"{schedule} {stage} {key}"
