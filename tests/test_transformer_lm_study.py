"""The byte-level Transformer LM study: a real LM on the hashed standard-library corpus, its
pilot, and the critical-path ratios printed before it sweeps."""
import re

import pytest

from paper_repro import corpora, methods, models, settings, sweep


@pytest.mark.parametrize("study, profile", [("transformer-lm", "cpu"), ("transformer-lm-pilot", "cpu"),
                                            ("transformer-lm", "full")])
def test_the_lm_grids_train_a_real_lm_on_the_hashed_corpus(study, profile):
    grid = settings.compute_grid(study, profile)
    kw, dk = grid.model_kwargs, grid.data_kwargs
    assert grid.model == "transformer" and kw["d_model"] >= 64 and dk["seq_len"] >= 64
    assert dk["corpus"] == "stdlib" and dk["corpus_sha256"] == corpora.STDLIB_SHA256
    # grid.json records the corpus's source and hash
    assert f"Python {corpora.STDLIB_PYTHON}" in grid.description and corpora.STDLIB_SHA256[:12] in grid.description
    assert grid.to_dict()["data_kwargs"]["corpus_sha256"] == corpora.STDLIB_SHA256


def test_the_headline_grid_and_its_pilot():
    cpu, pilot = settings.compute_grid("transformer-lm", "cpu"), settings.compute_grid("transformer-lm-pilot", "cpu")
    assert {"backprop", "greedy", "overlapping", "chunked-2"} <= set(cpu.methods)
    assert len(cpu.batch_sizes) >= 6 and len(cpu.lrs) >= 3 and len(cpu.seeds) >= 2
    assert cpu.stop_loss is not None and cpu.stop_overshoot > 0     # runs go on past the lowest target
    targets = settings.analysis_settings("transformer-lm", "cpu")["targets"]
    assert min(targets) == cpu.stop_loss
    # the pilot: the same net and text, backprop and greedy at three batch sizes, one seed, no early stop
    assert (pilot.model, pilot.model_kwargs, pilot.data_kwargs) == (cpu.model, cpu.model_kwargs, cpu.data_kwargs)
    assert pilot.methods == ["backprop", "greedy"] and len(pilot.batch_sizes) == 3
    assert pilot.seeds == [0] and len(pilot.lrs) == 1 and pilot.stop_loss is None
    assert set(pilot.batch_sizes) <= set(cpu.batch_sizes)


def test_one_local_module_per_pre_ln_layer():
    kw = settings.compute_grid("transformer-lm", "cpu").model_kwargs
    net = models.transformer_lm(vocab_size=256, seq_len=64, **kw)
    layers = [b[-1] if hasattr(b, "__getitem__") else b for b in net.blocks]
    assert len(layers) == kw["n_layers"] and all(isinstance(l, models.TransformerLayer) for l in layers)
    assert methods.build(net, "greedy").num_modules == kw["n_layers"]
    assert methods.build(models.transformer_lm(vocab_size=256, seq_len=64, **kw), "chunked-2").num_modules == 2


def test_the_sweep_prints_each_methods_critical_path_ratio_first():
    grid = settings.compute_grid("transformer-lm", "cpu")
    line = sweep.cost_line(grid)
    ratios = dict((m, float(r)) for m, r in re.findall(r"(greedy|overlapping|chunked-2) ([\d.]+)x", line))
    assert set(ratios) == {"greedy", "overlapping", "chunked-2"}
    assert ratios["greedy"] > ratios["chunked-2"] > 1


def test_the_quick_profile_stays_small():
    grid = settings.compute_grid("transformer-lm", "quick")
    grid.validate()
    windows = sum(grid.steps_for(b) * b * len(grid.lrs_for(b)) for b in grid.batch_sizes) * len(grid.seeds)
    assert len(grid.points()) <= 12 and windows * len(grid.methods) <= 5000
