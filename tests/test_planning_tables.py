"""estimate, simulate and bench pipeline as one report: every row prints its stage cut, bench's
medians print the spread of their repeats, the three name a quantity alike in their records, and
their tables hold the same rows in the same order. No stage process is started: bench's launcher
is replaced by one that returns records."""
import json
import re

import pytest
import torch
import torch.nn as nn

from paper_repro import estimate, names, report_table
from paper_repro.cli import main
from paper_repro.distributed import PipelineConfig, bench, report
from paper_repro.distributed.options import expand
from paper_repro.simulate import api
from research.simulator_validation.validate import record_job, record_schedule

ROWS = ["local", "local/M", "1f1b", "1f1b-recompute"]
SHUFFLED = ["1f1b-recompute", "local/M", "1f1b", "local"]
TINY = dict(model="mlp", model_kwargs={"depth": 4, "width": 8}, image_size=4, stages=2, micro_batches=16)
# the keys every tool's records share for the same quantities, and the former names kept one release
SHARED = ("schedule", "stages", "micro_batch", "micro_batches", "samples_per_s", "comm_bytes_per_sample",
          "peak_mem_bytes_per_stage", "busy_fraction_per_stage", "stage_plan", "cut")
FORMER = {"busy_per_stage": "busy_fraction_per_stage", "devices": "stages", "peak_memory_bytes":
          "peak_mem_bytes_per_stage"}


def table_rows(text: str) -> list[str]:
    """The schedule of every row of a printed table (continuation lines start with a space)."""
    body = text.split("\n\n")[0].splitlines()[2:]
    return [line.split()[0] for line in body if line and not line.startswith(" ")]


def row_line(text: str, schedule: str) -> str:
    return next(line for line in text.splitlines() if line.split() and line.split()[0] == schedule)


def four_blocks():
    return nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(4)])


@pytest.fixture(scope="module")
def est():
    torch.manual_seed(0)
    return estimate.pipeline_estimate(four_blocks, torch.randn(8, 8), torch.randint(4, (8,)), devices=2,
                                      num_classes=4, cut="blocks")


@pytest.fixture(scope="module")
def simulated():
    cfg = PipelineConfig(**TINY, micro_batch=8).validate()
    return api.run(cfg, SHUFFLED + ["interleaved-1f1b"], [8], block_costs=api.calibration(cfg, reps=1),
                   cut="blocks")


def fake_launch(configs, **_):
    """What the launcher returns, without processes: a record per config, samples/s growing with
    each repeat (10, 11, 12 for the first schedule's three)."""
    seen: dict[tuple, int] = {}
    out = []
    for cfg in configs:
        k = seen[cfg.schedule, cfg.update_every] = seen.get((cfg.schedule, cfg.update_every), -1) + 1
        local = cfg.schedule == "local"
        out.append(dict(schedule=cfg.schedule, update_every=cfg.update_every if local else None,
                        stages=cfg.stages, micro_batch=cfg.micro_batch, micro_batches=cfg.micro_batches,
                        samples_per_s=10.0 * (1 + SHUFFLED.index(report_table.label(
                            dict(schedule=cfg.schedule, update_every=cfg.update_every,
                                 micro_batches=cfg.micro_batches)))) + k,
                        busy_fraction_per_stage=[0.5, 0.6], peak_mem_bytes_per_stage=[2 ** 20, 2 ** 21],
                        comm_bytes_per_sample={"forward": 40.0, "backward": 0.0 if local else 32.0},
                        stage_plan={"modules": [[0], [1]], "blocks": [[0, 1], [2, 3]], "send_blocks": [1]},
                        cut=cfg.cut))
    return out


@pytest.fixture(scope="module")
def benched():
    configs = expand(dict(TINY, cut="blocks"), SHUFFLED, [8], repeats=3)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bench, "launch", fake_launch)
        return bench.run_pipeline(configs, progress=False)


# ------------------------------------------------------------------------------- rows
def test_the_three_tools_give_the_same_rows_in_the_same_order(est, simulated, benched, capsys, tmp_path):
    assert est["schedule"].tolist() == ROWS
    assert table_rows(str(est)) == ROWS
    assert [r["schedule"] for r in simulated] == ROWS + ["interleaved-1f1b"]
    assert table_rows(api.format_table(simulated)) == ROWS + ["interleaved-1f1b"]
    # the API keeps the runs' order (one record per config); the tables order their rows
    assert sorted(r["schedule"] for r in benched) == sorted(s for s in ROWS for _ in range(3))
    assert table_rows(report.format_table(benched)) == [s for s in ROWS for _ in range(3)]
    assert table_rows(report.format_table(report.median_records(benched))) == ROWS
    comm = bench.comm_only(expand(dict(TINY), SHUFFLED, [8]))
    assert [r["schedule"] for r in comm] == ROWS
    out = tmp_path / "sim.json"
    assert main(["simulate", "--stages", "2", "--micro-batches", "16", "--schedule", ",".join(SHUFFLED),
                 "--uniform-times", "1,2", "--json", str(out)]) == 0
    assert table_rows(capsys.readouterr().out) == ROWS
    assert [r["schedule"] for r in json.loads(out.read_text())] == ROWS


def test_local_M_predicts_what_local_does_on_the_ideal_machine(est):
    rows = est.set_index("schedule")
    for key in ("samples_per_s", "flops_per_sample", "comm_bytes_per_sample", "peak_mem_bytes_per_stage"):
        assert rows.loc["local/M", key] == rows.loc["local", key], key
    assert est.attrs["one_device"]["flops_per_sample"] / rows.loc["local", "flops_per_sample"] == pytest.approx(
        rows.loc["local", "speedup"])


def test_the_order_is_by_stages_micro_batch_then_schedule():
    records = [dict(schedule=s, stages=S, micro_batch=B, micro_batches=16, update_every=u)
               for S in (4, 2) for B in (16, 8) for s, u in (("ddp", None), ("local", 16), ("gpipe", None),
                                                             ("local", 4), ("local", 1))]
    keys = [(r["stages"], r["micro_batch"], report_table.label(r)) for r in report_table.ordered(records)]
    assert keys[:5] == [(2, 8, "local"), (2, 8, "local/4"), (2, 8, "local/M"), (2, 8, "gpipe"), (2, 8, "ddp")]
    assert [k[:2] for k in keys[::5]] == [(2, 8), (2, 16), (4, 8), (4, 16)]


# ------------------------------------------------------------------------------ names
def test_every_tool_names_each_quantity_alike(est, simulated, benched):
    tools = {"estimate": est.to_dict("records"), "simulate": simulated, "bench": benched,
             "bench --comm-only": bench.comm_only(expand(dict(TINY), ROWS, [8]))}
    for tool, records in tools.items():
        for r in records:
            assert set(SHARED) <= set(r), (tool, sorted(set(SHARED) - set(r)))
            for old, new in FORMER.items():          # a former name, where kept, holds the same value
                assert old not in r or r[old] == r[new], (tool, old)


def test_bench_records_local_M_as_its_own_schedule():
    records = [dict(schedule="local", update_every=16, micro_batches=16), dict(schedule="local", update_every=4,
                                                                             micro_batches=16),
               dict(schedule="local", update_every=1, micro_batches=1), dict(schedule="1f1b", micro_batches=16)]
    assert [r["schedule"] for r in report.named(records)] == ["local/M", "local", "local", "1f1b"]
    assert records[0]["update_every"] == 16
    [m] = bench.comm_only(expand(dict(TINY), ["local/M"], [8]))
    assert (m["schedule"], m["update_every"]) == ("local/M", 16)


def test_the_validation_study_replays_a_local_M_record_as_local_M():
    r = dict(schedule="local/M", update_every=16, micro_batches=16, stages=2, micro_batch=8, model="mlp",
             model_kwargs={"depth": 4, "width": 8}, method="chunked-2", stage_plan={"blocks": [[0, 1], [2, 3]]})
    job = record_job(r)
    assert record_schedule(r) == job.schedule == "local/M"
    assert (job.cfg.update_every, job.cfg.method, job.cut) == (16, "chunked-2", ((0, 1), (2, 3)))


# -------------------------------------------------------------------------- cut, spread
def test_every_row_prints_its_stage_cut(est, simulated):
    text = str(est)
    assert "blocks per stage" in text.splitlines()[0]
    for schedule in ROWS:
        assert re.search(r"\s0-1 2-3\s", row_line(text, schedule)), schedule
    by_name = {r["schedule"]: r for r in simulated}
    assert by_name["interleaved-1f1b"]["stage_plan"]["blocks"] == [[0], [1], [2], [3]]   # two pieces per processor
    sim_text = api.format_table(simulated)
    assert " 0-0 1-1 2-2 3-3 " in row_line(sim_text, "interleaved-1f1b")
    assert f" {report_table.cut_text(by_name['local'])} " in row_line(sim_text, "local")
    assert report_table.cut_text({"schedule": "1f1b"}) == "-"


def test_bench_medians_print_the_spread_of_their_repeats(benched):
    medians = {r["schedule"]: r for r in report.median_records(benched)}
    assert medians["1f1b-recompute"]["samples_per_s_runs"] == [10.0, 11.0, 12.0]
    assert medians["local"]["samples_per_s"] == 41.0 and medians["local"]["repeats"] == 3
    text = report.format_table(list(medians.values()))
    assert re.search(r"\s41\.0\s+40\.0-42\.0\s", row_line(text, "local"))
    assert re.search(r"\s11\.0\s+10\.0-12\.0\s", row_line(text, "1f1b-recompute"))
    one = report.format_table([next(r for r in benched if r["schedule"] == "local")])
    assert re.search(r"\s40\.0\s+-\s", row_line(one, "local"))           # a single run has no spread


def test_the_legend_says_why_the_tools_differ():
    legend = " ".join(report_table.format_table([]).split("\n\n")[-1].split())
    for phrase in ("ideal machine", "calibrated here", "median of --repeats 3", "min-max:", "blocks per stage:"):
        assert phrase in legend, phrase
