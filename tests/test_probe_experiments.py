"""The filter-structure number, the resumable unit store, the long probing experiments at tiny
sizes (filters + CKA, random labels over seeds, the gradient-cosine ablation) and their summaries."""
import dataclasses
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn as nn

from paper_repro import data as data_mod
from paper_repro import methods, models, settings
from paper_repro.plots import save_figure
from paper_repro.plots import similarity as similarity_plots
from paper_repro.probes import PAPER_GREEDY_COSINE, ablation, experiments, filters, gradient_cosine, random_label_claims
from paper_repro.probes import run as probe_run
from paper_repro.probes.store import UnitStore
from paper_repro.settings.types import (AblationSettings, AblationVariant, FeatureSettings, GradientSettings,
                                        RandomLabelRun, RandomLabelSettings)


# ------------------------------------------------------------------ filter structure
def _wave(k, fx, fy, channels=3):
    """A k x k cosine with fx, fy cycles across the filter, the same on every channel."""
    i, j = np.meshgrid(np.arange(k), np.arange(k), indexing="ij")
    w = np.cos(2 * np.pi * (fx * i + fy * j) / k)
    return torch.tensor(np.broadcast_to(w, (channels, k, k)).copy())


def _dft_fraction(w, cutoff):
    """Independent computation: the 2-D DFT as explicit sums over pixels, bins by their radius."""
    c, k, _ = w.shape
    x = np.arange(k)
    total = low = 0.0
    for u in range(k):
        for v in range(k):
            basis = np.exp(-2j * np.pi * (u * x[:, None] + v * x[None, :]) / k)
            power = sum(abs((w[ch] * basis).sum()) ** 2 for ch in range(c))
            fu, fv = (u if u <= k // 2 else u - k) / k, (v if v <= k // 2 else v - k) / k
            total += power
            low += power if math.hypot(fu, fv) <= cutoff + 1e-12 else 0.0
    return low / total


def test_low_frequency_fraction_on_hand_made_filters():
    const = torch.ones(3, 7, 7)
    slow, fast = _wave(7, 1, 0), _wave(7, 3, 0)        # radius 1/7 (low) and 3/7 (high) cycles per pixel
    mix = const + fast                                   # DC power 49^2 a^2, the +-3 bins 2 (49/2)^2 b^2
    w = torch.stack([const, slow, fast, mix, 5.0 * mix])
    frac = filters.low_frequency_fraction(w)
    assert frac[:3] == pytest.approx([1.0, 1.0, 0.0], abs=1e-12)
    assert frac[3] == pytest.approx(1 / (1 + 0.5), abs=1e-12)   # a = b = 1: 1 / (1 + 1/2)
    assert frac[4] == pytest.approx(frac[3], abs=1e-12)         # scale does not matter
    g = torch.Generator().manual_seed(0)
    for k in (3, 7):
        for cutoff in (0.2, 0.25, 0.4):
            r = torch.randn(2, 3, k, k, generator=g, dtype=torch.float64)
            got = filters.low_frequency_fraction(r, cutoff)
            assert got == pytest.approx([_dft_fraction(r[i].numpy(), cutoff) for i in range(2)], abs=1e-10)


def test_noise_reference_and_gabor_vs_white_noise():
    # 7x7 bins within 0.25 cycles/pixel: DC, (+-1, 0), (0, +-1), (+-1, +-1) -> 9 of 49
    assert filters.noise_low_frequency_fraction(7) == pytest.approx(9 / 49)
    assert filters.noise_low_frequency_fraction(3) == pytest.approx(1 / 9)  # only DC: 1/3 > 0.25
    noise = torch.randn(4000, 3, 7, 7, generator=torch.Generator().manual_seed(1))
    assert filters.low_frequency_fraction(noise).mean() == pytest.approx(9 / 49, abs=0.01)
    y, x = np.mgrid[-3:4, -3:4].astype(float)           # an oriented Gabor: Gaussian x slow cosine
    gabor = np.exp(-(x ** 2 + y ** 2) / (2 * 1.5 ** 2)) * np.cos(2 * np.pi * 0.08 * (x + 0.5 * y))
    gabor = torch.tensor(np.stack([gabor, 0.5 * gabor, -gabor]))[None]
    assert filters.low_frequency_fraction(gabor)[0] > 0.85
    checker = torch.tensor((-1.0) ** np.add.outer(np.arange(8), np.arange(8)))[None, None]
    assert filters.low_frequency_fraction(checker)[0] == pytest.approx(0.0, abs=1e-12)


def test_low_frequency_fraction_bad_input_and_zero_filter():
    with pytest.raises(ValueError, match="square conv weights"):
        filters.low_frequency_fraction(torch.zeros(2, 3, 5, 4))
    with pytest.raises(ValueError, match="cutoff"):
        filters.low_frequency_fraction(torch.ones(1, 1, 3, 3), cutoff=0.9)
    assert np.isnan(filters.low_frequency_fraction(torch.zeros(1, 3, 3, 3))[0])


def test_filter_structure_table():
    init = torch.randn(8, 3, 7, 7, generator=torch.Generator().manual_seed(2))
    smooth = init + 10 * torch.ones(8, 3, 7, 7)
    t = filters.filter_structure({"init": init, "smooth": smooth}, init).set_index("method")
    expected = filters.low_frequency_fraction(init)
    assert t.loc["init", "low_freq_mean"] == pytest.approx(expected.mean())
    assert t.loc["init", "low_freq_sd"] == pytest.approx(expected.std())
    assert np.isnan(t.loc["init", "change_low_freq_mean"])       # no change at all
    assert t.loc["smooth", "change_low_freq_mean"] == pytest.approx(1.0)
    assert t.loc["smooth", "low_freq_mean"] > t.loc["init", "low_freq_mean"]


def test_imagenet_stem_has_64_filters_of_7x7_stride_2():
    S = settings.similarity_settings("features", "cpu")
    net = models.build(S.model, **S.model_kwargs)
    conv = filters.first_conv(net)
    assert conv.weight.shape == (64, 3, 7, 7) and conv.stride == (2, 2)
    assert S.dataset == "cifar10" and "max_train" not in S.data_kwargs   # the full training set


# ------------------------------------------------------------------------ unit store
def test_unit_store_round_trip_atomic_and_names(tmp_path):
    store = UnitStore(tmp_path / "exp")
    assert not store.done("a") and store.names() == []
    df = pd.DataFrame({"x": [1, 2], "y": [0.5, float("nan")]})
    store.save("a", {"v": np.float32(1.5), "rows": df}, {"w": torch.arange(3.0)})
    store.save_tensors("nets/a", {"big": torch.ones(2)})
    assert store.done("a") and store.names() == ["a"]
    rec = store.load("a")
    assert rec["v"] == 1.5 and pd.DataFrame(rec["rows"]).equals(df.astype({"y": float}))
    assert torch.equal(store.tensors("a")["w"], torch.arange(3.0))
    assert torch.equal(store.tensors("nets/a")["big"], torch.ones(2))
    assert not [p for p in (tmp_path / "exp").rglob("*.tmp")]
    store.write_table("summary", df)
    assert pd.read_csv(tmp_path / "exp" / "summary.csv").shape == (2, 2)
    for bad in ("../x", "a b", "a/b/c", ""):
        with pytest.raises(ValueError, match="unit name"):
            store.done(bad)
    with pytest.raises(ValueError, match="has not been saved"):
        store.load("b")
    with pytest.raises(TypeError, match="cannot save a set"):
        store.save("c", {"s": {1}})
    assert not store.done("c")


# ------------------------------------------------------------------- filters + CKA runs
def _features_settings():
    return FeatureSettings(dataset="digits", data_kwargs={}, model="resnet18",
                           model_kwargs=dict(small_input=False, width=4), steps=2, batch_size=16, lr=1e-3,
                           cka_examples=40, eval_examples=40, seeds=[0], methods=["backprop", "greedy"])


def test_run_features_saves_units_tables_and_resumes(tmp_path, monkeypatch):
    S, d = _features_settings(), data_mod.load("digits")
    tables = experiments.run_features(S, d, tmp_path, log=lambda s: None)
    assert set(tables) == {"filter_structure", "filter_summary", "training", "cka", "cka_summary"}
    assert list(tables["filter_structure"].method) == ["init", "backprop", "greedy"]
    assert set(tables["filter_structure"].seed) == {0}
    assert tables["cka"][tables["cka"].method == "backprop"].cka.tolist() == pytest.approx([1.0] * 9)
    loaded = experiments.load_features(tmp_path)
    assert list(loaded["stems"]) == ["backprop", "greedy"] and loaded["init"].shape == (4, 1, 7, 7)
    assert loaded["seeds"] == [0] and loaded["seed"] == 0
    assert not torch.equal(loaded["stems"]["backprop"], loaded["init"])
    pd.testing.assert_frame_equal(loaded["cka"], tables["cka"], check_exact=False)

    def no_training(*a, **k):
        raise AssertionError("a finished unit was trained again")
    monkeypatch.setattr(experiments.train_mod, "train", no_training)
    again = experiments.run_features(S, d, tmp_path, log=lambda s: None)
    pd.testing.assert_frame_equal(again["filter_structure"], tables["filter_structure"])
    with pytest.raises(ValueError, match="other settings.*steps"):
        experiments.run_features(dataclasses.replace(S, steps=3), d, tmp_path, log=lambda s: None)


def test_features_per_seed_spread_and_cka_outlives_the_nets(tmp_path):
    """Each seed starts from its own initial net; the summary is the mean over seeds with its
    min and max; a seed's CKA, saved once, is still there when its nets are gone (a new clone)."""
    S, d = dataclasses.replace(_features_settings(), seeds=[0, 1]), data_mod.load("digits")
    tables = experiments.run_features(S, d, tmp_path, log=lambda s: None, seeds=[0])
    assert set(tables["filter_structure"].seed) == {0}
    experiments.run_features(S, d, tmp_path, log=lambda s: None)   # adds seed 1 to the same folder
    loaded = experiments.load_features(tmp_path)
    assert loaded["seeds"] == [0, 1]
    assert not torch.equal(experiments.load_features(tmp_path, seed=1)["init"], loaded["init"])
    fs = loaded["filter_structure"]
    for method, row in loaded["filter_summary"].set_index("method").iterrows():
        per_seed = fs[fs.method == method].low_freq_mean
        assert row.seeds == 2
        assert row.low_freq_mean == pytest.approx(per_seed.mean())
        assert (row.low_freq_mean_min, row.low_freq_mean_max) == pytest.approx((per_seed.min(), per_seed.max()))
    assert set(loaded["cka"].seed) == {0, 1} and (loaded["cka_summary"].seeds == 2).all()
    shutil.rmtree(tmp_path / "nets")
    again = experiments.summarise_features(S, d, tmp_path)
    pd.testing.assert_frame_equal(again["cka"], loaded["cka"], check_exact=False)
    with pytest.raises(ValueError, match="seed 5 .* not saved"):
        experiments.load_features(tmp_path, seed=5)


# ---------------------------------------------------------------------- random labels
def _random_label_settings():
    return RandomLabelSettings(dataset="digits", seeds=[0, 1], methods=["backprop", "greedy"], runs=[
        RandomLabelRun(model="mlp", label="MLP 2x16", model_kwargs=dict(depth=2, width=16),
                       data_kwargs=dict(max_train=200), epochs=3, batch_size=50, lr=1e-3)])


def test_run_random_labels_units_resume_and_summary(tmp_path, monkeypatch):
    S = _random_label_settings()
    tables = experiments.run_random_labels(S, None, tmp_path, log=lambda s: None, methods=["backprop"])
    assert UnitStore(tmp_path).names() == ["mlp_backprop_s0", "mlp_backprop_s1"]
    tables = experiments.run_random_labels(S, None, tmp_path, log=lambda s: None)
    assert len(UnitStore(tmp_path).names()) == 4
    df = tables["random_labels"]
    assert set(df.epoch) == {0, 1, 2, 3} and set(df.n_train) == {200}
    summary = tables["random_label_summary"].set_index("method")
    last = df[df.epoch == 3].groupby(["method", "seed"]).train_acc.first()   # 10% of 3 epochs -> the last one
    assert summary.loc["greedy", "mean_acc"] == pytest.approx(last["greedy"].mean(), abs=1e-3)
    assert summary.loc["greedy", "sd_over_seeds"] == pytest.approx(last["greedy"].std(), abs=1e-3)
    assert summary.loc["greedy", "seeds"] == 2
    monkeypatch.setattr(experiments, "random_label_runs", lambda *a, **k: (_ for _ in ()).throw(AssertionError))
    experiments.run_random_labels(S, None, tmp_path, log=lambda s: None)   # everything done: nothing trains
    S = dataclasses.replace(S, runs=[dataclasses.replace(S.runs[0], epochs=4)])
    with pytest.raises(ValueError, match="other settings"):
        experiments.run_random_labels(S, None, tmp_path, log=lambda s: None)


def test_random_label_claims_last_tenth_of_epochs_and_seeds():
    rows = []
    for seed, offset in ((0, 0.0), (1, 0.1), (2, 0.2)):
        for epoch in range(21):  # 20 epochs: the last 10% is epochs 19 and 20
            acc = 0.3 + offset + (0.05 if epoch == 20 else 0.0) if epoch >= 19 else 0.9
            rows.append({"method": "greedy", "seed": seed, "epoch": epoch, "train_acc": acc})
    c = random_label_claims(pd.DataFrame(rows)).iloc[0]
    per_seed = np.array([0.325, 0.425, 0.525])
    assert (c.epochs, c.last_epochs, c.seeds) == (20, 2, 3)
    assert c.mean_acc == pytest.approx(per_seed.mean(), abs=1e-3)
    assert c.sd_over_seeds == pytest.approx(per_seed.std(ddof=1), abs=1e-3)
    assert c.sd_over_epochs == pytest.approx(0.025, abs=1e-3)         # population sd of (x, x + 0.05)
    assert (c.min_acc, c.max_acc) == (pytest.approx(0.3), pytest.approx(0.55))
    assert c.paper_acc_100_epochs == 0.28
    with pytest.raises(ValueError, match="last_fraction"):
        random_label_claims(pd.DataFrame(rows), last_fraction=0)


# ---------------------------------------------------------------- gradient-cosine ablation
def test_ablation_net_heads_and_classifier_block():
    torch.manual_seed(0)
    net = ablation.ablation_net(4, 8, 6, 3, heads="deep")
    hidden_layers = [sum(isinstance(m, nn.Linear) for m in net.make_head(i).modules()) - 1 for i in range(3)]
    assert hidden_layers == [3, 2, 1] and isinstance(net.head, nn.Linear)  # blocks after i, then the classifier
    clf = ablation.ablation_net(4, 8, 6, 3, last_block="classifier")
    assert len(clf.blocks) == 4 and isinstance(clf.blocks[-1], nn.Linear) and isinstance(clf.head, nn.Identity)
    x, y = torch.randn(5, 6), torch.randint(3, (5,))
    h = x
    for b in clf.blocks:
        h = b(h)
    assert torch.equal(clf(x), h)                                     # the last block's output is the logits
    deep_clf = ablation.ablation_net(4, 8, 6, 3, heads="deep", last_block="classifier")
    assert [sum(isinstance(m, nn.Linear) for m in deep_clf.make_head(i).modules()) for i in range(3)] == [3, 2, 1]
    cos = gradient_cosine(methods.build(clf, "greedy"), x, y)
    assert cos[-1] == pytest.approx(1.0, abs=1e-6) and len(cos) == 4
    for bad in (dict(heads="wide"), dict(last_block="head")):
        with pytest.raises(ValueError, match="must be"):
            ablation.ablation_net(4, 8, 6, 3, **bad)


def _ablation_settings():
    return GradientSettings(dataset="digits", data_kwargs=dict(max_train=300), depth=3, width=16, steps=6, every=3,
                            batch_size=32, lr=1e-3, seeds=[0], methods=["greedy"],
                            ablation=AblationSettings(seeds=[0, 1], variants=[
                                AblationVariant(name="base", change="none"),
                                AblationVariant(name="fixed_probe", probe_examples=64),
                                AblationVariant(name="backprop_path", trajectory="backprop", seeds=[0]),
                                AblationVariant(name="classifier_last", last_block="classifier", seeds=[0])]))


def test_fixed_probe_measures_on_the_fixed_examples_and_backprop_path_trains_heads():
    S, d = _ablation_settings(), data_mod.load("digits", max_train=300)
    V = ablation.variant_settings(S, S.ablation.variants[1])
    rows, info = ablation.ablation_unit(V, 0, d)
    torch.manual_seed(0)  # the same initial net: step 1's cosine on the fixed set, computed directly
    net = ablation.ablation_net(3, 16, 64, 10)
    px, py = d.batch("train", ablation.train_mod.train_eval_indices(d, 64))
    expected = gradient_cosine(methods.build(net, "greedy"), px, py)
    assert rows[rows.step == 1].cosine.tolist() == pytest.approx(expected, abs=1e-9)
    assert sorted(set(rows.step)) == [1, 3, 6] and np.isfinite(info["final_loss"])

    torch.manual_seed(0)
    net = ablation.ablation_net(3, 16, 64, 10)
    greedy = methods.build(net, "greedy")
    before = [p.clone() for p in greedy.heads[0].parameters()]
    opt = torch.optim.Adam([p for h in greedy.heads[:-1] for p in h.parameters()], lr=0.1)
    probe = ablation.CosineProbe(greedy, every=1, head_optimizer=opt)
    x, y = d.batch("train", torch.arange(32))
    blocks_before = [p.clone() for p in net.blocks.parameters()]
    probe(1, methods.build(net, "backprop"), x, y)
    assert any(not torch.equal(a, b) for a, b in zip(before, greedy.heads[0].parameters()))
    assert all(torch.equal(a, b) for a, b in zip(blocks_before, net.blocks.parameters()))  # heads only
    assert len(probe.rows) == 3


def test_run_ablation_resumes_and_summarises(tmp_path, monkeypatch):
    S = _ablation_settings()
    tables = ablation.run_ablation(S, None, tmp_path, log=lambda s: None, seeds=[0])
    assert UnitStore(tmp_path).names() == ["backprop_path_s0", "base_s0", "classifier_last_s0", "fixed_probe_s0"]
    tables = ablation.run_ablation(S, None, tmp_path, log=lambda s: None)
    assert len(UnitStore(tmp_path).names()) == 6
    summary = tables["ablation_summary"].set_index("variant")
    assert summary.loc["base", "seeds"] == 2 and summary.loc["backprop_path", "seeds"] == 1
    assert summary.loc["base", "layer_3"] == pytest.approx(1.0, abs=1e-6)        # the last block: exact
    layers = tables["ablation_layers"]
    base = tables["ablation_cosine"].query("variant == 'base'")
    tail = base[base.step >= base.step.max() * 0.8].groupby(["layer", "seed"]).cosine.mean().groupby("layer")
    assert layers.query("variant == 'base'").measured.tolist() == pytest.approx(tail.mean().round(3).tolist())
    fig = similarity_plots.plot_ablation(layers, "t", PAPER_GREEDY_COSINE)
    assert len(fig.axes[0].lines) >= 4 and save_figure(fig, "ablation", tmp_path).is_file()
    monkeypatch.setattr(ablation, "ablation_unit", lambda *a, **k: (_ for _ in ()).throw(AssertionError))
    ablation.run_ablation(S, None, tmp_path, log=lambda s: None)
    with pytest.raises(ValueError, match="other settings"):
        ablation.run_ablation(dataclasses.replace(S, steps=7), None, tmp_path, log=lambda s: None)
    with pytest.raises(TypeError, match="optimiser"):   # a misspelt change fails where it is written
        AblationVariant(name="x", optimiser="sgd")
    with pytest.raises(ValueError, match="no ablation"):
        ablation.run_ablation(dataclasses.replace(S, ablation=None), None, tmp_path, log=lambda s: None)


def test_a_variant_changes_only_what_it_sets():
    S = _ablation_settings()
    V = ablation.variant_settings(S, AblationVariant(name="sgd", optimizer="sgd", lr=0.01, width=8))
    assert (V.optimizer, V.lr, V.width) == ("sgd", 0.01, 8)
    assert (V.depth, V.steps, V.data_kwargs, V.seeds) == (3, 6, dict(max_train=300), [0, 1])   # ablation's seeds
    assert (V.probe_examples, V.trajectory, V.heads, V.last_block) == (None, "greedy", "linear", "block")


def test_the_committed_cpu_units_were_saved_with_the_cpu_settings():
    """Resuming the committed cpu experiments (``python -m paper_repro.probes.run``) compares each
    saved unit's settings with these: they must be the ones its files record."""
    root = Path(__file__).resolve().parent.parent / "results" / "similarity"
    G = settings.similarity_settings("gradient", "cpu")
    units = UnitStore(root / "ablation_cpu")
    for variant in G.ablation.variants:
        V = ablation.variant_settings(G, variant)
        saved = [units.load(f"{variant.name}_s{seed}")["settings"] for seed in V.seeds]
        assert saved == [ablation._unit_settings(V)] * len(V.seeds), variant.name
    F = settings.similarity_settings("features", "cpu")
    features = UnitStore(root / "features_cpu")
    for seed in F.seeds:
        assert features.load(f"init_s{seed}")["settings"] == experiments._unit_settings(F)
    R = settings.similarity_settings("random_labels", "cpu")
    labels = UnitStore(root / "random_labels_cpu")
    for run in R.runs:
        for seed in R.seeds:
            for method in R.methods:
                name = f"{experiments.run_label(run)}_{method}_s{seed}"
                assert labels.load(name)["settings"] == experiments._run_settings(run), name


def test_paper_distance_by_hand():
    inside = {1: 0.27, 2: 0.45, 3: 0.7, 4: 0.97, 5: 1.0}
    assert ablation.paper_distance(inside) == 0.0
    # layer 1 is 0.1 above 0.3, layer 4 is 0.25 below 0.95: (0.1 + 0.25) / 5
    assert ablation.paper_distance({**inside, 1: 0.4, 4: 0.7}) == pytest.approx(0.35 / 5)
    # three layers align with the paper's top three (3, 4, 5)
    assert ablation.paper_distance({1: 0.6, 2: 0.9, 3: 1.0}) == pytest.approx(0.05 / 3)


# ---------------------------------------------------------------------------- command
def test_command_runs_a_restricted_experiment_and_refuses_bad_options(tmp_path, capsys):
    assert probe_run.main(["random_labels", "--profile", "quick", "--results", str(tmp_path), "--nets", "mlp",
                           "--methods", "backprop", "--seeds", "0"]) == 0
    root = probe_run.experiment_dir(tmp_path, "random_labels", "quick")
    assert UnitStore(root).names() == ["mlp_backprop_s0"]
    assert json.loads((root / "mlp_backprop_s0.json").read_text())["epochs"] == 30
    assert "random_label_summary" in capsys.readouterr().out
    with pytest.raises(ValueError, match="features experiment takes no --methods"):
        probe_run.run("features", "quick", None, tmp_path, methods=["backprop"])
    with pytest.raises(ValueError, match="unknown experiment"):
        probe_run.experiment_dir(tmp_path, "filters", "cpu")
