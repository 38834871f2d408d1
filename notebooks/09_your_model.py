# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 09 - Local learning on your own network
#
# Does local parallelism work for *your* network? This notebook takes a small convolutional
# network written here as a plain `nn.Sequential`, trains it with backprop and with each
# local-learning method, and compares them. Then it predicts what splitting the network over
# several devices would give: throughput, bytes sent between devices and memory per device.
#
# Each entry of the `nn.Sequential` becomes one *block*. A local method attaches a small
# *head* (global average pool + linear classifier) after the blocks where it needs a loss, and
# stops gradients between its local modules:
#
# * **backprop**: one loss at the end, gradients through every block;
# * **greedy**: a head after every block, no gradient crosses a block;
# * **overlapping**: windows of two blocks, each inner block updated by two windows;
# * **chunked-K**: K contiguous chunks trained with backprop inside, stop-gradient between.
#
# The quick profile trains on scikit-learn's 8x8 handwritten digits (offline, seconds).

# %% tags=["parameters"]
profile = "quick"           # quick | cpu | full
figures_dir = "../figures"  # relative paths start at this notebook's folder
seed = 0
lr = 3e-3                   # Adam's learning rate
devices = 4                 # devices of the predicted pipeline
micro_batch = 32            # samples per micro-batch in the prediction

# %%
import pandas as pd
import torch
import torch.nn as nn
from IPython.display import display

from paper_repro import data as datasets
from paper_repro import estimate, methods, plots, train
from paper_repro.notebooks import check_parameters, notebook_path

check_parameters(dict(profile=profile, figures_dir=figures_dir, seed=seed, lr=lr, devices=devices,
                      micro_batch=micro_batch),
                 dict(profile=str, figures_dir=str, seed=int, lr=float, devices=int, micro_batch=int))
figures_dir = notebook_path(figures_dir)
torch.set_num_threads(1 if profile == "quick" else torch.get_num_threads())
steps = {"quick": 400, "cpu": 2000, "full": 5000}[profile]
data = datasets.load("digits")
example_x, _ = data.batch("train", torch.arange(2))
print(data.source, "| train", data.num_examples("train"), "| test", data.num_examples("test"),
      "| images", tuple(data.input_shape))

# %% [markdown]
# ## Your network
# Four convolutional blocks; nothing in it knows about local learning.


# %%
def my_cnn(width: int = 16) -> nn.Sequential:
    return nn.Sequential(
        nn.Sequential(nn.Conv2d(1, width, 3, padding=1), nn.ReLU()),
        nn.Sequential(nn.Conv2d(width, width, 3, padding=1), nn.ReLU()),
        nn.Sequential(nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.ReLU()),
        nn.Sequential(nn.Conv2d(2 * width, 2 * width, 3, padding=1), nn.ReLU()),
    )


# %% [markdown]
# ## Train it with every method
# `methods.build` wraps the `nn.Sequential` (the example batch checks that every block's
# output fits the next block and a head) and returns a learner; `train.train` trains it and
# records one row per step. Same seed, same initial weights, same batches for every method.

# %%
records, summaries = [], []
for method in ["backprop", "greedy", "overlapping", "chunked-2"]:
    torch.manual_seed(seed)
    learner = methods.build(my_cnn(), method, num_classes=data.num_classes, example=example_x)
    cfg = train.TrainConfig(model=None, method=None, dataset="digits", steps=steps, lr=lr, seed=seed,
                            progress=False)
    result = train.train(cfg, data=data, learner=learner)
    records.append(result.records.assign(method=method))
    summaries.append(result.summary())
records, summary = pd.concat(records, ignore_index=True), pd.DataFrame(summaries)
summary[["method", "steps", "final_loss", "eval_acc", "wall_time_s"]]

# %% [markdown]
# ## Training loss of the network's own head

# %%
title = plots.figure_title("Training loss (final head, smoothed over 20 steps)", model="4-block CNN (width 16)",
                           dataset=data.name, profile=profile)
fig = plots.training_curves(records, "final_loss", title=title, smooth=20, logy=True)
plots.save_figure(fig, f"09_your_model_loss_{profile}", figures_dir);

# %% [markdown]
# ## Test accuracy

# %%
title = plots.figure_title("Test accuracy", model="4-block CNN (width 16)", dataset=data.name, profile=profile)
fig = plots.training_curves(records, "eval_acc", title=title)
plots.save_figure(fig, f"09_your_model_accuracy_{profile}", figures_dir);

# %% [markdown]
# On digits every method should pass 90% test accuracy after 400 steps; the quick profile
# stops with an error if one does not.

# %%
if profile == "quick":
    assert (summary["eval_acc"] >= 0.90).all(), summary[["method", "eval_acc"]]

# %% [markdown]
# ## What would several devices give?
# Put one local module on each device (chunked-N) and the devices work as a pipeline: each
# trains its blocks on one micro-batch while the next device trains on the previous one, and
# only activations (and labels) travel forward. Pipelined backprop on the same cut must also
# send gradients back, and every step starts and ends with idle devices (the bubble).
#
# `estimate.pipeline_estimate` predicts both from this network's measured FLOPs per block,
# the shapes at the cuts and the bytes autograd keeps for backward, on an ideal machine
# (sending costs no time, every operation runs at the same speed). Its rows are those of
# `simulate` and `bench pipeline` (`local`, `local/M`, `1f1b`, `1f1b-recompute`, one optimizer
# step per micro-batch or per step); `speedup` is throughput relative to one device running
# backprop (`prediction.attrs["one_device"]`).

# %%
x, y = data.batch("train", torch.arange(micro_batch))
torch.manual_seed(seed)
prediction = estimate.pipeline_estimate(my_cnn, x, y, devices=devices, num_classes=data.num_classes)
shown = prediction.assign(
    kflops_per_sample=prediction["flops_per_sample"] / 1e3,
    bytes_per_sample=prediction["comm_bytes_per_sample"].map(
        lambda c: f"{c['forward']:g} forward, {c['backward']:g} back"),
    peak_memory_kib=prediction["peak_mem_bytes_per_stage"].map(lambda v: [round(b / 1024) for b in v]))
display(shown[["training", "kflops_per_sample", "speedup", "bytes_per_sample", "peak_memory_kib"]].round(2))

# %% [markdown]
# **Simulated and measured schedules.** The numbers above are for an ideal machine.
# `paper-repro simulate` replays both pipelines event by event, with every block's time
# calibrated on this machine, and gives time per step, the busy fraction and the memory of every
# device at any number of devices; `paper-repro bench pipeline` runs a real pipeline of
# processes here. Both take your network as a function `package.module:function` returning the
# `nn.Sequential` (`--input text` for a network that takes token ids):
#
# ```bash
# paper-repro simulate --model my_package.models:my_cnn --model-kwargs '{"width": 16}' \
#     --channels 1 --image-size 8 --stages 4 --micro-batch 32 --schedule local,local/M,1f1b,1f1b-recompute
# paper-repro bench pipeline --model my_package.models:my_cnn --model-kwargs '{"width": 16}' \
#     --channels 1 --image-size 8 --stages 2 --schedule local,local/M,1f1b,1f1b-recompute --repeats 3
# ```

# %% [markdown]
# ## Checks
# The numbers behind the figures and the table: every method starts from the same loss (same
# initial weights, same first batch) and trains to the end; one device running backprop is the
# reference; each speedup is its FLOPs per sample against that
# reference's, above 1 and at most the number of devices; only pipelined backprop sends
# gradients back; the local pipeline needs no more memory on any device than pipelined backprop.
# These hold at every profile.

# %%
start = records[records.step == 1].set_index("method").final_loss
assert start.max() - start.min() < 1e-5 and (summary.status == "finished").all() and (summary.steps == steps).all()
rows = prediction.set_index("schedule")
local, pipelined = rows.loc["local"], rows.loc["1f1b"]
ratio = prediction.attrs["one_device"]["flops_per_sample"] / prediction.flops_per_sample
assert (ratio - prediction.speedup).abs().max() < 1e-9 and (prediction.speedup > 1).all()
assert (prediction.speedup <= devices).all() and (prediction.stages == devices).all()
assert pipelined.comm_bytes_per_sample["backward"] > 0 and local.comm_bytes_per_sample["backward"] == 0, prediction
assert local.comm_bytes_per_sample["forward"] > 0, prediction
assert len(local.peak_mem_bytes_per_stage) == len(pipelined.peak_mem_bytes_per_stage) == devices
assert all(a <= b for a, b in zip(local.peak_mem_bytes_per_stage, pipelined.peak_mem_bytes_per_stage)), prediction
