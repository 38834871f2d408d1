"""Every setting of every study and profile, in one place.

Profiles: ``quick`` (offline, minutes on a 2-core CPU: what the notebook tests run),
``cpu`` (an afternoon on a 2-core CPU; the committed ``results/`` come from it) and ``full``
(paper scale, GPU servers). Studies and what their settings are:

==========================================  ============================  =========================
study                                       function                      returns
==========================================  ============================  =========================
mlp, mlp-deep, transformer, resnet,         :func:`compute_grid`          a sweep ``Grid``
resnet-imagenet, transformer-lm,
transformer-lm-pilot
mlp-modules                                 :func:`module_grids`          ``{depth: Grid}``
quickstart                                  :func:`quickstart_config`     a ``TrainConfig``
gradient, features, random_labels           :func:`similarity_settings`   a ``GradientSettings``, ...
pipeline                                    :func:`pipeline_settings`     a ``PipelineSettings``
scaling                                     :func:`scaling_settings`      a ``ScalingSettings``
race                                        :func:`race_settings`         a ``RaceSettings``
==========================================  ============================  =========================

:func:`get` dispatches on the study name (and returns the same); :data:`STUDIES` lists every
study with its profiles. Notebook 04 also draws :func:`communication_settings` (a
``CommunicationSettings``, the same at every profile) and :func:`stored_pipeline_runs` (a
dict ``{run name: [record files]}``). The typed settings (``PipelineSettings``,
``CommunicationSettings``, ``ScalingSettings`` with its ``SimulatedModel``, and the similarity
studies' ``GradientSettings``, ``FeatureSettings`` and ``RandomLabelSettings``) are the frozen
dataclasses of :mod:`paper_repro.settings_types`, each field described there. Data folders are never set here: CIFAR-10, ImageNet and an LM1B-style text are
passed as ``data_dir`` by the caller (the offline defaults are sklearn digits and the pydoc
text corpus; the transformer-lm studies name the built-in ``stdlib`` corpus and its hash in
``data_kwargs``).
"""
from __future__ import annotations

import copy
import dataclasses

import numpy as np

from .settings_types import (AblationSettings, AblationVariant, CommunicationSettings, FeatureSettings,
                             GradientSettings, PipelineSettings, RaceSettings, RaceStrategy, RandomLabelRun,
                             RandomLabelSettings, ScalingSettings, SimulatedModel)
from .sweep.grid import Grid
from .train import TrainConfig

from .corpora import STDLIB_PYTHON, STDLIB_SHA256
from .names import COMPUTE_STUDIES, MODULES_STUDY, PROFILES, SIMILARITY_STUDIES  # noqa: F401  (settings.PROFILES, ...)
LOCAL = ["greedy", "overlapping", "chunked-2"]

# The byte-level LM studies' corpus: the pinned Python's standard library source
# (paper_repro.corpora), named by its hash so that a machine with other text says so.
STDLIB_TEXT = dict(corpus="stdlib", corpus_sha256=STDLIB_SHA256)
_STDLIB_NAME = f"Python {STDLIB_PYTHON}'s standard library source (12.1 MB, sha256 {STDLIB_SHA256[:12]})"


def pow2(lo: int, hi: int) -> list[int]:
    """Powers of two from ``2**lo`` to ``2**hi``."""
    return [2 ** k for k in range(lo, hi + 1)]


def loggrid(lo: float, hi: float, n: int) -> list[float]:
    """``n`` learning rates evenly spaced in log from ``lo`` to ``hi`` (3 significant digits)."""
    return [float(f"{v:.3g}") for v in np.geomspace(lo, hi, n)]


# --------------------------------------------------------------- compute-efficiency sweeps
_GRIDS = {
    # ---------------------------------------------------------------- quick (nbval)
    ("mlp", "quick"): dict(
        name="mlp_digits_quick", model="mlp", dataset="digits",
        model_kwargs=dict(depth=4, width=128), methods=["backprop"] + LOCAL,
        batch_sizes=[8, 32, 128, 512], lrs=[3e-3], seeds=[0, 1], steps=150, eval_examples=360,
        eval_every_examples=128, train_eval_examples=500,
        description="4x128 MLP on sklearn digits, 150 steps per point"),
    ("mlp-deep", "quick"): dict(
        name="mlp_deep_ln_digits_quick", model="mlp", dataset="digits",
        model_kwargs=dict(depth=8, width=64, layer_norm=True),
        methods=["backprop", "greedy", "chunked-2"], batch_sizes=[16, 64, 256], lrs=[3e-3], seeds=[0, 1],
        steps=100, eval_examples=360, eval_every_examples=128, train_eval_examples=500,
        description="8x64 MLP with LayerNorm on sklearn digits (64 inputs), 100 steps per point"),
    ("transformer", "quick"): dict(
        name="transformer_text_quick", model="transformer", dataset="text",
        model_kwargs=dict(d_model=32, n_layers=4, n_heads=2), data_kwargs=dict(seq_len=16),
        methods=["backprop", "greedy", "chunked-2"], batch_sizes=[4, 16, 64], lrs=[3e-3], seeds=[0, 1], steps=100,
        eval_examples=64, eval_every_examples=128, train_eval_examples=128,
        description="4-layer d=32 Transformer on 16-byte windows of pydoc text, 100 steps"),
    ("transformer-lm", "quick"): dict(
        name="transformer_lm_stdlib_quick", model="transformer", dataset="text",
        model_kwargs=dict(d_model=32, n_layers=4, n_heads=2), data_kwargs=dict(seq_len=64, **STDLIB_TEXT),
        methods=["backprop", "greedy", "chunked-2"], batch_sizes=[4, 16], lrs=[3e-3], seeds=[0, 1], steps=40,
        eval_examples=64, eval_every_examples=32, train_eval_examples=64,
        description=f"4-layer d=32 pre-LN Transformer LM on 64-byte windows of {_STDLIB_NAME}, 40 steps"),
    ("resnet", "quick"): dict(
        name="resnet_digits_quick", model="resnet18", dataset="digits", model_kwargs=dict(width=8),
        methods=["backprop", "greedy", "chunked-3"], batch_sizes=[8, 32, 128], lrs=[3e-3], seeds=[0, 1], steps=50,
        eval_examples=360, eval_every_examples=128, train_eval_examples=200,
        description="ResNet-18 (width 8) on sklearn digits, 50 steps"),
    # --------------------------------------------------------- cpu (an afternoon)
    ("mlp", "cpu"): dict(
        name="mlp_cifar10_16px_cpu", model="mlp", dataset="cifar10",
        model_kwargs=dict(depth=6, width=256), data_kwargs=dict(max_test=2000, image_size=16),
        methods=["backprop", "greedy", "chunked-2", "chunked-3"], batch_sizes=pow2(5, 13),
        lrs=[3e-4, 1e-3, 3e-3, 1e-2], seeds=[0, 1], steps=12000, examples=400_000, min_steps=300,
        eval_every_examples=4096, train_eval_examples=2000, stop_loss=1.35, eval_examples=2000,
        description="6x256 MLP on the full CIFAR-10 training set at 16x16 px; each run stops at "
                    "training-subset loss 1.35 or its step cap"),
    ("mlp-deep", "cpu"): dict(
        name="mlp_deep_ln_cifar10_8px_cpu", model="mlp", dataset="cifar10",
        model_kwargs=dict(depth=10, width=256, layer_norm=True), data_kwargs=dict(max_test=2000, image_size=8),
        methods=["backprop", "greedy", "chunked-3", "chunked-2", "overlapping"],
        # 32768 (the last doubling 50,000 images allow): from 16384 backprop still gained 1.26x under
        # one reading rule at 2 seeds, so the regime needed the next doubling
        batch_sizes=[32, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768],
        lrs=[3e-4, 1e-3, 3e-3, 1e-2], extra_lrs={32: [1e-4, 3e-5], 128: [1e-4], 512: [1e-4]}, seeds=[0, 1],
        steps=20000, examples=500_000, min_steps=200, eval_every_examples=4096, train_eval_examples=2000, stop_loss=1.3,
        stop_overshoot=0.25, eval_examples=2000,
        description="10x256 MLP with LayerNorm on the full CIFAR-10 training set at 8x8 px (192 inputs); each run "
                    "stops 25% past training-subset loss 1.3 (in examples) or at its step cap"),
    ("transformer", "cpu"): dict(
        name="transformer_text_tokens_cpu", model="transformer", dataset="text",
        model_kwargs=dict(d_model=32, n_layers=4, n_heads=2), data_kwargs=dict(seq_len=16),
        methods=["backprop", "greedy", "chunked-2"], batch_sizes=pow2(1, 9), lrs=[1e-3, 3e-3, 1e-2],
        seeds=[0, 1], steps=12000, examples=100_000, min_steps=100,
        eval_every_examples=512, train_eval_examples=512, stop_loss=2.3, eval_examples=1000,
        description="4-layer d=32 Transformer on pydoc text (bytes, 16-token windows), batches of 2-512 "
                    "windows (32-8192 tokens); each run stops at training-subset loss 2.3 or its step cap"),
    ("transformer-lm", "cpu"): dict(
        name="transformer_lm_stdlib_cpu", model="transformer", dataset="text",
        model_kwargs=dict(d_model=64, n_layers=4, n_heads=4), data_kwargs=dict(seq_len=64, **STDLIB_TEXT),
        methods=["backprop", "greedy", "overlapping", "chunked-2"], batch_sizes=pow2(2, 8),
        lrs=[1e-3, 3e-3, 1e-2], seeds=[0, 1], steps=20000, examples=163_840, min_steps=800,
        eval_every_examples=2048, train_eval_examples=512, stop_loss=1.6, stop_overshoot=0.25, eval_examples=1024,
        description=f"4-layer d=64 pre-LN Transformer LM on 64-byte windows of {_STDLIB_NAME}, batches of "
                    "4-256 windows (256-16384 bytes); each run stops 25% past training-subset loss 1.6 (in "
                    "windows) or at its step cap"),
    # The pilot of transformer-lm: backprop and greedy at three batch sizes (in 64-byte windows),
    # one learning rate, one seed, no early stop; its curves chose transformer-lm's targets
    ("transformer-lm-pilot", "cpu"): dict(
        name="transformer_lm_pilot_stdlib_cpu", model="transformer", dataset="text",
        model_kwargs=dict(d_model=64, n_layers=4, n_heads=4), data_kwargs=dict(seq_len=64, **STDLIB_TEXT),
        methods=["backprop", "greedy"], batch_sizes=[256, 64, 16], lrs=[3e-3], seeds=[0], steps=8000,
        examples=81_920, min_steps=100, eval_every_examples=2048, train_eval_examples=512, eval_examples=1024,
        description=f"Pilot of the Transformer LM study: 4-layer d=64 pre-LN Transformer on 64-byte windows of "
                    f"{_STDLIB_NAME}, one learning rate, one seed, three batch sizes, no early stop, 81,920 "
                    "windows (5.2M bytes) per run; to choose the study's targets and step caps"),
    ("resnet", "cpu"): dict(
        name="resnet_cifar10_16px_cpu", model="resnet18", dataset="cifar10", model_kwargs=dict(width=8),
        data_kwargs=dict(max_test=1000, image_size=16), methods=["backprop", "greedy", "chunked-3"],
        batch_sizes=[32, 128, 512, 2048], lrs=[1e-3, 3e-3, 1e-2], seeds=[0, 1], steps=4000, examples=120_000,
        min_steps=235, eval_every_examples=4096, train_eval_examples=2000, stop_loss=1.5, eval_examples=1000,
        description="ResNet-18 (width 8) on the full CIFAR-10 training set at 16x16 px, reduced sweep; each run "
                    "stops at training-subset loss 1.5 or its step cap"),
    # ------------------------------------------------------------ full (GPU servers)
    ("mlp", "full"): dict(
        name="mlp_cifar10_full", model="mlp", dataset="cifar10", model_kwargs=dict(depth=8, width=4096),
        methods=["backprop", "greedy", "overlapping", "chunked-2", "chunked-4"], batch_sizes=pow2(5, 14),
        lrs=loggrid(1e-4, 3e-3, 4), steps=20000, examples=5_000_000, min_steps=500, eval_every=1000,
        eval_examples=10000, eval_every_examples=25600, train_eval_examples=10000,
        description="8x4096 MLP on CIFAR-10 (paper scale)"),
    ("transformer", "full"): dict(
        name="transformer_text_full", model="transformer", dataset="text",
        model_kwargs=dict(d_model=512, n_layers=6, n_heads=8), data_kwargs=dict(seq_len=128),
        methods=["backprop", "greedy", "overlapping", "chunked-2", "chunked-3"], batch_sizes=pow2(4, 11),
        lrs=loggrid(1e-4, 1e-3, 3), steps=20000, examples=2_000_000, min_steps=500, eval_every=1000,
        eval_examples=2000, eval_every_examples=12800, train_eval_examples=2000,
        description="6-layer d=512 Transformer LM on an LM1B-style text file (bytes)"),
    ("transformer-lm", "full"): dict(
        name="transformer_lm_stdlib_full", model="transformer", dataset="text",
        model_kwargs=dict(d_model=256, n_layers=8, n_heads=8), data_kwargs=dict(seq_len=256, **STDLIB_TEXT),
        methods=["backprop", "greedy", "overlapping", "chunked-2", "chunked-4"], batch_sizes=pow2(3, 10),
        lrs=loggrid(3e-4, 3e-3, 3), seeds=[0, 1], steps=20000, examples=1_000_000, min_steps=300,
        eval_every_examples=4096, train_eval_examples=1024, eval_examples=2048,
        description=f"8-layer d=256 pre-LN Transformer LM on 256-byte windows of {_STDLIB_NAME}"),
    ("resnet", "full"): dict(
        name="resnet18_cifar10_full", model="resnet18", dataset="cifar10",
        methods=["backprop", "greedy", "overlapping", "chunked-2", "chunked-3"], batch_sizes=pow2(5, 12),
        lrs=loggrid(3e-4, 3e-3, 3), steps=20000, examples=2_500_000, min_steps=300, eval_every=1000,
        eval_examples=10000, eval_every_examples=25600, train_eval_examples=10000,
        description="ResNet-18 on CIFAR-10 (paper scale)"),
    ("resnet-imagenet", "full"): dict(
        name="resnet34_imagenet_full", model="resnet34", dataset="imagenet", data_kwargs=dict(image_size=224),
        methods=["backprop", "greedy", "chunked-2", "chunked-4"], batch_sizes=pow2(6, 11),
        lrs=loggrid(3e-4, 3e-3, 2), steps=50000, examples=12_800_000, min_steps=2000, eval_every=5000,
        eval_examples=10000, eval_every_examples=25600, train_eval_examples=10000,
        description="ResNet-34 on ImageNet at 224 px (paper scale)"),
}


# Speedup against the number of local modules: the deep MLP of "mlp-deep" at several depths
# (each depth its own sweep store), at large batches only, where the high-compute headline lives.
# "grid" is a Grid with "{depth}" in its name; the depth goes into model_kwargs. "reuse": compute
# studies whose stores hold some of these points already (same point id, same run): a sweep
# copies them instead of training them again (depth 10 is the mlp-deep net).
_MODULES = {
    "quick": dict(depths=[2, 4, 8], grid=dict(
        name="mlp_ln_depth{depth}_digits_quick", model="mlp", dataset="digits",
        model_kwargs=dict(width=64, layer_norm=True),
        methods=["backprop", "greedy", "chunked-2"], batch_sizes=[64, 256], lrs=[3e-3], seeds=[0, 1], steps=60,
        eval_examples=360, eval_every_examples=128, train_eval_examples=500,
        description="{depth}x64 MLP with LayerNorm on sklearn digits, 60 steps per point")),
    # extra_lrs: {depth: Grid.extra_lrs} where a depth's best learning rate sat at the grid's edge
    "cpu": dict(depths=[4, 8, 10, 16], reuse=["mlp-deep"],
                extra_lrs={16: {b: [1e-4] for b in (1024, 4096, 16384)}}, grid=dict(
        name="mlp_ln_depth{depth}_cifar10_8px_cpu", model="mlp", dataset="cifar10",
        model_kwargs=dict(width=256, layer_norm=True),
        data_kwargs=dict(max_test=2000, image_size=8), methods=["backprop", "greedy", "chunked-2"],
        batch_sizes=[1024, 4096, 16384], lrs=[3e-4, 1e-3, 3e-3, 1e-2], seeds=[0, 1], steps=20000, examples=500_000,
        min_steps=200, eval_every_examples=4096, train_eval_examples=2000, stop_loss=1.3, stop_overshoot=0.25,
        eval_examples=2000,
        description="{depth}x256 MLP with LayerNorm on the full CIFAR-10 training set at 8x8 px (192 inputs), large "
                    "batches; each run stops 25% past training-subset loss 1.3 (in examples) or at its step cap")),
}

# How the compute studies are read: the rule that decides when a run reaches a target
# (paper_repro.analysis.parse_rule), the other reasonable rules the sensitivity table tries,
# and fixed targets (None: chosen from the data by analysis.suggest_targets). A grid that
# does not evaluate a training subset is read by its training loss over a window of examples.
_ANALYSIS = {
    ("mlp", "quick"): dict(rule="eval", rules=["eval", "examples:256", "examples:1024"], targets=None),
    ("mlp-deep", "quick"): dict(rule="eval", rules=["eval", "examples:256", "examples:1024"], targets=None),
    ("mlp-deep", "cpu"): dict(rule="eval", rules=["eval", "examples:4096", "examples:16384"],
                              targets=[1.7, 1.5, 1.3]),
    (MODULES_STUDY, "quick"): dict(rule="eval", rules=["eval", "examples:256"], targets=[1.6, 1.0]),
    (MODULES_STUDY, "cpu"): dict(rule="eval", rules=["eval", "examples:4096", "examples:16384"],
                                 targets=[1.7, 1.5, 1.3]),
    ("transformer", "quick"): dict(rule="eval", rules=["eval", "examples:64", "examples:256"], targets=None),
    ("transformer-lm", "quick"): dict(rule="eval", rules=["eval", "examples:64", "examples:256"], targets=None),
    ("transformer-lm", "cpu"): dict(rule="eval", rules=["eval", "examples:2048", "examples:8192"],
                                    targets=[2.0, 1.8, 1.6]),
    ("transformer-lm-pilot", "cpu"): dict(rule="eval", rules=["eval", "examples:2048", "examples:8192"],
                                          targets=None),
    ("resnet", "quick"): dict(rule="eval", rules=["eval", "examples:256", "examples:1024"], targets=None),
    ("mlp", "cpu"): dict(rule="eval", rules=["eval", "examples:4096", "examples:16384"], targets=[1.7, 1.5, 1.35]),
    ("transformer", "cpu"): dict(rule="eval", rules=["eval", "examples:512", "examples:2048"],
                                 targets=[2.8, 2.5, 2.3]),
    ("resnet", "cpu"): dict(rule="eval", rules=["eval", "examples:4096", "examples:16384"], targets=[2.0, 1.8, 1.6]),
}
_FULL_ANALYSIS = dict(rule="eval", rules=["eval", "examples:25600", "examples:102400"], targets=None)


# ------------------------------------------------------------------------ quickstart (00)
QUICKSTART_METHODS = ["backprop", "greedy", "overlapping", "chunked-2", "chunked-3"]
_QUICKSTART = {
    "quick": dict(dataset="digits", steps=400, batch_size=64, lr=1e-3, eval_every=25, eval_examples=None,
                  model_kwargs=dict(depth=4, width=128)),
    "cpu": dict(dataset="cifar10", steps=3000, batch_size=128, lr=3e-4, eval_every=250, eval_examples=2000,
                model_kwargs=dict(depth=4, width=1024)),
    "full": dict(dataset="cifar10", steps=20000, batch_size=256, lr=3e-4, eval_every=1000, eval_examples=None,
                 model_kwargs=dict(depth=8, width=4096)),
}


# ------------------------------------------------------------------ similarity probes (05-07)
_ABLATION_QUICK = AblationSettings(seeds=[0], variants=[
    AblationVariant(name="base", change="none", steps=150),
    AblationVariant(name="classifier_last", change="last block = the linear classifier", last_block="classifier",
                    steps=150),
    AblationVariant(name="fixed_probe", change="cosine on a fixed set of 512 training images", probe_examples=512,
                    steps=150),
    AblationVariant(name="backprop_path", change="trajectory trained by backprop", trajectory="backprop", steps=150),
    AblationVariant(name="deep_heads", change="auxiliary heads shaped like the rest of the net", heads="deep",
                    steps=150)])
_ABLATION_CPU = AblationSettings(seeds=[0, 1], variants=[
    AblationVariant(name="base", change="none (10k-image subset, Adam 3e-4, cosine on the training batch, greedy "
                                        "trajectory, linear heads, 5 hidden blocks of 512)"),
    AblationVariant(name="classifier_last", change="last block = the linear classifier", last_block="classifier"),
    AblationVariant(name="full_data", change="full training set (50,000 images)", data_kwargs=dict(max_test=1000)),
    AblationVariant(name="fixed_probe", change="cosine on a fixed set of 1,024 training images",
                    probe_examples=1024),
    AblationVariant(name="backprop_path", change="trajectory trained by backprop", trajectory="backprop"),
    AblationVariant(name="sgd", change="SGD (momentum 0.9, lr 0.01) instead of Adam", optimizer="sgd", lr=0.01),
    AblationVariant(name="deep_heads", change="auxiliary heads shaped like the rest of the net", heads="deep"),
    AblationVariant(name="width128", change="width 128", width=128),
    AblationVariant(name="depth3", change="3 blocks", depth=3),
    AblationVariant(name="depth8", change="8 blocks", depth=8),
    AblationVariant(name="width1024", change="width 1024", width=1024),
    AblationVariant(name="combined", change="classifier as the last block + full training set + fixed probe set",
                    last_block="classifier", data_kwargs=dict(max_test=1000), probe_examples=1024),
    AblationVariant(name="backprop_path_deep_heads", change="trajectory trained by backprop + auxiliary heads "
                                                            "shaped like the rest of the net",
                    trajectory="backprop", heads="deep")])
_GRADIENT_METHODS = ["greedy", "overlapping", "chunked-2"]
_FEATURE_METHODS = ["backprop", "chunked-2", "chunked-3", "overlapping", "greedy"]
_SIMILARITY = {
    # 05: a 5-block MLP trained by each local method; cosine every `every` steps.
    "gradient": {
        "quick": GradientSettings(dataset="digits", data_kwargs={}, depth=5, width=128, steps=300, every=10,
                                  batch_size=64, lr=1e-3, seeds=[0, 1, 2], methods=_GRADIENT_METHODS,
                                  ablation=_ABLATION_QUICK),
        "cpu": GradientSettings(dataset="cifar10", data_kwargs=dict(max_train=10000, max_test=1000), depth=5,
                                width=512, steps=1500, every=30, batch_size=128, lr=3e-4, seeds=[0, 1, 2],
                                methods=_GRADIENT_METHODS, ablation=_ABLATION_CPU),
        "full": GradientSettings(dataset="cifar10", data_kwargs={}, depth=5, width=1024, steps=10000, every=100,
                                 batch_size=128, lr=3e-4, seeds=[0, 1, 2, 3, 4], methods=_GRADIENT_METHODS),
    },
    # 06: ResNet-18 with the ImageNet-style stem (64 filters of 7x7, stride 2, then max-pool) per
    # method, all from the same initial net; stem filter grids + low-frequency energy; CKA on
    # held-out images, per seed. cpu: 4,000 steps of 16 images (64,000 images, 1.3 epochs) drawn from
    # the full CIFAR-10 training set at 32 px, 2 seeds (800 steps left backprop's filters nearly random).
    "features": {
        "quick": FeatureSettings(dataset="digits", data_kwargs={}, model="resnet18",
                                 model_kwargs=dict(small_input=False), steps=12, batch_size=32, lr=1e-3,
                                 cka_examples=128, eval_examples=200, seeds=[0], methods=_FEATURE_METHODS),
        "cpu": FeatureSettings(dataset="cifar10", data_kwargs=dict(max_test=1000), model="resnet18",
                               model_kwargs=dict(small_input=False), steps=4000, batch_size=16, lr=2e-3,
                               cka_examples=500, eval_examples=1000, seeds=[0, 1], methods=_FEATURE_METHODS),
        "full": FeatureSettings(dataset="imagenet", data_kwargs=dict(image_size=224, max_train=100000, max_test=5000),
                                model="resnet18", model_kwargs=dict(small_input=False), steps=20000, batch_size=256,
                                lr=1e-3, cka_examples=500, eval_examples=5000, seeds=[0, 1, 2],
                                methods=_FEATURE_METHODS),
    },
    # 07: fitting random labels. The paper's architecture for this figure is not known: an MLP
    # and a narrow ResNet-18 (whose early blocks + pooled linear heads have little capacity).
    "random_labels": {
        "quick": RandomLabelSettings(dataset="digits", seeds=[0], methods=["backprop", "greedy", "chunked-2"], runs=[
            RandomLabelRun(model="mlp", label="MLP 5x128", model_kwargs=dict(depth=5, width=128), data_kwargs={},
                           epochs=30, batch_size=64, lr=1e-3),
            RandomLabelRun(model="resnet18", label="ResNet-18 width 8", model_kwargs=dict(width=8), data_kwargs={},
                           epochs=4, batch_size=64, lr=1e-3)]),
        "cpu": RandomLabelSettings(dataset="cifar10", seeds=[0, 1, 2], methods=["backprop", "greedy", "chunked-2"],
                                   runs=[
            RandomLabelRun(model="resnet18", label="ResNet-18 width 16", model_kwargs=dict(width=16),
                           data_kwargs=dict(max_train=2500, max_test=500, image_size=16), epochs=40, batch_size=128,
                           lr=1e-3),
            RandomLabelRun(model="mlp", label="MLP 5x512", model_kwargs=dict(depth=5, width=512),
                           data_kwargs=dict(max_train=5000, max_test=1000), epochs=100, batch_size=128, lr=3e-4)]),
        "full": RandomLabelSettings(dataset="cifar10", seeds=[0, 1, 2], methods=["backprop", "greedy", "chunked-2"],
                                    runs=[
            RandomLabelRun(model="mlp", label="MLP 5x1024", model_kwargs=dict(depth=5, width=1024), data_kwargs={},
                           epochs=100, batch_size=128, lr=3e-4),
            RandomLabelRun(model="resnet18", label="ResNet-18", model_kwargs={}, data_kwargs={}, epochs=100,
                           batch_size=128, lr=1e-3)]),
    },
}


# ---------------------------------------------------------------------- pipeline (04)
# quick = 2 CPU processes in about a minute (the two update rules, 1F1B with and without
# recomputation, ZBV, DDP); cpu = every schedule, the README's run; full = ResNet-34 at
# 224x224 on 4 GPUs. Without schedules: every one (paper_repro.names.RUN_NAMES).
_PIPELINE = {
    "quick": PipelineSettings(model="resnet18", model_kwargs={"width": 8}, image_size=16, num_classes=10,
                              stages=2, micro_batch=[8, 32], micro_batches=8, steps=2, warmup_steps=1,
                              device="cpu",
                              schedules=("local", "local/M", "1f1b", "1f1b-recompute", "zbv", "ddp")),
    "cpu": PipelineSettings(model="resnet18", model_kwargs={"width": 16}, image_size=32, num_classes=10,
                            stages=2, micro_batch=[8, 16, 32], micro_batches=16, steps=3, warmup_steps=1,
                            device="cpu", repeats=3),
    "full": PipelineSettings(model="resnet34", model_kwargs={}, image_size=224, num_classes=1000, stages=4,
                             micro_batch=[4, 8, 16, 32], micro_batches=16, steps=10, warmup_steps=2,
                             device="cuda", repeats=2),
}

# The communication figure of 04: bytes per step of ResNet-34 at 224x224 (the paper's setting)
# from the boundary tensors' shapes, for several processor counts and micro-batch sizes (no
# training, so every profile draws the same figure).
_COMMUNICATION = CommunicationSettings(model="resnet34", model_kwargs={}, image_size=224, num_classes=1000,
                                       dtype="float32", micro_batch=[1, 2, 4, 8, 16, 32, 64], micro_batches=16,
                                       processors=[2, 4, 8], schedules=["local", "1f1b"])

# The all-schedule throughput figure of 04: the committed `bench pipeline --schedule all` runs
# (2 gloo processes on 2-core CPUs, 3 interleaved repeats each), files in results/pipeline.
_STORED_RUNS = {
    "run 1": ["mlp8x1024_targets_cpu2.json", "resnet18w16_targets_cpu2.json"],
    "run 2 (another CPU)": ["mlp8x1024_targets_cpu2_rerun.json", "resnet18w16_targets_cpu2_rerun.json"],
    "run 3 (run 2's CPU, chunk cut fixed)": ["mlp8x1024_targets_cpu2_fixedcut.json",
                                             "resnet18w16_targets_cpu2_fixedcut.json"],
}

# ----------------------------------------------------------------------- scaling (08)
# The simulated scaling study (paper_repro.simulate.scaling): ResNet-34 at 224x224 and a
# 64-layer Transformer LM. quick = the per-block costs cached in results/simulate (measured on
# a 2-core CPU, one thread per processor), a few sizes, seconds; cpu = the same sizes, the costs
# measured again on this machine's CPU (minutes); full = measured on the GPU, more sizes.
_SCALING_COMMON = dict(
    models=dict(resnet=SimulatedModel(model="resnet34", image_size=224, num_classes=1000),
                transformer=SimulatedModel(model="transformer", num_classes=256, seq_len=128,
                                           model_kwargs={"d_model": 256, "n_layers": 64, "n_heads": 4,
                                                         "seq_len": 128})),
    memory_stages=[4, 8], memory_micro_batches=[1, 2, 4, 8, 16, 32, 64],
    memory_schedules=["local", "1f1b", "1f1b-recompute", "gpipe"],
    baselines=["gpipe", "1f1b", "1f1b-recompute", "zbv"],
    paper_ratio=1.40, paper_stages=4, paper_micro_batch=8, paper_micro_batches=16,
    # the paper's setting again with costs measured on a GPU (tools/gpu_calibrate.py), input prefetched
    paper_calibrations_gpu=[f"calibration_resnet34_224_h200_mb8_run{k}.json" for k in (1, 2, 3)],
    gantt_schedules=["local", "1f1b", "zbv"], gantt_micro_batches=8,
    micro_batch=8, ratio_stages={"resnet": [2, 4, 8, 16], "transformer": [2, 4, 8, 16, 32, 64]},
    micro_batch_sweep_stages={"resnet": 4, "transformer": 8},
    # the simulator against real 2-process runs, each measured 3-5 times (research/simulator_validation/validation_repro.py):
    # micro-batches 8-64, then the MLP at 128 and 256
    validation=["validation_repro.csv", "validation_repro_mb128.csv"],
)
_SCALING_CPU = dict(device="cpu", stage_sweep_micro_batches=64, micro_batches=[4, 8, 16, 32, 64])
_SCALING = {
    "quick": ScalingSettings(**_SCALING_COMMON, **_SCALING_CPU,
                             calibrations={"resnet": "calibration_resnet34_224_cpu1.json",
                                           "transformer": "calibration_transformer64x256_cpu1.json"},
                             # the paper's setting is shown with every cached ResNet calibration (its spread)
                             paper_calibrations=["calibration_resnet34_224_cpu1.json",
                                                 *(f"calibration_resnet34_224_cpu1_run{k}.json"
                                                   for k in range(1, 7))]),
    "cpu": ScalingSettings(**_SCALING_COMMON, **_SCALING_CPU, calibrations=None, paper_calibrations=None),
    "full": ScalingSettings(**_SCALING_COMMON, calibrations=None, paper_calibrations=None, device="cuda",
                            stage_sweep_micro_batches=128, micro_batches=[4, 8, 16, 32, 64, 128, 256]),
}

# the race of notebook 10 (paper_repro.race): every strategy to the same targets on the same processes
_RACE_STRATEGIES = (RaceStrategy("one process", "single"), RaceStrategy("ddp", "ddp"),
                    RaceStrategy("gpipe", "gpipe"), RaceStrategy("1f1b", "1f1b"),
                    RaceStrategy("1f1b-recompute", "1f1b-recompute"), RaceStrategy("zbv", "zbv"),
                    RaceStrategy("local chunked-2", "local", "chunked-2"),
                    RaceStrategy("local greedy", "local", "greedy"),
                    RaceStrategy("local/M chunked-2", "local/M", "chunked-2"))
_RACE = {
    "quick": RaceSettings(
        name="tmp/race_digits_quick", model="mlp", model_kwargs={"depth": 4, "width": 32, "layer_norm": True},
        dataset="digits", data_kwargs={}, processes=2, batches=(64,), micro_batches=4, targets=(1.0, 0.5),
        max_examples=64 * 150, eval_every_examples=256, train_eval_examples=512, repeats=1,
        strategies=tuple(s for s in _RACE_STRATEGIES if s.name in ("one process", "ddp", "1f1b", "local greedy",
                                                                    "local/M chunked-2")),
        lr=1e-2),
    "cpu": RaceSettings(
        name="race_mlp_deep_ln_cifar10_8px_cpu", model="mlp",
        model_kwargs={"depth": 10, "width": 256, "layer_norm": True}, dataset="cifar10",
        data_kwargs={"image_size": 8, "max_test": 2000}, processes=2, batches=(1024, 4096, 16384),
        micro_batches=16, targets=(1.5, 1.3), max_examples=1_000_000, eval_every_examples=16384,
        train_eval_examples=2000, repeats=3, strategies=_RACE_STRATEGIES,
        lr_store="mlp_deep_ln_cifar10_8px_cpu", lr_target=1.3, predict_devices={2: 10, 4: 4, 8: 8, 16: 16}),
}
_RACE["full"] = dataclasses.replace(_RACE["cpu"], name="race_mlp_deep_ln_cifar10_8px_full", device="cuda")

# every study -> its profiles
STUDIES = {**{s: tuple(p for t, p in _GRIDS if t == s) for s in COMPUTE_STUDIES},
           "quickstart": tuple(_QUICKSTART), **{s: tuple(_SIMILARITY[s]) for s in SIMILARITY_STUDIES},
           MODULES_STUDY: tuple(_MODULES), "pipeline": tuple(_PIPELINE), "scaling": tuple(_SCALING),
           "race": tuple(_RACE)}


def _check(study: str, profile: str, known: tuple) -> None:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid: {', '.join(PROFILES)}")
    if study not in known:
        raise ValueError(f"unknown study {study!r}; valid: {', '.join(known)}")
    if profile not in STUDIES[study]:
        raise ValueError(f"study {study!r} has no {profile!r} profile; it has: {', '.join(STUDIES[study])}")


def compute_grid(study: str, profile: str = "quick") -> Grid:
    """The sweep grid of ``study`` (mlp | transformer | resnet | resnet-imagenet) at ``profile``."""
    _check(study, profile, COMPUTE_STUDIES)
    return Grid(**copy.deepcopy(_GRIDS[(study, profile)]))


def module_grids(profile: str = "quick") -> dict[int, Grid]:
    """The grids of the speedup-vs-modules study at ``profile``: ``{depth: Grid}``."""
    _check(MODULES_STUDY, profile, (MODULES_STUDY,))
    spec = copy.deepcopy(_MODULES[profile])
    out = {}
    for depth in spec["depths"]:
        grid = dict(spec["grid"], name=spec["grid"]["name"].format(depth=depth),
                    description=spec["grid"]["description"].format(depth=depth))
        grid["model_kwargs"] = dict(grid["model_kwargs"], depth=depth)
        grid["extra_lrs"] = copy.deepcopy(spec.get("extra_lrs", {}).get(depth, {}))
        out[depth] = Grid(**grid)
    return out


def module_sources(profile: str = "quick") -> list[Grid]:
    """The grids of the compute studies whose finished points the speedup-vs-modules study at
    ``profile`` copies instead of training again (``sweep.run_sweep(reuse=...)``)."""
    _check(MODULES_STUDY, profile, (MODULES_STUDY,))
    return [compute_grid(study, profile) for study in _MODULES[profile].get("reuse", [])]


def analysis_settings(study: str, profile: str = "quick") -> dict:
    """How ``study`` at ``profile`` is read: ``rule``, sensitivity ``rules``, ``targets``."""
    _check(study, profile, (*COMPUTE_STUDIES, MODULES_STUDY))
    return copy.deepcopy(_ANALYSIS.get((study, profile), _FULL_ANALYSIS))


def quickstart_config(profile: str = "quick", data_dir: str | None = None, seed: int = 0) -> TrainConfig:
    """The quickstart's run: a 4-block MLP (8 at full scale), to be trained with every method."""
    _check("quickstart", profile, ("quickstart",))
    kw = copy.deepcopy(_QUICKSTART[profile])
    if kw["dataset"] != "digits" and data_dir is None:
        raise ValueError(f"profile {profile!r} trains on {kw['dataset']}: pass data_dir (e.g. an ImageFolder "
                         "tree with train/<class>/*.jpg, or the official cifar-10-batches-py folder)")
    return TrainConfig(model="mlp", data_dir=data_dir, seed=seed, **kw)


def similarity_settings(study: str, profile: str = "quick") -> GradientSettings | FeatureSettings | RandomLabelSettings:
    """The run sizes of a probing study at ``profile`` (a fresh copy): ``gradient`` ->
    ``GradientSettings``, ``features`` -> ``FeatureSettings``, ``random_labels`` ->
    ``RandomLabelSettings`` (every field: :mod:`paper_repro.settings_types`)."""
    _check(study, profile, SIMILARITY_STUDIES)
    return copy.deepcopy(_SIMILARITY[study][profile])


def pipeline_settings(profile: str = "quick") -> PipelineSettings:
    """The pipeline benchmark's runs at ``profile`` (a fresh copy; turn it into configs with
    :func:`paper_repro.distributed.options.configs_for`)."""
    _check("pipeline", profile, ("pipeline",))
    return copy.deepcopy(_PIPELINE[profile])


def race_settings(profile: str = "quick") -> RaceSettings:
    """The race of notebook 10 at ``profile`` (:mod:`paper_repro.race`)."""
    _check("race", profile, ("race",))
    return copy.deepcopy(_RACE[profile])


def communication_settings() -> CommunicationSettings:
    """The communication figure's model, sizes, stage counts and schedules (a fresh copy, for
    :func:`paper_repro.distributed.bench.comm_by_size`)."""
    return copy.deepcopy(_COMMUNICATION)


def stored_pipeline_runs() -> dict[str, list[str]]:
    """The committed all-schedule benchmark runs: ``{run name: [record files in results/pipeline]}``."""
    return copy.deepcopy(_STORED_RUNS)


def scaling_settings(profile: str = "quick") -> ScalingSettings:
    """The scaling notebook's models, sizes, schedules and cached files at ``profile`` (a fresh
    copy; every field: :class:`~paper_repro.settings_types.ScalingSettings`)."""
    _check("scaling", profile, ("scaling",))
    return copy.deepcopy(_SCALING[profile])


def get(study: str, profile: str = "quick", **kwargs):
    """The settings of any ``study`` of :data:`STUDIES` at ``profile``, as the study's function
    in the table at the top returns them (``kwargs`` go to :func:`quickstart_config`:
    ``data_dir``, ``seed``)."""
    if study in COMPUTE_STUDIES:
        return compute_grid(study, profile)
    if study == "quickstart":
        return quickstart_config(profile, **kwargs)
    if study in SIMILARITY_STUDIES:
        return similarity_settings(study, profile)
    if study == MODULES_STUDY:
        return module_grids(profile)
    if study == "pipeline":
        return pipeline_settings(profile)
    if study == "scaling":
        return scaling_settings(profile)
    if study == "race":
        return race_settings(profile)
    raise ValueError(f"unknown study {study!r}; valid: {', '.join(STUDIES)}")
