"""Gradient cosine and linear CKA against independent computations."""
import dataclasses
import itertools
import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from paper_repro import methods, models, probes
from paper_repro.plots import save_figure
from paper_repro.plots import similarity as similarity_plots
from paper_repro.probes import gradient_cosine, linear_cka


# ----------------------------------------------------------------------------- CKA
def _rng_data(n=60, p=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, p, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("unbiased", [False, True])
def test_cka_of_a_representation_with_itself_is_one(unbiased):
    X = _rng_data()
    assert linear_cka(X, X, unbiased=unbiased) == pytest.approx(1.0, abs=1e-12)
    wide = _rng_data(n=20, p=200)  # more features than examples: the Gram path
    assert linear_cka(wide, wide, unbiased=unbiased) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("unbiased", [False, True])
def test_cka_invariant_to_orthogonal_transform_and_isotropic_scaling(unbiased):
    X = _rng_data(seed=1)
    Y = torch.tanh(X @ _rng_data(n=12, p=8, seed=2)) + 0.3 * _rng_data(p=8, seed=3)
    base = linear_cka(X, Y, unbiased=unbiased)
    assert 0.05 < base < 0.95  # a non-trivial pair
    Q, _ = torch.linalg.qr(_rng_data(n=12, p=12, seed=4))
    assert linear_cka(X @ Q, Y, unbiased=unbiased) == pytest.approx(base, abs=1e-10)
    assert linear_cka(3.7 * X, 0.02 * Y, unbiased=unbiased) == pytest.approx(base, abs=1e-10)
    # and not to an arbitrary (non-orthogonal, anisotropic) linear map
    A = torch.diag(torch.linspace(0.1, 10, 12, dtype=torch.float64))
    assert abs(linear_cka(X @ A, Y, unbiased=unbiased) - base) > 1e-3


def test_cka_hand_computed_case():
    # One feature each: linear CKA is the squared Pearson correlation. Centred x = (-1.5, -.5,
    # .5, 1.5), y = (-1.5, .5, -.5, 1.5): x.y = 4, |x|^2 = |y|^2 = 5, r = 0.8, CKA = 0.64.
    x = np.array([[1.0], [2.0], [3.0], [4.0]])
    y = np.array([[1.0], [3.0], [2.0], [4.0]])
    assert linear_cka(x, y) == pytest.approx(0.64, abs=1e-12)
    # Two features, three examples: X = e1/e2 axes, Y = X with the second feature doubled.
    # Centred X = [[2/3,-1/3],[-1/3,2/3],[-1/3,-1/3]]; X^T X = [[2/3,-1/3],[-1/3,2/3]] = S,
    # Y = X diag(1,2): Y^T X = diag(1,2) S, Y^T Y = diag(1,2) S diag(1,2).
    # |Y^T X|^2 = 4/9+1/9+4/9+16/9 = 25/9; |X^T X|^2 = 10/9; |Y^T Y|^2 = 4/9+4/9+4/9+64/9 = 76/9.
    X = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    Y = X * np.array([1.0, 2.0])
    assert linear_cka(X, Y) == pytest.approx(25 / math.sqrt(10 * 76), abs=1e-12)


def _hsic_u_bruteforce(K, L):
    """Unbiased HSIC as the order-4 U-statistic: mean over ordered distinct (i, j, q, r) of
    k_ij l_ij + k_ij l_qr - 2 k_ij l_iq (Song et al., 2012), by enumeration."""
    n = K.shape[0]
    total, count = 0.0, 0
    for i, j, q, r in itertools.permutations(range(n), 4):
        total += K[i, j] * L[i, j] + K[i, j] * L[q, r] - 2 * K[i, j] * L[i, q]
        count += 1
    return total / count


def test_unbiased_cka_matches_bruteforce_u_statistic():
    for p in (3, 12):  # fewer and more features than examples: both code paths
        X, Y = _rng_data(n=7, p=p, seed=5).numpy(), _rng_data(n=7, p=4, seed=6).numpy()
        X[:, 0] += 2 * Y[:, 1]  # some dependence
        K, L = X @ X.T, Y @ Y.T
        expected = _hsic_u_bruteforce(K, L) / math.sqrt(_hsic_u_bruteforce(K, K) * _hsic_u_bruteforce(L, L))
        assert linear_cka(X, Y, unbiased=True) == pytest.approx(expected, abs=1e-10)


def test_biased_and_unbiased_agree_on_large_samples_but_not_small():
    g = torch.Generator().manual_seed(7)
    Z = torch.randn(20000, 5, generator=g, dtype=torch.float64)
    X = torch.cat([Z, torch.randn(20000, 5, generator=g, dtype=torch.float64)], 1)
    Y = Z @ torch.randn(5, 6, generator=g, dtype=torch.float64) + torch.randn(20000, 6, generator=g,
                                                                              dtype=torch.float64)
    b, u = linear_cka(X, Y), linear_cka(X, Y, unbiased=True)
    assert 0.1 < u < 0.9 and abs(b - u) < 0.01
    # independent small samples: the biased estimator is pulled up, the unbiased one is not
    Xs, Ys = _rng_data(n=20, p=10, seed=8), _rng_data(n=20, p=10, seed=9)
    assert linear_cka(Xs, Ys) - abs(linear_cka(Xs, Ys, unbiased=True)) > 0.2


@pytest.mark.parametrize("unbiased", [False, True])
def test_cka_feature_and_gram_paths_agree(unbiased):
    X, Y = _rng_data(n=30, p=5, seed=10), _rng_data(n=30, p=20, seed=11)
    Y[:, :5] += X
    narrow = linear_cka(X, Y, unbiased=unbiased)              # p, q <= n: feature space
    wide = linear_cka(X, torch.cat([Y, torch.zeros(30, 20, dtype=torch.float64)], 1),
                      unbiased=unbiased)                       # q > n (zero columns): Gram matrices
    assert narrow == pytest.approx(wide, abs=1e-12)
    if not unbiased:  # and the textbook formula on centred Gram matrices
        H = torch.eye(30, dtype=torch.float64) - 1 / 30
        Kc, Lc = H @ X @ X.T @ H, H @ Y @ Y.T @ H
        assert narrow == pytest.approx(float((Kc * Lc).sum() / (Kc.norm() * Lc.norm())), abs=1e-12)


def test_cka_bad_input_raises():
    X = _rng_data(n=10, p=3)
    with pytest.raises(ValueError, match="same examples"):
        linear_cka(X, X[:9])
    with pytest.raises(ValueError, match="n_examples, n_features"):
        linear_cka(X[:, 0], X[:, 0])
    with pytest.raises(ValueError, match="at least 4"):
        linear_cka(X[:3], X[:3], unbiased=True)
    with pytest.raises(ValueError, match="constant"):
        linear_cka(torch.ones(10, 3), X)


def test_cka_table_flattens_and_matches_reference():
    torch.manual_seed(0)
    a, b = models.resnet("resnet18", num_classes=3, in_channels=1, width=4), \
        models.resnet("resnet18", num_classes=3, in_channels=1, width=4)
    x = torch.randn(16, 1, 8, 8)
    df = probes.cka_table({"ref": a, "other": b}, "ref", x)
    assert list(df.columns) == ["method", "layer", "cka"] and len(df) == 2 * len(a.blocks)
    assert np.allclose(df[df.method == "ref"].cka, 1.0)
    feats_a, feats_b = a.eval().features(x), b.eval().features(x)
    expected = linear_cka(feats_b[3].flatten(1), feats_a[3].flatten(1))
    assert df[(df.method == "other") & (df.layer == 4)].cka.item() == pytest.approx(expected, abs=1e-9)


# -------------------------------------------------------------------- gradient cosine
def _mlp_batch(depth=3, seed=0):
    torch.manual_seed(seed)
    net = models.mlp(depth=depth, width=16, in_dim=10, num_classes=4)
    x, y = torch.randn(32, 10), torch.randint(4, (32,))
    return net, x, y


def _cos(a, b):
    return float(F.cosine_similarity(a.double(), b.double(), dim=0))


def test_backprop_cosine_is_one_and_greedy_last_layer_is_one():
    net, x, y = _mlp_batch()
    assert gradient_cosine(methods.build(net, "backprop"), x, y) == pytest.approx([1.0] * 3, abs=1e-6)
    cos = gradient_cosine(methods.build(net, "greedy"), x, y)
    assert cos[-1] == pytest.approx(1.0, abs=1e-6)
    assert all(-1 <= c < 0.999 for c in cos[:-1])


def test_greedy_cosine_matches_independent_autograd():
    net, x, y = _mlp_batch(depth=2, seed=1)
    learner = methods.build(net, "greedy")
    b0 = list(net.blocks[0].parameters())
    # hand-built: block 0's local loss is its own auxiliary head on its output
    local = torch.autograd.grad(F.cross_entropy(learner.heads[0](net.blocks[0](x)), y), b0)
    true = torch.autograd.grad(F.cross_entropy(net.head(net.blocks[1](net.blocks[0](x))), y), b0)
    expected = _cos(torch.cat([g.flatten() for g in local]), torch.cat([g.flatten() for g in true]))
    assert gradient_cosine(learner, x, y)[0] == pytest.approx(expected, abs=1e-9)


def test_overlapping_inner_block_gets_the_sum_of_two_windows():
    net, x, y = _mlp_batch(depth=3, seed=2)
    learner = methods.build(net, "overlapping")
    p1 = list(net.blocks[1].parameters())
    h0 = net.blocks[0](x).detach()
    w0 = F.cross_entropy(learner.heads[0](net.blocks[1](net.blocks[0](x))), y)  # window [0, 1]
    w1 = F.cross_entropy(net.head(net.blocks[2](net.blocks[1](h0))), y)         # window [1, 2]
    local = torch.autograd.grad(w0 + w1, p1)
    true = torch.autograd.grad(net.loss(net(x), y), p1)
    expected = _cos(torch.cat([g.flatten() for g in local]), torch.cat([g.flatten() for g in true]))
    cos = gradient_cosine(learner, x, y)
    assert cos[1] == pytest.approx(expected, abs=1e-9)
    assert cos[2] == pytest.approx(1.0, abs=1e-6)  # the last block only sees the final loss


def test_gradient_cosine_leaves_grads_and_batchnorm_stats_alone():
    torch.manual_seed(3)
    net = models.resnet("resnet18", num_classes=3, in_channels=1, width=4)
    learner = methods.build(net, "chunked-2")
    x, y = torch.randn(8, 1, 8, 8), torch.randint(3, (8,))
    sum(learner.losses(x, y)).backward()
    grads = [p.grad.clone() for p in learner.parameters()]
    buffers = [b.clone() for b in learner.buffers()]
    cos = gradient_cosine(learner, x, y)
    assert len(cos) == len(net.blocks) and all(np.isfinite(cos))
    assert cos[-1] == pytest.approx(1.0, abs=1e-5)  # chunk 2's last block: true loss, same input
    assert all(torch.equal(p.grad, g) for p, g in zip(learner.parameters(), grads))
    assert all(torch.equal(b, s) for b, s in zip(learner.buffers(), buffers))


def test_recorder_in_training_loop(tmp_path):
    from paper_repro import data, train
    d = data.load("digits")
    cfg = train.TrainConfig(model="mlp", method="greedy", steps=6, batch_size=16, progress=False,
                            model_kwargs=dict(depth=3, width=16))
    df = probes.gradient_similarity_runs(cfg, ["greedy", "backprop"], [0], every=3, data=d)
    assert set(df.step) == {1, 3, 6} and set(df.layer) == {1, 2, 3}
    assert np.allclose(df[df.method == "backprop"].cosine, 1.0, atol=1e-5)
    assert np.allclose(df[(df.method == "greedy") & (df.layer == 3)].cosine, 1.0, atol=1e-5)
    claims = probes.gradient_claims(df)
    assert list(claims.layer) == [1, 2, 3] and claims.measured.iloc[-1] == pytest.approx(1.0, abs=1e-4)
    with pytest.raises(ValueError, match="every"):
        probes.GradientCosineRecorder(0)


# ------------------------------------------------------------------ plots and the rest
def test_filter_mosaic_layout():
    w = torch.arange(64 * 3 * 3 * 3, dtype=torch.float32).reshape(64, 3, 3, 3)
    img = probes.filter_mosaic(w)
    assert img.shape == (8 * 4 + 1, 8 * 4 + 1, 3) and img.min() >= 0 and img.max() <= 1
    # filter 9 (row 1, col 1), channel 0, pixel (0, 0) is that filter's minimum -> 0
    assert img[1 + 4, 1 + 4, 0] == 0.0
    with pytest.raises(ValueError, match="conv weights"):
        probes.filter_mosaic(torch.zeros(4, 2, 3, 3))


def test_random_label_runs_counts_epochs():
    from paper_repro import data, train
    d = data.load("digits", max_train=200, max_test=50)
    cfg = train.TrainConfig(model="mlp", batch_size=64, progress=False, model_kwargs=dict(depth=2, width=16))
    df = probes.random_label_runs(cfg, ["backprop", "greedy"], [0], epochs=2, data=d)
    assert list(df[df.method == "greedy"].epoch) == [0, 1, 2]
    assert df.train_acc.between(0, 1).all()
    shuffled = d.with_random_labels(0)
    net = train.build_learner(cfg, shuffled).net  # seed 0: the same initial net
    assert df[(df.method == "backprop") & (df.epoch == 0)].train_acc.item() == pytest.approx(
        train.evaluate(net, shuffled, "train", None)[1])


def test_plots_run(tmp_path):
    df = pd.DataFrame({"method": ["greedy"] * 4, "seed": [0, 0, 1, 1], "step": [1, 2, 1, 2],
                       "layer": [1, 1, 1, 1], "cosine": [0.1, 0.2, 0.15, 0.25]})
    fig = similarity_plots.plot_gradient_cosine(df, "t")
    assert save_figure(fig, "g", tmp_path).is_file()
    cka = pd.DataFrame({"method": ["a", "a", "b", "b"], "layer": [1, 2, 1, 2], "cka": [1, 1, 0.5, 0.4]})
    assert save_figure(similarity_plots.plot_cka_heatmap(cka, "t"), "c", tmp_path).is_file()


def test_initial_net_is_the_common_start_and_filter_grids_plot(tmp_path):
    from paper_repro import data, train
    d = data.load("digits", max_train=100, max_test=20)
    cfg = train.TrainConfig(model="resnet18", batch_size=8, steps=1, progress=False, model_kwargs=dict(width=64))
    init = probes.initial_net(cfg, d)
    for method in ("greedy", "chunked-3"):  # auxiliary heads are built after the net
        net = train.build_learner(dataclasses.replace(cfg, method=method), d).net
        assert torch.equal(probes.first_conv(net).weight, probes.first_conv(init).weight)
    weight = probes.first_conv(init).weight
    fig = similarity_plots.plot_filter_weights({"a": weight, "b": weight}, "t", init=weight)
    assert len(fig.axes) == 6 and save_figure(fig, "f", tmp_path).is_file()  # initialisation, a, b x 2 rows
    expected = probes.low_frequency_fraction(weight).mean()
    assert fig.axes[0].get_title() == f"initialisation\nlow-freq {expected:.2f}"
    assert fig.axes[1].get_title() == f"a\nlow-freq {expected:.2f}"
    assert fig.axes[3].get_title() == ""  # no change panel for the initialisation itself
    assert fig.axes[4].get_title() == "change since init\nlow-freq nan"  # a == init: no change at all


def test_random_label_claims_per_model():
    df = pd.DataFrame({"model": ["m1"] * 4 + ["m2"] * 2, "method": ["backprop", "greedy"] * 3,
                       "seed": 0, "epoch": [0, 0, 1, 1, 0, 0], "train_acc": [.1, .1, .9, .3, .1, .2]})
    c = probes.random_label_claims(df)
    assert list(c.model) == ["m1", "m1", "m2", "m2"] and list(c.epochs) == [1, 1, 0, 0]
    assert list(c.mean_acc) == [0.9, 0.3, 0.1, 0.2] and list(c.paper_acc_100_epochs) == [0.78, 0.28] * 2
    assert list(c.seeds) == [1] * 4 and c.sd_over_seeds.isna().all()  # one seed: no spread over seeds
    c = probes.random_label_claims(df, last_fraction=1.0)  # every trained epoch: epoch 0 is the initial net
    assert list(c.mean_acc[:2]) == [0.9, 0.3] and list(c.sd_over_epochs[:2]) == [0.0, 0.0]
