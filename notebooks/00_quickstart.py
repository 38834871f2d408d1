# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 - Quickstart: every local-learning method on one MLP
#
# Local parallelism (Laskin, Metz et al., 2020) replaces global backprop with truncated,
# layer-wise backprop: each *local module* gets a small auxiliary head and updates from its own
# loss only. This notebook trains the same 4-block MLP with each method and compares their
# training loss and test accuracy:
#
# * **backprop**: one loss at the end, gradients through every block;
# * **greedy**: a linear head after every block, no gradient crosses a block;
# * **overlapping**: windows of two blocks, each inner block updated by two windows;
# * **chunked-K**: K contiguous chunks trained with backprop inside, stop-gradient between.
#
# The `parameters` cell holds the quick profile (sklearn digits, offline, seconds on a laptop);
# `papermill -p profile cpu -p data_dir PATH` runs the same study on CIFAR-10.

# %% tags=["parameters"]
profile = "quick"           # quick | cpu | full
figures_dir = "../figures"  # relative paths start at this notebook's folder
data_dir = None             # cpu/full: a CIFAR-10 folder (ImageFolder tree or cifar-10-batches-py)
seed = 0

# %%
from pathlib import Path

import torch
from IPython.display import display

from paper_repro import plots, settings, train
from paper_repro.notebooks import check_parameters, notebook_path

check_parameters(dict(profile=profile, figures_dir=figures_dir, data_dir=data_dir, seed=seed),
                 dict(profile=str, figures_dir=str, data_dir=(str, type(None)), seed=int))
figures_dir = notebook_path(figures_dir)
torch.set_num_threads(1 if profile == "quick" else torch.get_num_threads())
cfg = settings.quickstart_config(profile, data_dir=data_dir, seed=seed)
cfg.progress = False
data = train.load_data(cfg)
methods = settings.QUICKSTART_METHODS
print(data.source, "| train", data.num_examples("train"), "| test", data.num_examples("test"))
cfg

# %% [markdown]
# ## Train every method
# Same seed, same initial blocks and the same sequence of batches for every method; Adam.

# %%
records, summary = train.compare_methods(cfg, methods, data=data)
summary[["method", "status", "steps", "final_loss", "eval_acc", "wall_time_s"]]

# %% [markdown]
# ## Training loss of the network's own head
# For a local method this is the loss of the last module, i.e. of the full network's output.
# Backprop optimises it directly; the local methods only optimise it through the last module.

# %%
label = f"MLP {cfg.model_kwargs['depth']}x{cfg.model_kwargs['width']}"
title = plots.figure_title("Training loss (final head, smoothed over 20 steps)", model=label,
                           dataset=data.name, profile=profile)
fig = plots.training_curves(records, "final_loss", title=title, smooth=20, logy=True)
plots.save_figure(fig, f"00_quickstart_loss_{profile}", figures_dir);

# %% [markdown]
# ## Test accuracy

# %%
title = plots.figure_title("Test accuracy", model=label, dataset=data.name, profile=profile)
fig = plots.training_curves(records, "eval_acc", title=title)
plots.save_figure(fig, f"00_quickstart_accuracy_{profile}", figures_dir);

# %% [markdown]
# ## Check against an accuracy bar
# Digits is an easy problem: a 4-block MLP should reach at least 95% test accuracy with backprop
# and chunked-2, and at least 90% with greedy and overlapping. The quick profile stops with an
# error if any method falls short.

# %%
bars = {"backprop": 0.95, "chunked-2": 0.95, "greedy": 0.90, "overlapping": 0.90}
check = summary.set_index("method")[["eval_acc"]].assign(bar=lambda d: d.index.map(bars))
check["meets bar"] = check["eval_acc"] >= check["bar"].fillna(0)
display(check)
if profile == "quick":
    assert check["meets bar"].all(), check

# %% [markdown]
# ## Checks
# What the figures above show, checked on the numbers behind them at every profile: every method
# starts from the same loss (same initial blocks, same first batch) and trains to the end;
# accuracies and losses are in range. On the quick profile's digits every method also ends far
# below where it started and well above chance (10%) on the test set.

# %%
start = records[records.step == 1].groupby("method").final_loss.first()
end = records.groupby("method").final_loss.apply(lambda s: s.tail(20).mean())
assert set(summary.method) == set(methods) and (summary.status == "finished").all(), summary
assert (summary.steps == cfg.steps).all() and start.max() - start.min() < 1e-5, start
assert records.eval_acc.dropna().between(0, 1).all() and (records.final_loss.dropna() >= 0).all()
if profile == "quick":
    assert (end < 0.2 * start).all() and (summary.eval_acc > 0.1 + 0.6).all(), (start, end)
