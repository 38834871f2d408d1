"""The pipeline estimate on a net whose FLOPs and bytes are known by hand: four Linear(16, 16)
+ ReLU blocks with default linear heads (10 classes), 4 devices, micro-batches of 8."""
import pytest
import torch
import torch.nn as nn

from paper_repro import estimate
from paper_repro.distributed.memory import SavedTensorMeter

D, C, B, N = 16, 10, 8, 4


def make_net():
    return nn.Sequential(*[nn.Sequential(nn.Linear(D, D), nn.ReLU()) for _ in range(N)])


@pytest.fixture(scope="module")
def table():
    torch.manual_seed(0)
    x, y = torch.randn(B, D), torch.randint(C, (B,))
    return estimate.pipeline_estimate(make_net, x, y, devices=N, micro_batches=16, num_classes=C)


def test_flops_and_speedups_match_a_count_by_hand(table):
    lin, head = 2 * D * D, 2 * D * C           # forward FLOPs per sample of a block's Linear and of a head
    # backprop: block 0 computes no input gradient (1x forward back), blocks 1-3 do (2x), the head does (2x)
    one = (lin + lin) + 3 * (lin + 2 * lin) + (head + 2 * head)
    greedy_module = (lin + lin) + (head + 2 * head)     # every local module's input is detached
    stage = [lin + lin, 3 * lin, 3 * lin, 3 * lin + 3 * head]  # pipelined backprop, one block per device
    assert table["schedule"].tolist() == ["local", "local/M", "1f1b", "1f1b-recompute"]
    assert table.attrs["one_device"]["flops_per_sample"] == pytest.approx(one)
    rows = table.set_index("schedule")
    assert rows["flops_per_sample"][["local", "local/M", "1f1b"]].tolist() == pytest.approx(
        [greedy_module, greedy_module, max(stage) * 19 / 16])
    assert rows["speedup"][["local", "1f1b"]].tolist() == pytest.approx(
        [one / greedy_module, one / (max(stage) * 19 / 16)])
    # recomputation runs every block's forward again
    assert rows.loc["1f1b-recompute", "flops_per_sample"] == pytest.approx(max(s + lin for s in stage) * 19 / 16)


def test_bytes_between_devices_match_the_boundary_shapes(table):
    rows = table.set_index("schedule")["comm_bytes_per_sample"]
    act, label = D * 4, 8                      # float32 activations, one int64 label per sample
    assert rows["1f1b"] == {"forward": 3 * act + label, "backward": 3 * act}
    assert rows["local"] == rows["local/M"] == {"forward": 3 * (act + label), "backward": 0}


def test_memory_holds_the_state_and_the_micro_batches_in_flight(table):
    rows = table.set_index("schedule")["peak_mem_bytes_per_stage"]
    block_state = 4 * (D * D + D) * 4          # params, grads and two Adam moments, float32
    head_state = 4 * (D * C + C) * 4
    torch.manual_seed(0)
    x = torch.randn(B, D)
    meter = SavedTensorMeter()
    with meter:
        out = make_net()[0](x).sum()
    del out
    one_micro_batch = meter.peak               # what block 0 keeps for backward
    pipelined, local = rows["1f1b"], rows["local"]
    assert pipelined[0] == block_state + N * one_micro_batch   # 1F1B: N micro-batches in flight on device 0
    assert all(m > block_state + head_state for m in local)     # every local device holds a head too
    assert local[-1] == pipelined[-1]          # the last device: same blocks, the net's head, one in flight


def test_fewer_than_two_devices_is_refused():
    with pytest.raises(ValueError, match="devices must be an integer >= 2, got 1"):
        estimate.pipeline_estimate(make_net, torch.randn(2, D), torch.tensor([0, 1]), devices=1)


def test_the_former_column_names_read_the_new_ones_with_a_warning_for_one_release(table):
    assert not set(estimate.FORMER_COLUMNS) & set(table.columns)      # each value once in the rows
    for old, (new, part) in estimate.FORMER_COLUMNS.items():
        with pytest.warns(FutureWarning, match=f"column '{old}' is now '{new}'"):
            former = table[old]
        expected = table[new] if part is None else table[new].map(lambda d: d[part])
        assert former.tolist() == expected.tolist() and former.name == old
    with pytest.warns(FutureWarning):
        assert (table["devices"] == N).all()


def test_every_row_carries_the_cut(table):
    assert all(row["stage_plan"]["blocks"] == [[0], [1], [2], [3]] for row in table.to_dict("records"))
