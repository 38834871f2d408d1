# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 - Transformer: compute efficiency of local parallelism
#
# Does local parallelism reach a target training loss in less *time* than backprop for the same
# *compute*, and where? We sweep method x batch size x learning rate x seed, then apply the
# accounting of `docs/compute_efficiency.md` (our reconstruction of the paper's, `docs/paper.md`):
#
# * a run **reaches a target** at the first evaluation of the net's own head on a fixed subset of
#   the *training* set at or below it; evaluations come every k training examples, the same k for
#   every batch size, so a short large-batch run and a long small-batch run are judged alike;
# * **compute** to a target = examples seen x FLOPs per example of forward + backward of all
#   blocks and heads (measured with `torch.utils.flop_counter`);
# * **time** to a target = steps x the FLOPs of one step's *critical path* on an ideal machine
#   (one device per local module, unlimited data parallelism, free communication) + one
#   pipeline fill for local methods;
# * per (method, batch size, learning rate) the **median over seeds**; per method a **staircase
#   frontier** (the best time reached with at most that compute, never interpolated), and the
#   **speedup** = backprop's time / the method's time at equal compute, where both have data.
#
# The paper's headline for this architecture is **up to 2x** fewer sequential compute steps
# than backprop in the *high-compute regime*: where bigger batches no longer cut the number of
# steps. The steps-vs-batch figure below shows where that regime starts.
# Quick profile (what the tests run): a 4-layer d=32 byte-level Transformer on Python's pydoc text. `cpu`
# profile: the same model on 16-byte windows, batches of 2-512 windows (`paper_repro.settings`). Results of the
# `cpu`/`full` profiles are kept in `results/<sweep>/`; a rerun only adds missing points.

# %% tags=["parameters"]
profile = "quick"           # quick | cpu | full
figures_dir = "../figures"
results_dir = "../results"  # cpu/full: the sweep store lives in results_dir/<sweep name>
data_dir = None             # full: an LM1B-style text file or folder (None: pydoc corpus)
device = "cpu"              # full: "cuda" (one worker per GPU)
workers = 1                 # parallel sweep workers
rule = None                 # None: the profile's target rule ("eval", "examples:W" or "steps:w")
targets = None              # None: the profile's targets (or picked from the data)
train_missing = True        # False: only read the points already in the store (cpu/full)
allow_cpu = False           # full profile: True trains it on the CPU on purpose (GPU-hours of work)

# %%
from IPython.display import display

from paper_repro import analysis, plots, studies
from paper_repro.notebooks import check_parameters, notebook_path

check_parameters(dict(profile=profile, figures_dir=figures_dir, results_dir=results_dir, data_dir=data_dir,
                      device=device, workers=workers, rule=rule, targets=targets, train_missing=train_missing,
                      allow_cpu=allow_cpu),
                 dict(profile=str, figures_dir=str, results_dir=str, data_dir=(str, type(None)), device=str,
                      workers=int, rule=(str, type(None)), targets=(list, type(None)), train_missing=bool,
                      allow_cpu=bool))
figures_dir, results_dir, data_dir = (notebook_path(p) for p in (figures_dir, results_dir, data_dir))
S = studies.compute_study("transformer", profile, results_dir=results_dir, data_dir=data_dir, device=device,
                          workers=workers, rule=rule, targets=targets, train_missing=train_missing,
                          allow_cpu=allow_cpu)
print(S.summary())

# %% [markdown]
# ## Cost per step
# Per-example FLOPs of one training step (`paper_repro.cost.step_cost`): total (all blocks and
# heads, forward + backward), the critical path on the ideal machine, and the one-off pipeline
# fill. Backprop's critical path over a local method's bounds the speedup that method could
# reach if it needed no more steps than backprop.

# %%
analysis.cost_table(S.records)

# %% [markdown]
# ## The loss that decides a target
# Training-subset loss (nats per byte) of the network's own head vs examples seen, best learning rate of each
# method at a few batch sizes (line: mean over seeds; band: their range).

# %%
fig = plots.efficiency.plot_loss_curves(S.records, S.title("Training-subset loss vs examples"), rule=S.rule)
plots.save_figure(fig, S.figure("loss"), figures_dir);

# %% [markdown]
# ## Where bigger batches stop helping
# Steps to each target vs batch size, best learning rate per batch size (bars: range over seeds),
# with the perfect-scaling line (doubling the batch halves the steps). Where a method's curve
# flattens, data parallelism has hit diminishing returns: the high-compute regime of the paper's
# claim. The table gives the critical batch size `E_min / S_min` (McCandlish et al., 2018) and
# `last_doubling`, the steps at the second-largest batch over the largest (the project's bar for the
# high-compute regime: below 1.25).

# %%
fig = plots.efficiency.plot_steps_vs_batch(S.tables.steps_vs_batch, S.title("Steps to target vs batch size"))
plots.save_figure(fig, S.figure("steps_vs_batch"), figures_dir);

# %%
S.tables.critical

# %% [markdown]
# ## Time vs compute to a target loss
# Dots: every (batch size, learning rate) configuration that reached the target (median over
# seeds); steps: each method's staircase frontier. Moving right means bigger batches: more
# compute, fewer sequential steps.

# %%
display(S.tables.configs.groupby(["target", "method"]).reached.agg(["sum", "count"]).unstack("method"))
fig = plots.efficiency.plot_frontiers(S.tables.configs, S.tables.fronts, S.title("Time vs compute to target (staircase frontiers)"))
plots.save_figure(fig, S.figure("pareto"), figures_dir);

# %% [markdown]
# ## Speedup over backprop at equal compute
# Backprop's staircase time over the method's, from where both frontiers start to the largest
# compute both ran; the band is the same curve computed from each seed alone. Above the dashed
# line the local method is faster. The table gives the maximum and the value at the high-compute
# end, each with its range over seeds.

# %%
fig = plots.efficiency.plot_speedup_band(S.tables.speedup, list(S.tables.per_seed.values()),
                                         S.title("Speedup over backprop at equal compute"))
plots.save_figure(fig, S.figure("speedup"), figures_dir);
S.tables.headline

# %% [markdown]
# ## Does the reading of "reached" drive the result?
# The same headline under each reasonable target rule: the evaluation on the training subset, and
# the training loss smoothed over windows counted in examples. `agrees` says whether every rule is
# within 20% of the median over rules.

# %%
sensitivity = S.sensitivity()
spread = analysis.sensitivity_spread(sensitivity)
S.save(sensitivity=sensitivity, sensitivity_spread=spread)  # cpu/full: CSV files beside the store's points
spread

# %% [markdown]
# ## Learning rates at the grid's edge
# At the lowest target, the (method, batch size) whose best learning rate is the smallest or the
# largest the grid swept there (`only`: one was swept). A best at an edge might be beaten beyond
# it, so the grid should be extended there before the numbers above are trusted.

# %%
S.lr_edges()[["method", "batch_size", "lr", "edge", "swept"]]

# %% [markdown]
# ## The paper's claim beside this measurement
# At the lowest target, the largest speedup over the local methods (`measured_max`) and the
# largest at the high-compute end (`measured_high_compute`), each with its range over seeds, and
# the profile, data set and hardware. At the quick profile the runs are tiny and these numbers say
# little; the README reports the `cpu` profile.

# %%
S.claims(2, "Transformer: fewer sequential compute steps than backprop (high-compute regime)")

# %% [markdown]
# ## Checks
# The numbers behind the figures: backprop reaches every target. In the steps-vs-batch figure each
# point (a median over seeds) lies within its bars, its examples are its steps x its batch size, and
# along a curve the steps never grow with the batch size by more than 10% of the curve's largest
# value. The critical batch is E_min / S_min of those points; every speedup is positive; every
# staircase frontier's time falls as its compute grows. These hold at every profile.

# %%
problems = S.problems()
assert not problems, problems
assert (S.tables.fronts.groupby(["method", "target"]).time.apply(lambda t: (t.diff().dropna() < 0).all())).all()
