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
# The paper shows the 8x8 grids of the 64 first-layer filters of ResNets trained with Backprop, Two
# Chunk, Three Chunk, Overlap and Greedy: backprop and chunked look alike, overlap and greedy look
# noisier. Here: a ResNet-18 with the ImageNet-style first layer (64 filters of 7x7 pixels, stride 2,
# then max-pooling), one net per method and seed; within a seed every method starts from the same
# random weights.
#
# Beside each grid, a number a reader can check: the share of each filter's energy at low spatial
# frequency (at most a quarter cycle per pixel), averaged over the 64 filters. Random filters score
# 9/49 = 0.18 (the share of frequency bins below the cutoff); smooth colour blobs and broad edges
# score near 1. Then **linear CKA** between each method's block outputs and backprop's, block by block.
#
# Profiles: `quick` = digits (8x8 grayscale, a dozen steps: the code runs, the grids mean nothing),
# `cpu` = reads the committed results of
# `python -m paper_repro.probes.run features --profile cpu --data-dir DIR` (full CIFAR-10 training set at
# 32x32 px, 4,000 steps of 16 images, 2 seeds), `full` = the same command at ImageNet scale.

# %% tags=["parameters"]
profile = "quick"          # quick | cpu | full
figures_dir = "../figures"  # relative paths start at this notebook's folder
data_dir = None             # cpu: a CIFAR-10 folder; full: a CIFAR-10 (07) or ImageNet (06) tree; quick: unused
results_dir = "../results/similarity"        # where the cpu/full runs keep their results
num_threads = 1                              # torch CPU threads (0: torch's default)

# %% [markdown]
# The quick profile trains its nets here, in a temporary folder; the other profiles read the saved
# results (the long runs are made by the command above, which saves each method as it finishes).

# %%
from pathlib import Path

import pandas as pd
import torch
from IPython.display import display

from paper_repro import plots, probes
from paper_repro.notebooks import check_parameters, notebook_path

check_parameters(dict(profile=profile, figures_dir=figures_dir, data_dir=data_dir, results_dir=results_dir,
                      num_threads=num_threads),
                 dict(profile=str, figures_dir=str, data_dir=(str, type(None)), results_dir=str, num_threads=int))
figures_dir, results_dir, data_dir = (notebook_path(p) for p in (figures_dir, results_dir, data_dir))
S, root = probes.experiment("features", profile, data_dir, results_dir, threads=num_threads)
S

# %%
result = probes.load_features(root)
n_images = S.steps * S.batch_size
print(f"seeds saved: {result['seeds']}; {S.steps} steps of {S.batch_size} images = {n_images:,} images "
      f"seen per net")
display(result["training"][["method", "seed", "status", "final_loss", "eval_acc", "wall_time_s"]])

# %% [markdown]
# **Figure 1.** First-layer filters of the first seed, each min-max scaled on its own. Top row: the
# common random start, then each method's filters (the paper's figure); bottom row: each net's change
# since the start. The number under each name is the mean low-frequency share.

# %%
note = " (quick profile: NOT meaningful)" if profile == "quick" else ""
dataset = "digits 8x8" if S.dataset == "digits" else f"{S.dataset} (full training set, 32x32 px)"
title = plots.figure_title(f"First-layer filters after {n_images:,} training images, seed {result['seed']}{note}",
                           model="ResNet-18, 7x7 stride-2 first layer", dataset=dataset, profile=profile)
fig = plots.similarity.plot_filter_weights(result["stems"], title, init=result["init"])
plots.save_figure(fig, f"06_filters_{profile}", figures_dir)

# %% [markdown]
# **The number.** The low-frequency share of each net's filters averaged over its 64 filters, then
# the mean over seeds with its min and max (one row per method), and below it every seed (with the sd
# over filters and the share of the change since the start). The random-filter reference is 0.18 for
# 7x7 filters.

# %%
structure = result["filter_structure"]
print(f"reference for random {result['init'].shape[-1]}x{result['init'].shape[-1]} filters: "
      f"{probes.noise_low_frequency_fraction(result['init'].shape[-1]):.3f}")
display(result["filter_summary"].round(3))
display(structure.round(3))

# %% [markdown]
# **Figure 2.** Linear CKA (Kornblith et al. 2019) between block *i* of each net and block *i* of
# backprop's net of the same seed on held-out test images, averaged over seeds. 1 = the same
# representation up to rotation and scale. Block 1 is the first layer (with its pooling).

# %%
cka = result["cka_summary"]
if cka is None:
    print("CKA needs every method of a seed: no seed has finished yet")
else:
    n_seeds = int(cka.seeds.max())
    title = plots.figure_title(f"Linear CKA with backprop, per block ({S.cka_examples} test images, "
                               f"mean of {n_seeds} seed{'s' * (n_seeds > 1)})",
                               model="ResNet-18, 7x7 stride-2 first layer", dataset=dataset, profile=profile)
    fig = plots.similarity.plot_cka_heatmap(cka, title)
    plots.save_figure(fig, f"06_cka_heatmap_{profile}", figures_dir)

# %% [markdown]
# **Claims.** CKA with backprop at the first block, the last block and averaged over blocks (mean
# over seeds). The paper's visual claim holds here if both chunked nets are closer to backprop than
# overlapping and greedy.

# %%
if cka is not None:
    claims = probes.feature_claims(cka)
    display(claims)
    c = claims.set_index("method").mean_cka
    chunked = [m for m in c.index if m.startswith("chunked")]
    others = [m for m in c.index if m in ("overlapping", "greedy")]
    print("chunked closer to backprop than overlapping/greedy (mean CKA):",
          bool(c[chunked].min() > c[others].max()) if chunked and others else "n/a")

# %% [markdown]
# **Training length.** The `cpu` results of the same experiment after 800 steps (12,800 images), where
# they are kept: how the low-frequency share of each method moves with longer training.

# %%
short = Path(results_dir) / f"features_{profile}_800steps"
if profile != "quick" and short.exists():
    longer = result["filter_summary"].set_index("method").low_freq_mean.rename(f"{n_images:,} images")
    shorter = probes.load_features(short)["filter_summary"].set_index("method").low_freq_mean.rename("12,800 images")
    display(pd.concat([shorter, longer], axis=1).round(3))

# %% [markdown]
# ## Checks
# The numbers behind the figures: every net trained to the end; linear CKA of a representation with
# itself is 1 (and unchanged by a rotation and a rescaling), so backprop's row of the heat map is 1
# at every block; every CKA lies in [0, 1]; every method has one value per block; the claims are
# the heat map's first, last and mean columns; low-frequency shares lie in [0, 1]. These hold at
# every profile.

# %%
X = torch.randn(64, 20, generator=torch.Generator().manual_seed(0))
Q = torch.linalg.qr(torch.randn(20, 20, generator=torch.Generator().manual_seed(1)))[0]
assert abs(probes.linear_cka(X, X) - 1) < 1e-5 and abs(probes.linear_cka(X, 3 * X @ Q) - 1) < 1e-5
training = result["training"]
assert set(training.method) == set(S.methods) and (training.status == "finished").all(), training
assert (training.steps == S.steps).all() and cka.cka.between(0, 1 + 1e-6).all(), cka
assert (cka[cka.method == "backprop"].cka - 1).abs().max() < 1e-4
blocks = cka.groupby("method").layer.apply(sorted)
assert set(blocks.index) == set(S.methods) and blocks.map(blocks["backprop"].__eq__).all(), blocks
per_method = cka.groupby("method").cka
assert (claims.set_index("method").mean_cka - per_method.mean()[claims.method].values).abs().max() < 1e-3
assert (claims.set_index("method").last_cka - per_method.last()[claims.method].values).abs().max() < 1e-3
assert result["filter_summary"].low_freq_mean.between(0, 1).all()
