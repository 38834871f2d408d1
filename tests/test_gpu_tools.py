"""The GPU tools that can run here: the calibration tool on CPU (its files and names), and the
paper-setting table read from the committed H200 calibrations against a direct simulation."""
import dataclasses
import importlib.util
from pathlib import Path

import pytest

from paper_repro import settings
from paper_repro.simulate.calibrate import BlockCosts
from paper_repro.simulate.scaling import paper_setting

TOOLS = Path(__file__).resolve().parents[1] / "tools"
pytestmark = pytest.mark.timeout(300)


def tool(name: str):
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_calibrate_writes_one_file_per_size_and_run(tmp_path):
    cal = tool("gpu_calibrate")
    assert cal.main(["--out", str(tmp_path), "--models", "resnet", "--micro-batches", "1", "--repeats", "1",
                     "--reps", "1", "--device", "cpu"]) == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["calibration_resnet34_224_cpu_mb1.json"]
    bc = BlockCosts.load(tmp_path / files[0])
    assert (bc.model, bc.image_size, bc.micro_batch, bc.device) == ("resnet34", 224, 1, "cpu")
    assert all(t > 0 for t in bc.forward + bc.backward) and "torch" in bc.note


def test_gpu_calibrate_names_the_bad_value(tmp_path, capsys):
    cal = tool("gpu_calibrate")
    assert cal.main(["--out", str(tmp_path), "--models", "vgg", "--device", "cpu"]) == 2
    assert "'vgg'" in capsys.readouterr().err


def test_gpu_paper_setting_matches_a_direct_simulation_of_the_stored_calibrations(tmp_path):
    gps = tool("gpu_paper_setting")
    files = gps.stored("h200")
    s = settings.scaling_settings("quick")
    B = s.paper_micro_batch
    assert len(files[B]) >= 2, "the committed H200 calibrations at the paper's micro-batch"
    df = gps.table({B: files[B][:1]})
    bc = BlockCosts.load(files[B][0])
    for inp, costs in (("as measured", bc), ("free", dataclasses.replace(bc, data=0.0, concat=0.0))):
        direct = paper_setting([costs], s.paper_stages, s.paper_micro_batches, s.baselines, B)
        got = df[(df.input == inp) & (df.cut == "blocks")].set_index("baseline").ratio
        for r in direct.itertuples():
            assert got[r.baseline] == pytest.approx(r.ratio)
    # the input matters on a GPU: drawing it on the host is as long as a stage's compute
    measured = df[(df.input == "as measured") & (df.cut == "blocks")].set_index("baseline").ratio
    free = df[(df.input == "free") & (df.cut == "blocks")].set_index("baseline").ratio
    assert bc.data > 0 and (measured - free).abs().max() > 0.01
    assert gps.main(["--gpu", "nosuchgpu", "--out", str(tmp_path / "x")]) == 2
    stages = gps.by_stages(gps.STORE, "h200")
    heads = [line for line in stages if line.startswith("## ")]
    assert len(heads) == 2 and "resnet" in heads[0] and "transformer" in heads[1]
    rows = [line for line in stages if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == len(s.ratio_stages["resnet"]) + len(s.ratio_stages["transformer"])


def test_paper_setting_ratios_group_one_ratio_per_calibration_and_spread_summarises_them():
    from paper_repro.simulate.scaling import paper_setting_ratios, spread
    gps = tool("gpu_paper_setting")
    s = settings.scaling_settings("quick")
    costs = [BlockCosts.load(p).without_input() for p in gps.stored("h200")[s.paper_micro_batch][:2]]
    ratios = paper_setting_ratios(costs, s)
    assert list(ratios) == s.baselines and all(len(v) == 2 for v in ratios.values())
    table = spread(ratios)
    for b, v in ratios.items():
        assert table.loc[b, "min"] == min(v) and table.loc[b, "max"] == max(v)
        assert table.loc[b, "median"] == pytest.approx(sum(v) / 2)
