import pytest
import torch
import torchvision

from paper_repro import models


def n_params(module):
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("name", ["resnet18", "resnet34", "resnet50"])
def test_resnet_matches_torchvision_parameters(name):
    net = models.resnet(name, num_classes=1000, small_input=False)
    tv = getattr(torchvision.models, name)(num_classes=1000)
    ours = sorted(tuple(p.shape) for p in net.parameters())
    theirs = sorted(tuple(p.shape) for p in tv.parameters())
    assert ours == theirs
    n_res = {"resnet18": 8, "resnet34": 16, "resnet50": 16}[name]
    assert len(net.blocks) == 1 + n_res


def test_resnet_forward_equals_torchvision_with_copied_weights():
    tv = torchvision.models.resnet18(num_classes=10).eval()
    net = models.resnet("resnet18", num_classes=10, small_input=False).eval()
    tv_params = [tv.conv1, tv.bn1] + [b for layer in (tv.layer1, tv.layer2, tv.layer3, tv.layer4) for b in layer] + [tv.fc]
    ours = [net.blocks[0][0], net.blocks[0][1]] + list(net.blocks[1:]) + [net.head.fc]
    for a, b in zip(tv_params, ours):
        b.load_state_dict(a.state_dict())
    x = torch.randn(2, 3, 64, 64)
    torch.testing.assert_close(net(x), tv(x))


def test_mlp_shapes_and_heads():
    net = models.mlp(depth=4, width=32, in_dim=64, num_classes=10, layer_norm=True)
    assert len(net.blocks) == 4
    x = torch.randn(5, 1, 8, 8)
    assert net(x).shape == (5, 10)
    feats = net.features(x)
    assert [f.shape for f in feats] == [(5, 32)] * 4
    assert net.make_head(1)(feats[1]).shape == (5, 10)


def test_transformer_is_causal():
    torch.manual_seed(0)
    net = models.transformer_lm(vocab_size=50, d_model=32, n_layers=3, n_heads=4, seq_len=16).eval()
    idx = torch.randint(0, 50, (2, 16))
    out = net(idx)
    assert out.shape == (2, 16, 50)
    idx2 = idx.clone()
    idx2[:, 10:] = (idx2[:, 10:] + 1) % 50
    out2 = net(idx2)
    torch.testing.assert_close(out[:, :10], out2[:, :10])
    assert not torch.allclose(out[:, 10:], out2[:, 10:])
    y = torch.randint(0, 50, (2, 16))
    assert net.loss(out, y).ndim == 0


def test_small_resnet_block_outputs():
    net = models.resnet("resnet18", num_classes=10, small_input=True, in_channels=1, width=8)
    feats = net.features(torch.randn(3, 1, 8, 8))
    assert feats[0].shape == (3, 8, 8, 8) and feats[-1].shape == (3, 64, 1, 1)
    for i, f in enumerate(feats):
        assert net.make_head(i)(f).shape == (3, 10)


@pytest.mark.parametrize("kwargs", [dict(depth=0), dict(width=-3), dict(depth=2.5)])
def test_bad_mlp_arguments(kwargs):
    with pytest.raises(ValueError, match=list(kwargs)[0]):
        models.mlp(**kwargs)


def test_unknown_model_names_choices():
    with pytest.raises(ValueError, match="resnet18"):
        models.build("vgg16")
    with pytest.raises(ValueError, match="resnet101"):
        models.resnet("resnet101")
    with pytest.raises(ValueError, match="n_heads"):
        models.transformer_lm(d_model=10, n_heads=3)


# ------------------------------------------------------------------ wrapping nn.Sequential
def _conv_seq():
    return torch.nn.Sequential(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU()),
                               torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, stride=2, padding=1), torch.nn.ReLU()),
                               torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16 * 4 * 4, 32)))


@pytest.mark.parametrize("example", [torch.randn(2, 3, 8, 8), None])
def test_from_sequential_default_heads_by_output_shape(example):
    torch.manual_seed(0)
    net = models.BlockNet.from_sequential(_conv_seq(), num_classes=5, example=example)
    assert len(net.blocks) == 3 and net.task == "classification" and net.model is None
    x = torch.randn(4, 3, 8, 8)
    feats = net.features(x)
    assert [tuple(f.shape) for f in feats] == [(4, 8, 8, 8), (4, 16, 4, 4), (4, 32)]
    for i, f in enumerate(feats):
        head = net.make_head(i)
        logits = head(f)
        assert tuple(logits.shape) == (4, 5)
        if i < 2:  # image outputs: global average pool, then linear
            torch.testing.assert_close(logits, head.linear(f.mean(dim=(2, 3))))
    assert tuple(net(x).shape) == (4, 5)


def test_from_sequential_token_outputs_get_per_token_heads_and_the_lm_loss():
    seq = [torch.nn.Embedding(11, 6), torch.nn.Linear(6, 6)]
    net = models.BlockNet.from_sequential(seq, num_classes=11, example=torch.randint(11, (2, 5)))
    assert net.task == "lm"
    tokens = torch.randint(11, (3, 5))
    logits = net(tokens)
    assert tuple(logits.shape) == (3, 5, 11)
    torch.testing.assert_close(net.loss(logits, tokens),
                               torch.nn.functional.cross_entropy(logits.reshape(-1, 11), tokens.reshape(-1)))


def test_from_sequential_errors_name_the_block_and_shapes():
    bad = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(5, 3))
    with pytest.raises(ValueError, match=r"block 1 \(Linear\) cannot take the output of block 0 of shape \(2, 8\)"):
        models.BlockNet.from_sequential(bad, num_classes=3, example=torch.randn(2, 4))
    with pytest.raises(ValueError, match=r"block 0 \(Linear\) cannot take the example input of shape \(2, 7\)"):
        models.BlockNet.from_sequential(bad, num_classes=3, example=torch.randn(2, 7))
    five_d = [torch.nn.Identity()]
    with pytest.raises(ValueError, match=r"shape \(1, 2, 2, 2, 2\).*head="):
        models.BlockNet.from_sequential(five_d, num_classes=3, example=torch.randn(1, 2, 2, 2, 2))
    with pytest.raises(ValueError, match=r"head for block 0 .*shape \(2, 4\)"):
        models.BlockNet.from_sequential([torch.nn.Identity()], head=lambda i: torch.nn.Linear(9, 2),
                                        example=torch.randn(2, 4))
    with pytest.raises(ValueError, match="num_classes"):
        models.BlockNet.from_sequential([torch.nn.Identity()])
    with pytest.raises(ValueError, match="non-empty"):
        models.BlockNet.from_sequential([])
    with pytest.raises(ValueError, match="int"):
        models.BlockNet.from_sequential([torch.nn.Identity(), 3], num_classes=2)
    with pytest.raises(ValueError, match="default head takes"):
        models.BlockNet.from_sequential([torch.nn.Identity()], num_classes=2)(torch.randn(2))
