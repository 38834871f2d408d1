"""Write notebooks/05_gradient_similarity, 06_feature_similarity and 07_random_labels.

    .venv/bin/python tools/build_similarity_notebooks.py

The notebooks are thin: settings come from ``paper_repro.similarity.settings``, the work
from package functions. Re-run this after changing a cell here (outputs are not kept).
"""
from pathlib import Path

import nbformat

from nbtools import NB_DIR, code, md, notebook

PARAMS = '''profile = "quick"          # quick | cpu | full
figures_dir = "../figures"
data_dir = "../../shared/data/cifar10-jpeg"  # cpu/full profiles (06 full: an ImageNet tree)
results_dir = "../results/similarity"        # tables of the cpu/full runs
num_threads = 1                              # torch CPU threads (0: torch's default)'''

SETUP = '''import time
from pathlib import Path

import pandas as pd
import torch
from IPython.display import display

from paper_repro import similarity as sim
from paper_repro.notebooks import check_parameters
from paper_repro.train import TrainConfig

check_parameters(dict(profile=profile, figures_dir=figures_dir, data_dir=data_dir, results_dir=results_dir,
                      num_threads=num_threads),
                 dict(profile=str, figures_dir=str, data_dir=(str, type(None)), results_dir=str, num_threads=int))
device = "cuda" if torch.cuda.is_available() else "cpu"
if num_threads:
    torch.set_num_threads(num_threads)  # small models on a shared CPU: extra threads only add overhead
S = sim.settings({name!r}, profile)
data = sim.load_data(S, data_dir)
save_tables = profile != "quick"  # quick runs never overwrite the committed cpu/full results
if save_tables:
    Path(results_dir).mkdir(parents=True, exist_ok=True)
print(data)
S'''


def nb05():
    return notebook([
        md('''
# 05 - Gradient similarity: how close is a local update to the true gradient?

The paper's probing figure: a 5-module net trained **greedily**; at the same parameters and on the
same batch, the cosine between each layer's local-update gradient and the gradient that
end-to-end backprop of the final loss would give. The paper's curves (10,000 iterations):
last layer 1.0, 4th ~0.95-1.0, 3rd ~0.6-0.75, 2nd ~0.4-0.5, 1st ~0.25-0.3.

Here: an MLP of 5 blocks (a "layer" = a block, numbered from 1), trained with greedy, overlapping
and chunked-2 updates; `sim.GradientCosineRecorder` (a `train.train` callback) computes both
gradients with `torch.autograd.grad` every few steps, so training itself is untouched.
Profiles: `quick` = digits (offline, seconds), `cpu` = a CIFAR-10 subset, `full` = CIFAR-10, 10k steps.
'''),
        code(PARAMS, tags=["parameters"]),
        code(SETUP.format(name="gradient")),
        md("Train every method with every seed, recording the per-layer cosine (a band over seeds below)."),
        code('''
cfg = TrainConfig(model="mlp", dataset=S["dataset"], steps=S["steps"], batch_size=S["batch_size"], lr=S["lr"],
                  device=device, model_kwargs=dict(depth=S["depth"], width=S["width"]))
t0 = time.perf_counter()
df = sim.gradient_similarity_runs(cfg, S["methods"], S["seeds"], S["every"], data=data)
print(f"{len(S['methods'])} methods x {len(S['seeds'])} seeds x {S['steps']} steps in {time.perf_counter() - t0:.0f} s")
if save_tables:
    df.to_csv(Path(results_dir) / f"gradient_cosine_{profile}.csv", index=False)
'''),
        md('''
**Figure.** Cosine similarity vs iteration, one line per layer, shaded band = one standard deviation over
seeds. Greedy (left) is the paper's figure; overlapping and chunked-2 are extra panels. In every method
the last block sees only the final loss, so its line sits at 1; chunked-2 backprops through its whole
second chunk, so layers 4-5 are at 1 there.
'''),
        code('''
title = sim.figure_title("Cosine(local update, backprop gradient) per layer",
                         model=f"MLP {S['depth']}x{S['width']}", dataset=sim.data_label(data),
                         profile=profile, device=device)
fig = sim.plot_gradient_cosine(df, title, S["methods"])
sim.save_figure(fig, f"05_gradient_similarity_{profile}", figures_dir)
'''),
        md('''
**Claims.** Mean cosine over the last 20% of training per layer (greedy), sd over seeds, next to the
range read off the paper's figure. `in_paper_range` allows +-0.025. The qualitative claim is that
similarity rises with depth.
'''),
        code('''
claims = sim.gradient_claims(df, "greedy")
display(claims)
print("similarity rises with depth (layer 1 < ... < 5):", sim.ordering_holds(claims))
for method in S["methods"][1:]:
    display(sim.gradient_claims(df, method)[["layer", "measured", "sd_over_seeds"]].assign(method=method))
if save_tables:
    claims.to_csv(Path(results_dir) / f"gradient_claims_{profile}.csv", index=False)
'''),
    ])


def nb06():
    return notebook([
        md('''
# 06 - Feature similarity: first-layer filters and layer-wise CKA against backprop

The paper shows the 8x8 grids of the 64 first-layer conv filters of ResNets trained with Backprop,
Two Chunk, Three Chunk, Overlap and Greedy: backprop and chunked look alike, overlap and greedy look
noisier. This notebook draws the same grids (ResNet-18, 64-channel stem: 3x3 RGB filters for small
images, 7x7 for the ImageNet stem) and adds what the paper does not have: **linear CKA** between each
method's block outputs and backprop's, block by block, on held-out images.

All methods start from the same initial net (same seed). Profiles: `quick` = digits (grayscale 8x8,
a dozen steps: the grids only show that the code runs, they are **not meaningful**), `cpu` = a CIFAR-10
subset at 16x16 px for a few hundred steps, `full` = ImageNet (pass `data_dir`).
'''),
        code(PARAMS, tags=["parameters"]),
        code(SETUP.format(name="features")),
        md("Train one ResNet per method (the same initial weights for all)."),
        code('''
cfg = TrainConfig(model=S["model"], dataset=S["dataset"], steps=S["steps"], batch_size=S["batch_size"],
                  lr=S["lr"], device=device)
t0 = time.perf_counter()
nets, summary = sim.train_nets(cfg, S["methods"], data=data)
print(f"{len(nets)} nets x {S['steps']} steps in {time.perf_counter() - t0:.0f} s")
display(summary)
if save_tables:
    summary.to_csv(Path(results_dir) / f"feature_training_{profile}.csv", index=False)
'''),
        md('''
**Figure 1.** First-layer filters, each min-max scaled on its own (top row: the paper's figure). All
nets start from the same random filters, and a short CPU run leaves them close to that start, so the
bottom row shows each net's change since initialisation (`W - W_init`, also min-max scaled per
filter). In the quick profile the net has seen a few hundred digit images: the grids are a smoke
test, not a result.
'''),
        code('''
note = " (quick profile: NOT meaningful, a few steps on 8x8 digits)" if profile == "quick" else ""
what = f"First-layer filters after {S['steps']} steps{note}"
title = sim.figure_title(what, model=S["model"], dataset=sim.data_label(data), profile=profile, device=device)
fig = sim.plot_filter_grids(nets, title, init=sim.initial_net(cfg, data))
sim.save_figure(fig, f"06_filters_{profile}", figures_dir)
'''),
        md('''
**Figure 2.** Linear CKA (biased estimator, Kornblith et al. 2019) between block *i* of each method's
net and block *i* of backprop's net on held-out test images (spatial dims flattened). 1 = the same
representation up to rotation and scale. Block 1 is the stem.
'''),
        code('''
x_eval = next(data.eval_batches("test", batch_size=S["cka_examples"]))[0].to(device)
cka = sim.cka_table(nets, "backprop", x_eval)
title = sim.figure_title(f"Linear CKA with backprop, per block ({len(x_eval)} test images)", model=S["model"],
                         dataset=sim.data_label(data), profile=profile, device=device)
fig = sim.plot_cka_heatmap(cka, title)
sim.save_figure(fig, f"06_cka_heatmap_{profile}", figures_dir)
'''),
        md('''
**Claims.** The paper's statement is visual (chunked filters look like backprop's, overlap and greedy
noisier). The measurable stand-in: CKA with backprop at the stem and averaged over blocks; the claim
holds here if both chunked nets are closer to backprop than both overlapping and greedy nets.
'''),
        code('''
claims = sim.feature_claims(cka)
display(claims)
c = claims.set_index("method").mean_cka
chunked = [m for m in c.index if m.startswith("chunked")]
others = [m for m in c.index if m in ("overlapping", "greedy")]
print("chunked closer to backprop than overlapping/greedy (mean CKA):",
      bool(c[chunked].min() > c[others].max()) if chunked and others else "n/a")
if save_tables:
    cka.to_csv(Path(results_dir) / f"cka_{profile}.csv", index=False)
    claims.to_csv(Path(results_dir) / f"feature_claims_{profile}.csv", index=False)
'''),
    ])


def nb07():
    return notebook([
        md('''
# 07 - Fitting random labels: local learning memorises less

The paper trains on CIFAR-10 with every label replaced by a random one and plots training accuracy
per epoch: after 100 epochs backprop reaches ~0.78 and greedy local learning ~0.28 (chance 0.1), i.e.
local updates have less capacity to memorise. The paper's architecture for this figure is not known
to us, so two nets are trained here: a 5-block MLP and a narrow ResNet-18; backprop vs greedy vs
chunked-2, training accuracy measured on the training set *with its random labels* after every epoch.
Profiles: `quick` = digits (seconds), `cpu` = CIFAR-10 subsets (MLP: 5,000 images, 100 epochs;
ResNet-18 width 16: 2,500 images at 16x16 px, 40 epochs), `full` = all of CIFAR-10, 100 epochs.
'''),
        code(PARAMS, tags=["parameters"]),
        code(SETUP.format(name="random_labels").replace("data = sim.load_data(S, data_dir)\n", "")
             .replace("print(data)\n", "")),
        md("One set of runs per net (each with its own data subset and epochs, see `S['runs']`)."),
        code('''
frames, datasets = [], {}
t0 = time.perf_counter()
for run in S["runs"]:
    data = datasets[run["label"]] = sim.load_data({**S, **run}, data_dir)
    cfg = TrainConfig(model=run["model"], dataset=S["dataset"], batch_size=run["batch_size"], lr=run["lr"],
                      device=device, model_kwargs=run["model_kwargs"])
    frames.append(sim.random_label_runs(cfg, S["methods"], S["seeds"], run["epochs"], data=data)
                  .assign(model=run["label"]))
    print(f"{run['label']}: {data}, {run['epochs']} epochs, {time.perf_counter() - t0:.0f} s so far")
df = pd.concat(frames, ignore_index=True)
if save_tables:
    df.to_csv(Path(results_dir) / f"random_labels_{profile}.csv", index=False)
'''),
        md("**Figures.** Training accuracy on random labels vs epoch, one figure per net; dashed line = chance."),
        code('''
for run in S["runs"]:
    data = datasets[run["label"]]
    title = sim.figure_title(f"Fitting random labels ({data.num_examples('train')} images, {run['epochs']} epochs)",
                             model=run["label"], dataset=sim.data_label(data), profile=profile, device=device)
    fig = sim.plot_random_labels(df[df.model == run["label"]], title, chance=1 / data.num_classes)
    print(sim.save_figure(fig, f"07_random_labels_{run['model']}_{profile}", figures_dir))
'''),
        md('''
**Claims.** Final-epoch training accuracy next to the paper's (100 epochs, full CIFAR-10, its own
architecture). The qualitative claim: backprop memorises clearly more than greedy local learning.
'''),
        code('''
claims = sim.random_label_claims(df)
display(claims)
for model, c in claims.groupby("model", sort=False):
    acc = c.set_index("method").measured_acc
    print(f"{model}: backprop - greedy = {acc['backprop'] - acc['greedy']:+.3f} (chance 0.1)")
if save_tables:
    claims.to_csv(Path(results_dir) / f"random_label_claims_{profile}.csv", index=False)
'''),
    ])


if __name__ == "__main__":
    for name, build in (("05_gradient_similarity", nb05), ("06_feature_similarity", nb06),
                        ("07_random_labels", nb07)):
        nbformat.write(build(), str(NB_DIR / f"{name}.ipynb"))
        print("wrote", NB_DIR / f"{name}.ipynb")
