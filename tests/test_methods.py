"""Exactness of the local-learning methods, in float64, against independent autograd
computations for MLP, Transformer and ResNet.

The reference never calls ``Learner.losses``: for each local module it recomputes the
module's input from scratch under ``torch.no_grad()`` (a stop-gradient by construction),
runs the module's blocks and head with autograd, and takes ``torch.autograd.grad``.
"""
import pytest
import torch

from paper_repro import estimate, methods, models



@pytest.fixture(autouse=True)
def float64():
    """float64 for this module's tests only: a module-level set_default_dtype would leak into
    every test collected after it (the trainer's float32 data then meets float64 weights)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def _mlp():
    return models.mlp(depth=4, width=16, in_dim=64, num_classes=10), torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))


def _transformer():
    net = models.transformer_lm(vocab_size=32, d_model=16, n_layers=4, n_heads=2, seq_len=12)
    tokens = torch.randint(0, 32, (4, 13))
    return net, tokens[:, :-1], tokens[:, 1:]


def _resnet():
    net = models.resnet("resnet18", num_classes=10, small_input=True, in_channels=1, width=4)
    return net, torch.randn(6, 1, 8, 8), torch.randint(0, 10, (6,))


FAMILIES = {"mlp": _mlp, "transformer": _transformer, "resnet": _resnet}


@pytest.fixture(params=list(FAMILIES), ids=list(FAMILIES))
def family(request):
    torch.manual_seed(0)
    net, x, y = FAMILIES[request.param]()
    return net.double(), x.double() if x.is_floating_point() else x, y


def block_params(net, b):
    return list(net.blocks[b].parameters())


def learner_grads(learner, x, y):
    learner.zero_grad(set_to_none=True)
    sum(learner.losses(x, y)).backward()
    return {name: (p.grad.clone() if p.grad is not None else torch.zeros_like(p))
            for name, p in learner.named_parameters()}


def module_loss_reference(learner, m, x, y):
    """Loss of module m, its input recomputed with no autograd graph at all."""
    net, blocks = learner.net, learner.module_blocks[m]
    with torch.no_grad():
        h = x
        for b in range(blocks[0]):
            h = net.blocks[b](h)
    for b in blocks:
        h = net.blocks[b](h)
    return net.loss(learner.heads[m](h), y)


def grads_of(loss, params):
    gs = torch.autograd.grad(loss, params, allow_unused=True, retain_graph=True)
    return [torch.zeros_like(p) if g is None else g for g, p in zip(gs, params)]


def reference_grads(learner, x, y):
    named = list(learner.named_parameters())
    total = [torch.zeros_like(p) for _, p in named]
    for m in range(learner.num_modules):
        loss = module_loss_reference(learner, m, x, y)
        for i, g in enumerate(grads_of(loss, [p for _, p in named])):
            total[i] += g
    return {name: g for (name, _), g in zip(named, total)}


def touched_blocks(learner, loss):
    touched = []
    for b in range(len(learner.net.blocks)):
        gs = grads_of(loss, block_params(learner.net, b))
        if any(g.abs().sum() > 0 for g in gs):
            touched.append(b)
    return touched


def assert_same(got, want):
    assert got.keys() == want.keys()
    for name in got:
        torch.testing.assert_close(got[name], want[name], rtol=1e-9, atol=1e-12, msg=name)


def test_chunked1_and_backprop_equal_plain_backprop(family):
    net, x, y = family
    params = list(net.parameters())
    want = grads_of(net.loss(net(x), y), params)
    for spec in ("chunked-1", "backprop"):
        learner = methods.build(net, spec)
        assert learner.num_modules == 1 and learner.heads[0] is net.head
        got = learner_grads(learner, x, y)
        named = dict(net.named_parameters())
        for (name, p), w in zip(named.items(), want):
            torch.testing.assert_close(got["net." + name], w, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("spec", ["greedy", "overlapping", "chunked-2", "chunked-3"])
def test_learner_gradients_match_independent_reference(family, spec):
    net, x, y = family
    learner = methods.build(net, spec)
    assert_same(learner_grads(learner, x, y), reference_grads(learner, x, y))


def test_greedy_loss_k_touches_only_block_k(family):
    net, x, y = family
    learner = methods.build(net, "greedy")
    losses = learner.losses(x, y)
    assert len(losses) == len(net.blocks)
    for k, loss in enumerate(losses):
        assert touched_blocks(learner, loss) == [k]
    assert learner.heads[-1] is net.head


def test_overlapping_windows(family):
    net, x, y = family
    learner = methods.build(net, "overlapping")
    n = len(net.blocks)
    losses = learner.losses(x, y)
    assert len(losses) == n - 1
    for k, loss in enumerate(losses):
        assert touched_blocks(learner, loss) == [k, k + 1]
    # an inner block's .grad is the sum of the two windows' gradients, computed one at a time
    got = learner_grads(learner, x, y)
    for b in range(1, n - 1):
        params = block_params(net, b)
        w1 = grads_of(module_loss_reference(learner, b - 1, x, y), params)
        w2 = grads_of(module_loss_reference(learner, b, x, y), params)
        names = [f"net.blocks.{b}.{name}" for name, _ in net.blocks[b].named_parameters()]
        for name, g1, g2 in zip(names, w1, w2):
            assert g1.abs().sum() > 0 and g2.abs().sum() > 0
            torch.testing.assert_close(got[name], g1 + g2, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("k", [2, 3])
def test_chunked_loss_touches_exactly_its_chunk(family, k):
    net, x, y = family
    learner = methods.build(net, f"chunked-{k}")
    chunks = learner.module_blocks
    assert [b for c in chunks for b in c] == list(range(len(net.blocks)))
    sizes = [len(c) for c in chunks]
    assert len(chunks) == k and max(sizes) - min(sizes) <= 1
    for c, loss in enumerate(learner.losses(x, y)):
        assert touched_blocks(learner, loss) == chunks[c]


def test_chunk_sizes():
    assert methods.module_blocks("chunked-3", 8) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert methods.module_blocks("chunked-4", 4) == methods.module_blocks("greedy", 4)
    assert methods.module_blocks("overlapping", 3) == [[0, 1], [1, 2]]


@pytest.mark.parametrize("spec", ["chunked-0", "chunked-5", "chunked--1", "chunky-2", "global", "", "overlap"])
def test_bad_specs_raise_naming_value(spec):
    net = models.mlp(depth=4, width=8, in_dim=4, num_classes=2)
    with pytest.raises(ValueError) as err:
        methods.build(net, spec)
    msg = str(err.value)
    assert repr(spec) in msg or spec.split("-")[-1] in msg
    assert "backprop" in msg or "between 1 and" in msg


def test_overlapping_needs_two_blocks():
    with pytest.raises(ValueError, match="at least 2 blocks"):
        methods.build(models.mlp(depth=1, width=8, in_dim=4, num_classes=2), "overlapping")


def test_build_wraps_a_sequential_and_says_what_it_needs():
    seq = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()), torch.nn.Linear(8, 8))
    learner = methods.build(seq, "greedy", num_classes=3, example=torch.randn(2, 4))
    assert learner.num_modules == 2 and len(learner.losses(torch.randn(5, 4), torch.randint(3, (5,)))) == 2
    with pytest.raises(ValueError, match="num_classes"):
        methods.build(seq, "greedy")
    with pytest.raises(ValueError, match="needs an nn.Sequential of blocks or a BlockNet, got a Linear"):
        methods.build(torch.nn.Linear(2, 2), "greedy")
    with pytest.raises(ValueError, match="num_classes.*not a BlockNet"):
        methods.build(learner.net, "greedy", num_classes=3)



class _Fold(torch.nn.Module):
    """A block that folds the batch into the features: (N, D) -> (1, N * D)."""

    def forward(self, x):
        return x.reshape(1, -1)


class _TwoLayers(torch.nn.Module):
    """A plain nn.Module: one forward, no blocks."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 8), torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


@pytest.mark.parametrize("batch", [1, 2, 5])
def test_a_block_that_changes_the_batch_dimension_fails_at_build_naming_it(batch):
    seq = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()), _Fold(),
                              torch.nn.Linear(8 * max(batch, 2), 8))
    with pytest.raises(ValueError, match=r"^block 1 \(_Fold\) changes the batch dimension: input of shape "
                                         r"\(\d+, 8\) gives output of shape \(1, \d+\)") as err:
        methods.build(seq, "greedy", num_classes=3, example=torch.randn(batch, 4))
    assert "\n" not in str(err.value)
    # the pipeline estimate wraps the same way: the same error, before anything is timed
    with pytest.raises(ValueError, match=r"block 1 \(_Fold\) changes the batch dimension"):
        estimate.pipeline_estimate(lambda: seq, torch.randn(4, 4), torch.randint(3, (4,)), devices=2, num_classes=3)
    # a block that keeps the batch (flatten(1)) passes, with an example of one sample too
    ok = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU()), torch.nn.Flatten(1))
    learner = methods.build(ok, "greedy", num_classes=3, example=torch.randn(batch, 1, 5, 5))
    assert learner.num_modules == 2 and learner.net.expects == f"inputs like {(batch, 1, 5, 5)}"


@pytest.mark.parametrize("wrap", [{}, {"num_classes": 3}, {"example": torch.randn(2, 4)},
                                  {"num_classes": 3, "example": torch.randn(2, 4)}])
def test_a_plain_module_is_refused_with_how_to_split_it_into_blocks(wrap):
    with pytest.raises(ValueError) as err:
        methods.build(_TwoLayers(), "greedy", **wrap)
    text = str(err.value)
    assert text.startswith("methods.build needs an nn.Sequential of blocks or a BlockNet, got a _TwoLayers")
    # says how: one block per piece of _TwoLayers.forward, and where num_classes / example go
    assert "_TwoLayers.forward into a block" in text and "nn.Sequential(block0, block1, ...)" in text
    assert "num_classes= and example= then apply to that nn.Sequential" in text and "BlockNet(" in text
    assert "wrap arguments" not in text and "\n" not in text
    with pytest.raises(ValueError, match="^a Learner needs an nn.Sequential of blocks or a BlockNet, got a _TwoLayers"):
        methods.Learner(_TwoLayers(), "greedy")
