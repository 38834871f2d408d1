"""Single-process parts of paper_repro.distributed: stage cut, memory meter, comm-only CLI, tables."""
import itertools
import json
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

from paper_repro import cli, methods, models
from paper_repro.data import InputSpec
from paper_repro.distributed import report
from paper_repro.distributed.memory import SavedTensorMeter, saved_bytes_of, state_bytes
from paper_repro.distributed.config import PipelineConfig
from paper_repro.distributed.cut import balanced_cut, boundary_info, plan_stages
from paper_repro.distributed.timing import predicted_comm
from paper_repro.distributed.inputs import data_spec
from paper_repro.distributed import planning, timing
from paper_repro.distributed.options import expand
from paper_repro.distributed.timing import module_times, time_cut


@pytest.mark.parametrize("costs,stages,expected", [
    ([1, 1, 1, 1], 2, [2]),
    ([5, 1, 1, 1, 1, 1], 2, [1]),
    ([1, 2, 3, 4, 5, 6], 3, [3, 5]),
    ([3, 3, 3], 3, [1, 2]),
])
def test_balanced_split_minimises_the_largest_stage(costs, stages, expected):
    assert balanced_cut(costs, stages) == expected


def _brute_force_best(costs, stages, send):
    """The smallest largest-stage cost over every contiguous cut (independent of the DP)."""
    n = len(costs)
    best = float("inf")
    for starts in itertools.combinations(range(1, n), stages - 1):
        bounds = [0, *starts, n]
        worst = max(sum(costs[bounds[s]:bounds[s + 1]]) + (send[bounds[s + 1] - 1] if s < stages - 1 else 0)
                    for s in range(stages))
        best = min(best, worst)
    return best


def _stage_costs(costs, starts, send):
    bounds = [0, *starts, len(costs)]
    return [sum(costs[bounds[s]:bounds[s + 1]]) + (send[bounds[s + 1] - 1] if s < len(bounds) - 2 else 0)
            for s in range(len(bounds) - 1)]


def test_balanced_split_with_send_costs_is_optimal_on_random_costs():
    gen = torch.Generator().manual_seed(0)
    for trial in range(60):
        n = int(torch.randint(2, 9, (1,), generator=gen))
        stages = int(torch.randint(1, n + 1, (1,), generator=gen))
        costs = torch.rand(n, generator=gen).tolist()
        send = (torch.rand(n, generator=gen) * (trial % 3)).tolist()
        starts = balanced_cut(costs, stages, send)
        assert len(starts) == stages - 1 and starts == sorted(set(starts))
        assert max(_stage_costs(costs, starts, send)) == pytest.approx(_brute_force_best(costs, stages, send))


def test_balanced_split_with_first_item_costs_is_optimal_on_random_costs():
    """A stage may also pay for its first item (negative: a discount); checked against every cut."""
    gen = torch.Generator().manual_seed(1)
    for trial in range(60):
        n = int(torch.randint(2, 9, (1,), generator=gen))
        stages = int(torch.randint(1, n + 1, (1,), generator=gen))
        costs = (torch.rand(n, generator=gen) + 0.5).tolist()
        first = (-0.5 * torch.rand(n, generator=gen)).tolist()
        starts = balanced_cut(costs, stages, first=first)

        def worst(cut):
            bounds = [0, *cut, n]
            return max(sum(costs[bounds[s]:bounds[s + 1]]) + first[bounds[s]] for s in range(len(bounds) - 1))
        assert len(starts) == stages - 1
        assert worst(starts) == pytest.approx(min(worst(list(c)) for c in itertools.combinations(range(1, n), stages - 1)))
    # a discount on the first item of a stage moves the cut onto the item that gains most
    assert balanced_cut([1, 1, 1, 1], 2, first=[0, 0, 0, 0]) == [2]
    assert balanced_cut([1, 1, 1, 1], 2, first=[0, -1.5, 0, 0]) == [1]  # [0] | [1..3] - 1.5 = 1.5 vs 2 | 2
    with pytest.raises(ValueError, match="first must have one cost per item"):
        balanced_cut([1, 1], 2, first=[0])


def test_send_costs_move_the_cut_away_from_an_expensive_boundary():
    # equal compute: without send costs the cut is in the middle; sending item 1's output is dear
    assert balanced_cut([1, 1, 1, 1], 2) == [2]
    assert balanced_cut([1, 1, 1, 1], 2, [0, 5, 0, 0]) == [1]  # stage 0 = [0] + send 0 = 1 vs [0,1] + 5
    with pytest.raises(ValueError, match="cannot cut 3 items into stages=4"):
        balanced_cut([1, 1, 1], 4)


def test_plan_sends_the_input_block_of_the_next_stage():
    learner = methods.build(models.mlp(depth=6, width=8, in_dim=4), "chunked-3")
    plan = plan_stages(learner, 3)
    assert plan.modules == [[0], [1], [2]] and plan.blocks == [[0, 1], [2, 3], [4, 5]]
    assert plan.send_blocks == [learner.input_block(1), learner.input_block(2)] == [1, 3]
    greedy = methods.build(models.mlp(depth=6, width=8, in_dim=4), "greedy")
    assert plan_stages(greedy, 2, cut_at=[4]).blocks == [[0, 1, 2, 3], [4, 5]]
    with pytest.raises(ValueError, match="shares block 3 between local module 2 .stage 0. and local module 3"):
        plan_stages(methods.build(models.mlp(depth=6, width=8, in_dim=4), "overlapping"), 2, cut_at=[3])


def test_saved_tensor_meter_counts_what_autograd_keeps_and_releases_it():
    lin = nn.Linear(10, 20)
    x = torch.randn(4, 10)
    meter = SavedTensorMeter(exclude=list(lin.parameters()))
    with meter:
        out = torch.relu(lin(x)).sum()
    # linear keeps its input (4x10), relu keeps its output (4x20); the weight is excluded
    assert meter.peak == meter.current == (4 * 10 + 4 * 20) * 4
    out.backward()
    assert meter.current == 0 and meter.peak == 480


def test_saved_bytes_of_leaves_batchnorm_statistics_alone():
    bn = nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4))
    before = {k: v.clone() for k, v in bn.state_dict().items()}
    x = torch.randn(2, 3, 6, 6)
    assert saved_bytes_of(bn, x, exclude=list(bn.parameters())) > 0
    assert all(torch.equal(before[k], v) for k, v in bn.state_dict().items())


def test_state_bytes_counts_params_grads_and_adam_state():
    lin = nn.Linear(3, 2)
    opt = torch.optim.Adam(lin.parameters())
    lin(torch.randn(1, 3)).sum().backward()
    opt.step()
    assert state_bytes(list(lin.parameters()), opt) == {"params": 32, "grads": 32, "optimizer": 64}


def test_comm_only_cli_writes_json(tmp_path, capsys):
    out = tmp_path / "comm.json"
    code = cli.main(["bench", "pipeline", "--model", "resnet18", "--model-kwargs", '{"width": 8}', "--image-size", "16",
                       "--stages", "3", "--micro-batch", "4", "--micro-batches", "12", "--schedule", "local,gpipe,ddp", "--comm-only",
                       "--json", str(out)])
    assert code == 0
    assert "local" in capsys.readouterr().out
    records = json.loads(out.read_text())
    assert [r["schedule"] for r in records] == ["local", "gpipe", "ddp"]
    local, gpipe, ddp = records
    for key in ("schedule", "stages", "micro_batch", "samples_per_s", "comm_bytes_per_sample",
                "peak_mem_bytes_per_stage"):
        assert key in local
    # independent count: the output of each send block of a fresh resnet18(width 8) on 16x16 inputs
    torch.manual_seed(0)
    net = models.resnet("resnet18", num_classes=10, small_input=True, width=8)
    h, outs = torch.zeros(1, 3, 16, 16), []
    with torch.no_grad():
        for block in net.eval().blocks:
            h = block(h)
            outs.append(h.numel() * 4)
    acts = sum(outs[b] for b in local["stage_plan"]["send_blocks"])
    assert local["comm_bytes_per_sample"] == {"forward": acts + 8 * 2, "backward": 0}
    assert gpipe["comm_bytes_per_sample"] == {"forward": acts + 8, "backward": acts}
    params = sum(p.numel() * 4 for p in net.parameters())
    assert ddp["comm_bytes_per_sample"]["backward"] == pytest.approx(2 * 2 * params / (4 * 12))
    assert local["comm_bytes_per_micro_batch"]["forward"] == local["comm_bytes_per_sample"]["forward"] * 4


def test_bad_cli_values_exit_2(capsys):
    assert cli.main(["bench", "pipeline", "--comm-only", "--dtype", "float32", "--stages", "0"]) == 2
    assert "stages must be a positive integer, got 0" in capsys.readouterr().err


def test_targets_compare_runs_side_by_side():
    def rec(schedule, sps, mem, comm, every=None):
        return {"schedule": schedule, "micro_batch": 8, "micro_batches": 16, "update_every": every,
                "samples_per_s": sps, "busy_fraction_per_stage": [0.95, 0.92],
                "peak_mem_bytes_per_stage": mem, "comm_bytes_per_sample": comm}
    rows = report.targets([rec("local", 130, [90, 80], {"forward": 10, "backward": 0}, 1),
                           rec("local", 150, [90, 80], {"forward": 10, "backward": 0}, 16),
                           rec("1f1b-recompute", 100, [100, 80], {"forward": 10, "backward": 10}),
                           rec("gpipe", 120, [300, 200], {"forward": 10, "backward": 10}),
                           rec("zbv", 110, [300, 200], {"forward": 10, "backward": 10}),
                           rec("zbv-recompute", 140, [300, 200], {"forward": 10, "backward": 10})])
    got = {r["target"]: (round(r["value"], 3), r["met"], r.get("peer")) for r in rows}
    assert got["throughput local / 1F1B+recompute"] == (1.3, True, "1f1b-recompute")
    # local against schedules without recomputation only; local/M against every one of them
    assert got["throughput local / best pipelined backprop without recomputation"] == (1.083, True, "gpipe")
    assert got["throughput local/M / 1F1B+recompute"] == (1.5, True, "1f1b-recompute")
    assert got["throughput local/M / best pipelined backprop"] == (1.071, False, "zbv-recompute")
    assert got["busy fraction of the least busy local/M stage"] == (0.92, True, None)
    assert got["comm bytes local / pipelined backprop"] == (0.5, True, None)
    assert got["peak memory local / 1F1B+recompute (worst stage)"] == (1.0, True, None)
    assert "MISSED" in report.format_targets(rows)
    assert [report.label(r) for r in (rec("local", 1, [], {}, 1), rec("local", 1, [], {}, 16),
                                      rec("local", 1, [], {}, 4))] == ["local", "local/M", "local/4"]


def test_predicted_comm_for_ddp_is_a_ring_allreduce():
    learner = methods.build(models.mlp(depth=4, width=8, in_dim=4), "chunked-2")
    spec = InputSpec.image(10, (1, 2, 2))
    infos = boundary_info(learner, spec)
    cfg = PipelineConfig(schedule="ddp", stages=2, micro_batch=2, micro_batches=4)
    plan = plan_stages(learner, 2)
    assert predicted_comm(cfg, plan, infos, spec, 1000) == {
        "forward": 0, "backward": 2 * 1 * 1000 / 8, "forward_activations": 0, "forward_labels": 0,
        "per_boundary": []}


def test_module_times_measure_every_module_and_leave_the_learner_alone():
    cfg = PipelineConfig(model="mlp", model_kwargs={"depth": 4, "width": 16}, image_size=4, stages=2,
                         method="greedy", micro_batch=4)
    _, spec = data_spec(cfg)
    learner = methods.build(models.mlp(depth=4, width=16, in_dim=48), "greedy")
    before = {k: v.clone() for k, v in learner.state_dict().items()}
    times = module_times(learner, spec, cfg, reps=1)
    assert len(times["compute"]) == len(times["send"]) == learner.num_modules
    assert all(t > 0 for t in times["compute"]) and all(t > 0 for t in times["send"][:-1])
    assert times["send"][-1] == 0.0  # the last module sends nothing
    assert all(torch.equal(before[k], v) for k, v in learner.state_dict().items())
    assert all(p.grad is None for p in learner.parameters())
    split = time_cut(learner, spec, cfg)
    assert len(split) == 1 and 1 <= split[0] <= 3
    with pytest.raises(ValueError, match="stages=5 is more than the 4 local modules"):
        time_cut(learner, spec, PipelineConfig(stages=5))


def test_local_slash_m_expands_to_one_step_per_step():
    common = dict(model="mlp", stages=2, micro_batches=8)
    configs = expand(common, ["local", "local/M", "zbv"], [4], update_every=[1, 2])
    assert [(c.schedule, c.update_every) for c in configs] == [("local", 1), ("local", 2), ("local", 8), ("zbv", 1)]
    with pytest.raises(ValueError, match="unknown schedule 'local/X'"):
        expand(common, ["local/X"], [4])


def test_the_default_cut_balances_measured_time(monkeypatch):
    """Without --cut-at the cut follows the measured module times (here hand-made ones that
    put the cut where FLOPs would not) and the record of the config says so."""
    cfg = PipelineConfig(model="mlp", model_kwargs={"depth": 4, "width": 16}, image_size=4, stages=2, method="greedy")
    assert cfg.cut == "time"
    made = {"compute": [1.0, 1.0, 1.0, 5.0], "send": [0.0, 0.0, 0.0, 0.0]}
    seen = []

    def fake_times(learner, spec, c, reps=3):
        seen.append(c)
        return made
    monkeypatch.setattr(timing, "module_times", fake_times)
    plan = planning.prepare(cfg).stages
    assert seen and plan.modules == [[0, 1, 2], [3]]
    flops = planning.prepare(PipelineConfig(**{**cfg.to_dict(), "cut": "flops"})).stages
    assert flops.modules != plan.modules and len(seen) == 1


def test_multi_stage_schedules_need_enough_micro_batches_and_blocks():
    with pytest.raises(ValueError, match="needs micro_batches >= 2 \\* stages = 4, got micro_batches=3"):
        PipelineConfig(model="mlp", schedule="zbv", stages=2, micro_batches=3).validate()
    with pytest.raises(ValueError, match="multiple of micro_batches // stages = 2, got micro_batches=5"):
        PipelineConfig(model="mlp", schedule="interleaved-1f1b", stages=2, micro_batches=5).validate()
    with pytest.raises(ValueError, match="dp=2 replicates pipeline stages"):
        PipelineConfig(model="mlp", schedule="ddp", stages=2, dp=2, micro_batches=4).validate()
    cfg = PipelineConfig(model="mlp", model_kwargs={"depth": 3, "width": 8}, image_size=4, schedule="zbv",
                         stages=2, micro_batches=4)
    with pytest.raises(ValueError, match="cannot cut the 3 blocks of model 'mlp' into 4 pipeline stages"):
        planning.prepare(cfg)


def test_the_default_local_method_is_one_chunk_per_stage_cut_by_measured_time(monkeypatch):
    """Without a method the local pipeline trains chunked@A: one chunk per stage, the chunks cut
    where the measured (here hand-made) block times balance; --cut blocks keeps chunked-S,
    --cut flops cuts the chunks by forward FLOPs."""
    cfg = PipelineConfig(model="mlp", model_kwargs={"depth": 4, "width": 16}, image_size=4, stages=2)
    made = {"compute": [1.0, 1.0, 1.0, 5.0], "head": [0.25] * 4, "send": [0.0] * 4, "input_grad": [0.0] * 4}
    monkeypatch.setattr(timing, "module_times", lambda learner, spec, c, reps=3: made)
    planned = planning.prepare(cfg)
    learner, plan = planned.learner, planned.stages
    # blocks cost 0.75 each but the last (5); a chunk ending at block i < 3 pays its head (0.25)
    assert planned.method == "chunked@3" and learner.module_blocks == [[0, 1, 2], [3]]
    assert cfg.method is None                        # the config is left as it was
    assert plan.modules == [[0], [1]] and plan.blocks == [[0, 1, 2], [3]] and planned.cut_at == [1]
    blocks = PipelineConfig(**{**cfg.to_dict(), "method": None, "cut": "blocks"})
    planned = planning.prepare(blocks)
    assert planned.learner.module_blocks == [[0, 1], [2, 3]] and planned.method == "chunked-2"
    flops = PipelineConfig(**{**cfg.to_dict(), "method": None, "cut": "flops"})
    assert planning.prepare(flops).method.startswith("chunked@")


def test_chunks_chosen_by_their_first_blocks():
    assert methods.module_blocks("chunked@3,5", 8) == [[0, 1, 2], [3, 4], [5, 6, 7]]
    assert methods.parse_spec("chunked@3") == ("chunked", 2)
    for bad, match in (("chunked@0,3", "increasing and at least 1"), ("chunked@3,3", "increasing"),
                       ("chunked@9", "starts at block 9, but the net has 8 blocks")):
        with pytest.raises(ValueError, match=match):
            methods.module_blocks(bad, 8)


def test_best_of_rounds_keeps_each_components_minimum_after_the_warm_up_round_in_turn():
    calls = []
    samples = {0: iter([(9.0, 9.0), (3.0, 5.0), (4.0, 1.0)]), 1: iter([(0.5, 0.5), (7.0, 2.0), (6.0, 8.0)])}

    def task(i):
        def measure():
            calls.append(i)
            return next(samples[i])
        return measure
    # the warm-up round (first values, here the smallest of task 1) is not kept
    assert timing.best_of_rounds([task(0), task(1)], reps=2) == [(3.0, 1.0), (6.0, 2.0)]
    assert calls == [0, 1, 0, 1, 0, 1]


def test_pipelined_backprop_is_cut_for_one_optimizer_step_per_step(monkeypatch):
    seen = []

    def fake_times(learner, spec, c, reps=5):
        seen.append(c.update_every)
        return {"compute": [1.0] * 4, "head": [0.0] * 4, "send": [0.0] * 4, "input_grad": [0.0] * 4}
    monkeypatch.setattr(timing, "module_times", fake_times)
    common = dict(model="mlp", model_kwargs={"depth": 4, "width": 8}, image_size=4, stages=2, micro_batches=8)
    for schedule, every in (("local", 1), ("local", 4), ("1f1b", 1), ("zbv", 1)):
        planning.prepare(PipelineConfig(schedule=schedule, update_every=every, cut="time", cut_at_blocks=[1, 2, 3],
                                   **common))
    assert seen == [1, 4, 8, 8]


def test_the_timed_window_leaves_out_warmup():
    from paper_repro.distributed import stopwatch
    window = stopwatch.Window(warm=1)
    window.mark()                                    # the warm-up iteration ends
    window.mark()
    stats = window.stats([5.0, 0.25])
    assert stats["busy_s"] == 0.25                   # the warm-up iteration's 5 s are left out
    assert stats["window_s"] > 0 and stats["busy_fraction"] == 0.25 / stats["window_s"]


def test_repeats_merge_into_medians_of_throughput_and_of_every_stages_phases():
    def rec(sps, fb0, fb1):
        return {"schedule": "1f1b", "micro_batch": 8, "samples_per_s": sps, "busy_fraction_per_stage": [0.9, 0.8],
                "per_stage": [{"stage": 0, "window_s": sps, "phases_s": {"data": 1.0, "forward_backward": fb0},
                               "compute_split_s": {"forward": fb0 / 3, "backward": 2 * fb0 / 3}},
                              {"stage": 1, "window_s": sps, "phases_s": {"data": 0.0, "forward_backward": fb1}}]}
    (merged,) = report.median_records([rec(100, 3.0, 5.0), rec(300, 1.0, 9.0), rec(200, 2.0, 7.0)])
    assert merged["samples_per_s"] == 200 and merged["samples_per_s_runs"] == [100, 300, 200]
    assert [st["phases_s"]["forward_backward"] for st in merged["per_stage"]] == [2.0, 7.0]
    assert merged["per_stage"][0]["compute_split_s"] == {"forward": 2 / 3, "backward": 4 / 3}
    assert "compute_split_s" not in merged["per_stage"][1]
    assert merged["phases_median_of"] == 3 and merged["per_stage"][0]["window_s"] == 100   # the rest: first repeat
    (plain,) = report.median_records([{k: v for k, v in rec(100, 3.0, 5.0).items() if k != "per_stage"}])
    assert "per_stage" not in plain and "phases_median_of" not in plain
    ddp = [dict(rec(sps, 1.0, 1.0), schedule="ddp", per_stage=[{"stage": 0, "window_s": sps}]) for sps in (5, 7, 6)]
    (untimed,) = report.median_records(ddp)        # DDP's stages time no phases
    assert untimed["samples_per_s"] == 6 and untimed["per_stage"] == [{"stage": 0, "window_s": 5}]


def test_cuda_stage_processes_take_their_own_gpu_and_name_a_missing_one(monkeypatch):
    from paper_repro.distributed import comm
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    chosen = []
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    assert comm.cuda_device(1) == torch.device("cuda", 1) and chosen == [1]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match="LOCAL_RANK 1 takes cuda:1, but this process sees 1 GPU.*'3'"):
        comm.cuda_device(1)


def test_our_messages_poll_their_completion_where_the_backends_wait_returns_at_once():
    """NCCL's wait returns before the message has gone through: with ``poll_timeout`` the host
    polls completion itself, so the sender's bound holds and a silent peer is named in time."""
    from paper_repro.distributed import messages

    class Work:
        def __init__(self, done_after: int):
            self.polls, self.done_after, self.waited = 0, done_after, False

        def is_completed(self):
            self.polls += 1
            return self.polls > self.done_after

        def wait(self):
            self.waited = True

    work = Work(done_after=3)
    messages._wait(work, "receiving activations from stage 0", poll_timeout=5.0)
    assert work.polls == 4 and work.waited
    never = Work(done_after=10**9)
    with pytest.raises(RuntimeError, match="receiving activations from stage 0 failed: not done after 0.05 s"):
        messages._wait(never, "receiving activations from stage 0", poll_timeout=0.05)
    gloo = Work(done_after=10**9)
    messages._wait(gloo, "sending to stage 1")           # no poll_timeout: the backend's wait blocks
    assert gloo.polls == 0 and gloo.waited
    from paper_repro.distributed.comm import Context
    ctx = lambda device: Context(0, 2, 0, torch.device(device), "", None, None, 42.0)  # noqa: E731
    assert ctx("cpu").poll_timeout is None and ctx("cuda").poll_timeout == 42.0


def test_a_missing_gpu_stops_the_other_stages_at_once(monkeypatch):
    """The stage that finds no GPU of its own records why before the others wait to meet it."""
    from paper_repro.distributed import comm
    reported = []
    monkeypatch.setattr(comm, "connect_store", lambda *a: SimpleNamespace(set_timeout=lambda t: None))
    monkeypatch.setattr(comm.dist, "PrefixStore", lambda prefix, store: store)
    monkeypatch.setattr(comm, "report_failure", lambda store, message: reported.append(message))

    def no_gpu(local_rank):
        raise ValueError(f"LOCAL_RANK {local_rank} takes cuda:{local_rank}, but this process sees 1 GPU(s)")
    monkeypatch.setattr(comm, "cuda_device", no_gpu)
    for k, v in dict(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", MASTER_PORT="29999").items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match="sees 1 GPU"):
        comm.init("cuda")
    assert reported == ["stage 1 failed: LOCAL_RANK 1 takes cuda:1, but this process sees 1 GPU(s)"]


def test_settling_waits_for_the_compute_stream_only(monkeypatch):
    """A stage waits for its own stream, never for the whole device: a receive pre-posted on
    NCCL's stream would otherwise hold every micro-batch until the previous stage sends the next."""
    from paper_repro.distributed import comm
    waited = []

    def whole_device(*a):
        raise AssertionError("torch.cuda.synchronize waits for NCCL's streams too")
    monkeypatch.setattr(torch.cuda, "synchronize", whole_device)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: SimpleNamespace(
        synchronize=lambda: waited.append(device)))
    comm.settle(torch.device("cpu"))
    assert waited == []
    comm.settle(torch.device("cuda", 1))
    assert waited == [torch.device("cuda", 1)]


def test_a_gpu_runs_cut_is_timed_on_its_first_gpu(monkeypatch):
    cpu = PipelineConfig(model="mlp", stages=2)
    assert timing.timing_device(cpu) == torch.device("cpu") and timing.clock(torch.device("cpu")) is timing.time.perf_counter
    import dataclasses
    assert timing.timing_device(dataclasses.replace(cpu, device="cuda")) == torch.device("cuda", 0)
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", synced.append)
    now = timing.clock(torch.device("cuda", 0))
    t0 = timing.time.perf_counter()
    assert now() >= t0 and synced == [torch.device("cuda", 0)]     # the queued work first, then the time


def test_stopwatch_times_the_host_on_cpu_and_the_stream_on_gpu():
    from paper_repro.distributed.stopwatch import Stopwatch
    watch = Stopwatch(torch.device("cpu"))
    with watch.phase("forward"):
        sum(range(10000))
    mark = watch.start()
    watch.stop("forward", mark)
    times = watch.read()
    assert list(times) == ["forward"] and times["forward"] > 0 and watch.read() == {}

    clock = itertools.count(start=0, step=5)          # each recorded event: 5 ms after the last

    class Event:
        def record(self):
            self.at = next(clock)

        def elapsed_time(self, later):                # milliseconds, as CUDA events give them
            return later.at - self.at

    watch = Stopwatch(torch.device("cuda", 0), event=Event)
    with watch.phase("forward"):                      # events at 0 and 5 ms
        pass
    mark = watch.start()                              # 10 ms
    with watch.phase("send"):                         # 15 and 20 ms
        pass
    watch.stop("forward", mark)                       # 25 ms: 15 ms more of forward
    assert watch.read() == {"forward": pytest.approx(0.020), "send": pytest.approx(0.005)}
    assert watch.read() == {}                         # read once, then from zero again


def test_a_cut_measured_apart_is_the_cut_measured_here():
    """GPU runs measure their cut in a short-lived process (the launcher keeps no CUDA context);
    the plan that comes back is the one this process makes."""
    from paper_repro.distributed.bench import measured_cut
    cfg = PipelineConfig(model="mlp", model_kwargs={"depth": 4, "width": 16}, image_size=4, stages=2,
                         cut="blocks", schedule="1f1b")
    here = measured_cut(cfg)
    assert here == measured_cut(cfg, apart=True) == (None, [1], None)      # two chunks of two blocks


def test_inputs_reach_a_gpu_through_pinned_memory_without_waiting(monkeypatch):
    from paper_repro.distributed import inputs
    x, y = torch.randn(2, 3), torch.tensor([0, 1])
    on_cpu = inputs.to_device((x, y), torch.device("cpu"))
    assert on_cpu[0] is x and on_cpu[1] is y                  # nothing copied on the CPU

    calls = []

    class Pinned:                                              # a stand-in: pinning needs a GPU driver
        def __init__(self, shape, dtype, pin_memory):
            calls.append(("pinned", tuple(shape), pin_memory))

        def copy_(self, source):
            calls.append(("filled from a slice", not source.is_contiguous()))
            return self

        def to(self, device, non_blocking=False):
            calls.append((str(device), non_blocking))
            return self
    monkeypatch.setattr(inputs.torch, "empty", Pinned)
    window = torch.arange(12).reshape(2, 6)
    inputs.to_device((window[:, :-1],), torch.device("cuda", 1))      # a text batch: a slice
    assert calls == [("pinned", (2, 5), True), ("filled from a slice", True), ("cuda:1", True)]


def test_a_peers_death_is_recognised_in_gloo_and_nccl_errors():
    from paper_repro.distributed.comm import peer_may_have_died
    for text in ("Connection closed by peer [127.0.0.1]:1234", "NCCL error: remote process exited or there was "
                 "a network error", "ncclRemoteError: A call failed possibly due to a network error"):
        assert peer_may_have_died(RuntimeError(text))
    assert not peer_may_have_died(RuntimeError("Timed out waiting 300000ms for recv operation to complete"))


def test_prefetched_items_come_in_order_and_errors_reach_the_reader():
    from paper_repro.distributed.inputs import prefetched
    assert list(prefetched(iter(range(50)), depth=3)) == list(range(50))

    def broken():
        yield 1
        raise OSError("disk gone")
    stream = prefetched(broken())
    assert next(stream) == 1
    with pytest.raises(OSError, match="disk gone"):
        next(stream)
    assert PipelineConfig(device="cuda").prefetches and not PipelineConfig().prefetches
    assert PipelineConfig(prefetch="on").prefetches and not PipelineConfig(device="cuda", prefetch="off").prefetches
    with pytest.raises(ValueError, match="unknown prefetch 'yes'; valid: auto, on, off"):
        PipelineConfig(prefetch="yes").validate()


def test_a_dropped_prefetch_ends_its_thread():
    import threading
    import time
    from paper_repro.distributed.inputs import prefetched

    def forever():
        i = 0
        while True:
            yield i
            i += 1
    stream = prefetched(forever())
    assert [next(stream) for _ in range(5)] == [0, 1, 2, 3, 4]
    stream.close()
    deadline = time.monotonic() + 5
    while any(t.name == "prefetch" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name == "prefetch" for t in threading.enumerate())


def test_synthetic_input_text_feeds_a_token_model_of_your_own(capsys):
    """``--input text``: the synthetic stream is token windows, so a user's byte LM plans and counts
    its bytes; without it the model gets images and is refused naming the input."""
    args = ["bench", "pipeline", "--model", "user_models:byte_lm", "--stages", "2", "--comm-only", "--seq-len", "8",
            "--num-classes", "256", "--micro-batch", "2", "--schedule", "local,1f1b"]
    assert cli.main([*args, "--input", "text"]) == 0
    assert "local" in capsys.readouterr().out
    cfg = PipelineConfig(model="user_models:byte_lm", input="text", seq_len=8, num_classes=256)
    assert data_spec(cfg) == (None, InputSpec(kind="text", num_classes=256, input_shape=(8,), seq_len=8))
    images = PipelineConfig(model="user_models:byte_lm", channels=3, image_size=5, num_classes=7)
    assert data_spec(images) == (None, InputSpec(kind="image", num_classes=7, input_shape=(3, 5, 5), seq_len=None))
    with pytest.raises(ValueError, match="unknown input 'audio'; valid: image, text"):
        PipelineConfig(model="mlp", input="audio").validate()


def test_the_former_names_of_the_cut_still_read_for_one_release(tmp_path):
    """``split``/``balance``/``block_split`` became ``cut_at``/``cut``/``cut_at_blocks``: the old
    field names read the new ones with a FutureWarning; records and checkpoint manifests of the
    earlier release are read under the new names; the renamed functions still resolve."""
    import paper_repro.distributed as distributed
    from paper_repro.distributed.training import read_manifest
    from paper_repro.report_table import cut_text, stage_plan
    cfg = PipelineConfig(cut="flops", cut_at=[2], cut_at_blocks=[1, 2, 3])
    for former, value in (("balance", "flops"), ("split", [2]), ("block_split", [1, 2, 3])):
        with pytest.warns(FutureWarning, match=f"the pipeline field '{former}' is now"):
            assert getattr(cfg, former) == value
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        cfg.nope
    earlier = {"split": {"blocks": [[0, 1], [2]]}, "balance": "time"}
    assert stage_plan(earlier) == {"blocks": [[0, 1], [2]]} and cut_text(earlier) == "0-1 2-2"
    assert stage_plan({"stage_plan": {"blocks": [[0]]}}) == {"blocks": [[0]]} and stage_plan({}) is None
    (tmp_path / "manifest.json").write_text(json.dumps({"world": 2, "config": {"split": [3], "balance": "time",
                                                                               "block_split": None, "lr": 0.1}}))
    assert read_manifest(tmp_path)["config"] == {"cut_at": [3], "cut": "time", "cut_at_blocks": None, "lr": 0.1}
    for former, current in (("balanced_split", balanced_cut), ("time_split", time_cut)):
        with pytest.warns(FutureWarning, match=f"paper_repro.distributed.{former} is now"):
            assert getattr(distributed, former) is current
