"""The cost model: measured FLOPs per block and head, and the ideal-machine time model."""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from paper_repro import cost, methods, models


def _mlp_learner(spec, depth=4, width=32, in_dim=32, classes=10):
    torch.manual_seed(0)
    return methods.build(models.mlp(depth=depth, width=width, in_dim=in_dim, num_classes=classes), spec)


def test_linear_block_forward_flops_are_2_in_out_per_example():
    learner = _mlp_learner("greedy", depth=2, width=24, in_dim=40, classes=7)
    x, y = torch.randn(5, 40), torch.randint(7, (5,))
    table = cost.module_costs(learner, x, y)
    blocks = table[table.block >= 0].set_index("block")
    assert blocks.loc[0, "forward"] == 2 * 40 * 24
    assert blocks.loc[1, "forward"] == 2 * 24 * 24
    # stop-gradient input: only the weight gradient, 2 x in x out; a head also sends dX back
    assert blocks.loc[0, "backward"] == 2 * 40 * 24
    heads = table[table.part == "head"]
    assert heads.forward.tolist() == [2 * 24 * 7] * 2
    assert heads.backward.tolist() == [4 * 24 * 7] * 2


def test_inner_block_backward_is_measured_as_twice_forward():
    learner = _mlp_learner("backprop", depth=3, width=16, in_dim=16)
    table = cost.module_costs(learner, torch.randn(3, 16), torch.randint(10, (3,)))
    blocks = table[table.block >= 0].set_index("block")
    assert blocks.loc[0, "backward"] == blocks.loc[0, "forward"]  # data input: no dX
    assert blocks.loc[1, "backward"] == 2 * blocks.loc[1, "forward"]
    assert list(blocks["input_grad"]) == [False, True, True]


@pytest.mark.parametrize("depth", [2, 4, 6])
def test_uniform_mlp_backprop_critical_path_vs_greedy(depth):
    w, c = 64, 10
    x, y = torch.randn(8, w), torch.randint(c, (8,))
    bp = cost.step_cost(_mlp_learner("backprop", depth, w, w, c), x, y)
    gr = cost.step_cost(_mlp_learner("greedy", depth, w, w, c), x, y)
    # by hand: forward 2w^2 per block; backward 2w^2 for block 0 (no dX) and 4w^2 for the
    # others; head 2wc forward + 4wc backward. Greedy: every block's input is detached.
    assert bp.critical_path_flops == depth * 2 * w * w + 2 * w * w + (depth - 1) * 4 * w * w + 6 * w * c
    assert gr.critical_path_flops == 4 * w * w + 6 * w * c
    assert bp.total_flops == bp.critical_path_flops and bp.fill_flops == 0
    assert gr.total_flops == depth * gr.critical_path_flops
    assert gr.fill_flops == (depth - 1) * 2 * w * w
    # "about L times": between L and 1.5 L, because greedy blocks skip the input gradient
    ratio = bp.critical_path_flops / gr.critical_path_flops
    assert depth <= ratio <= 1.5 * depth


@pytest.mark.parametrize("spec", ["backprop", "greedy", "overlapping", "chunked-2"])
def test_parts_sum_to_an_independent_count_of_a_real_step(spec):
    torch.manual_seed(1)
    net = models.transformer_lm(vocab_size=40, d_model=32, n_layers=3, n_heads=2, seq_len=8)
    learner = methods.build(net, spec)
    x, y = torch.randint(40, (4, 8)), torch.randint(40, (4, 8))
    c = cost.step_cost(learner, x, y)
    with FlopCounterMode(display=False) as counter:
        sum(learner.losses(x, y)).backward()
    assert c.total_flops * 4 == pytest.approx(counter.get_total_flops(), rel=1e-12)
    per_module = (c.modules.forward + c.modules.backward).groupby(c.modules.module).sum()
    assert c.critical_path_flops == per_module.max()


def test_overlapping_and_chunked_module_structure_and_fill():
    x, y = torch.randn(2, 32), torch.randint(10, (2,))
    ov = cost.step_cost(_mlp_learner("overlapping"), x, y)
    # windows [0,1],[1,2],[2,3]: block 1 and 2 run twice; fill = forward of blocks 0 and 1
    assert sorted(ov.modules.query("block >= 0").block) == [0, 1, 1, 2, 2, 3]
    assert ov.fill_flops == 2 * (2 * 32 * 32)
    ch = cost.step_cost(_mlp_learner("chunked-2"), x, y)
    assert ch.fill_flops == 2 * (2 * 32 * 32)  # the whole first chunk's forward
    assert ch.critical_path_flops < cost.step_cost(_mlp_learner("backprop"), x, y).critical_path_flops


def test_resnet_measurement_leaves_the_learner_unchanged():
    torch.manual_seed(0)
    net = models.resnet("resnet18", num_classes=10, small_input=True, in_channels=1, width=8)
    learner = methods.build(net, "greedy")
    before = {k: v.clone() for k, v in learner.state_dict().items()}
    c = cost.step_cost(learner, torch.randn(4, 1, 8, 8), torch.randint(10, (4,)))
    after = learner.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # BatchNorm running stats too
    assert all(p.grad is None for p in learner.parameters())
    assert c.modules.forward.gt(0).all() and len(c.modules) == 2 * len(net.blocks)
    assert set(c.as_columns()) == {"total_flops_pe", "critical_path_flops_pe", "fill_flops_pe"}


def test_flop_counts_are_per_example():
    learner = _mlp_learner("chunked-2")
    y = torch.randint(10, (16,))
    small = cost.step_cost(learner, torch.randn(2, 32), y[:2])
    large = cost.step_cost(learner, torch.randn(16, 32), y)
    assert small.total_flops == large.total_flops
    assert small.critical_path_flops == large.critical_path_flops
