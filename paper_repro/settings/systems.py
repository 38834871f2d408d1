"""The systems studies' settings: the pipeline benchmark and communication figure (notebook 04),
the simulated scaling study (08) and the race (10), per profile. Read them through
:mod:`paper_repro.settings`' functions, which hand out fresh copies.
"""
from __future__ import annotations

import dataclasses

from .types import (CommunicationSettings, PipelineSettings, RaceSettings, RaceStrategy, ScalingSettings,
                    SimulatedModel)

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
                    RaceStrategy("dualpipev", "dualpipev"),
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
        lr_store="mlp_deep_ln_cifar10_8px_cpu", lr_target=1.3, predict_devices={2: 10, 4: 4, 8: 8, 16: 16},
        # measured between the race's processes: results/race_mlp_deep_ln_cifar10_8px_cpu/link.md (medians of 3)
        link=(0.002398, 1.841e9)),
}
_RACE["full"] = dataclasses.replace(_RACE["cpu"], name="race_mlp_deep_ln_cifar10_8px_full", device="cuda", link=())
