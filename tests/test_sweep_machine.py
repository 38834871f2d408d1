"""Every sweep point records the machine that ran it; points written before say nothing of it."""
import pandas as pd

from paper_repro import hardware, sweep


def test_a_point_records_its_hardware_and_torch_version(tmp_path):
    grid = sweep.Grid(name="tiny", model="mlp", dataset="digits", model_kwargs=dict(depth=2, width=16),
                      methods=["backprop"], batch_sizes=[8], lrs=[1e-2], steps=3, eval_examples=50)
    sweep.run_sweep(grid, tmp_path / "tiny", progress=False)
    df = sweep.load_results(tmp_path / "tiny")
    import torch
    assert set(df.hardware) == {hardware.cpu_model()} and set(df.torch_version) == {torch.__version__}
    # figures/MACHINE names the same CPU model and torch version
    assert hardware.figure_machine() == f"{df.hardware.iloc[0]}; torch {df.torch_version.iloc[0]}"
    machines = sweep.point_machines(df)
    assert len(machines) == 1 and machines.hardware.iloc[0] == hardware.cpu_model()


def test_points_without_machine_columns_are_not_recorded_rather_than_guessed():
    old = pd.DataFrame({"point_id": ["a", "a", "b"], "method": ["greedy"] * 3, "batch_size": 8, "lr": 1e-3,
                        "seed": 0, "step": [1, 2, 1]})
    machines = sweep.point_machines(old)
    assert list(machines.hardware) == ["not recorded"] * 2 and list(machines.torch_version) == ["not recorded"] * 2
    mixed = pd.concat([old, pd.DataFrame({"point_id": ["c"], "method": ["greedy"], "batch_size": 8, "lr": 1e-3,
                                          "seed": 1, "step": [1], "hardware": ["AMD EPYC"],
                                          "torch_version": ["2.14.1"]})])
    assert list(sweep.point_machines(mixed).hardware) == ["not recorded", "not recorded", "AMD EPYC"]
