# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 - Feature similarity: first-layer filters and layer-wise CKA against backprop
#
# The paper shows the 8x8 grids of the 64 first-layer conv filters of ResNets trained with Backprop,
# Two Chunk, Three Chunk, Overlap and Greedy: backprop and chunked look alike, overlap and greedy look
# noisier. This notebook draws the same grids (ResNet-18, 64-channel stem: 3x3 RGB filters for small
# images, 7x7 for the ImageNet stem) and adds what the paper does not have: **linear CKA** between each
# method's block outputs and backprop's, block by block, on held-out images.
#
# All methods start from the same initial net (same seed). Profiles: `quick` = digits (grayscale 8x8,
# a dozen steps: the grids only show that the code runs, they are **not meaningful**), `cpu` = a CIFAR-10
# subset at 16x16 px for a few hundred steps, `full` = ImageNet (pass `data_dir`).

# %% tags=["parameters"]
profile = "quick"          # quick | cpu | full
figures_dir = "../figures"
data_dir = "../../shared/data/cifar10-jpeg"  # cpu/full profiles (06 full: an ImageNet tree)
results_dir = "../results/similarity"        # tables of the cpu/full runs
num_threads = 1                              # torch CPU threads (0: torch's default)

# %%
import time
from pathlib import Path

import pandas as pd
import torch
from IPython.display import display

from paper_repro import plots, probes
from paper_repro.notebooks import check_parameters
from paper_repro.settings import similarity_settings
from paper_repro.train import TrainConfig

check_parameters(dict(profile=profile, figures_dir=figures_dir, data_dir=data_dir, results_dir=results_dir,
                      num_threads=num_threads),
                 dict(profile=str, figures_dir=str, data_dir=(str, type(None)), results_dir=str, num_threads=int))
device = "cuda" if torch.cuda.is_available() else "cpu"
if num_threads:
    torch.set_num_threads(num_threads)  # small models on a shared CPU: extra threads only add overhead
S = similarity_settings('features', profile)
data = probes.load_data(S, data_dir)
save_tables = profile != "quick"  # quick runs never overwrite the committed cpu/full results
if save_tables:
    Path(results_dir).mkdir(parents=True, exist_ok=True)
print(data)
S

# %% [markdown]
# Train one ResNet per method (the same initial weights for all).

# %%
cfg = TrainConfig(model=S["model"], dataset=S["dataset"], steps=S["steps"], batch_size=S["batch_size"],
                  lr=S["lr"], device=device)
t0 = time.perf_counter()
nets, summary = probes.train_nets(cfg, S["methods"], data=data)
print(f"{len(nets)} nets x {S['steps']} steps in {time.perf_counter() - t0:.0f} s")
display(summary)
if save_tables:
    summary.to_csv(Path(results_dir) / f"feature_training_{profile}.csv", index=False)

# %% [markdown]
# **Figure 1.** First-layer filters, each min-max scaled on its own (top row: the paper's figure). All
# nets start from the same random filters, and a short CPU run leaves them close to that start, so the
# bottom row shows each net's change since initialisation (`W - W_init`, also min-max scaled per
# filter). In the quick profile the net has seen a few hundred digit images: the grids are a smoke
# test, not a result.

# %%
note = " (quick profile: NOT meaningful, a few steps on 8x8 digits)" if profile == "quick" else ""
what = f"First-layer filters after {S['steps']} steps{note}"
title = plots.figure_title(what, model=S["model"], dataset=plots.data_label(data), profile=profile, device=device)
fig = plots.similarity.plot_filter_grids(nets, title, init=probes.initial_net(cfg, data))
plots.save_figure(fig, f"06_filters_{profile}", figures_dir)

# %% [markdown]
# **Figure 2.** Linear CKA (biased estimator, Kornblith et al. 2019) between block *i* of each method's
# net and block *i* of backprop's net on held-out test images (spatial dims flattened). 1 = the same
# representation up to rotation and scale. Block 1 is the stem.

# %%
x_eval = next(data.eval_batches("test", batch_size=S["cka_examples"]))[0].to(device)
cka = probes.cka_table(nets, "backprop", x_eval)
title = plots.figure_title(f"Linear CKA with backprop, per block ({len(x_eval)} test images)", model=S["model"],
                         dataset=plots.data_label(data), profile=profile, device=device)
fig = plots.similarity.plot_cka_heatmap(cka, title)
plots.save_figure(fig, f"06_cka_heatmap_{profile}", figures_dir)

# %% [markdown]
# **Claims.** The paper's statement is visual (chunked filters look like backprop's, overlap and greedy
# noisier). The measurable stand-in: CKA with backprop at the stem and averaged over blocks; the claim
# holds here if both chunked nets are closer to backprop than both overlapping and greedy nets.

# %%
claims = probes.feature_claims(cka)
display(claims)
c = claims.set_index("method").mean_cka
chunked = [m for m in c.index if m.startswith("chunked")]
others = [m for m in c.index if m in ("overlapping", "greedy")]
print("chunked closer to backprop than overlapping/greedy (mean CKA):",
      bool(c[chunked].min() > c[others].max()) if chunked and others else "n/a")
if save_tables:
    cka.to_csv(Path(results_dir) / f"cka_{profile}.csv", index=False)
    claims.to_csv(Path(results_dir) / f"feature_claims_{profile}.csv", index=False)
