"""The quickstart's run (notebook 00) and the similarity probes' settings (notebooks 05-07), per
profile. Read them through :mod:`paper_repro.settings`' functions, which hand out fresh copies.
"""
from __future__ import annotations

from .types import (AblationSettings, AblationVariant, FeatureSettings, GradientSettings, RandomLabelRun,
                    RandomLabelSettings)

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


