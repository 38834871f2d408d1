# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 10 - The race: who reaches the target loss first on the same processes (beyond the paper)
#
# The paper's practical promise is that local parallelism trains a network *sooner* on several
# devices. The compute studies (notebook 01) count sequential steps on an ideal machine, the
# pipeline benchmark (notebook 04) measures samples per second; neither says who gets to a loss
# first. Here every strategy trains the **same model to the same targets on the same processes**
# from the same seeds, and the clock decides:
#
# * **one process**: backprop in a single process (the reference every ratio can be read against);
# * **ddp**: whole-model replicas, the step's micro-batches split between them;
# * **gpipe**, **1f1b**, **1f1b-recompute**, **zbv**, **dualpipev**: pipelined backprop on
#   `torch.distributed.pipelining` (the cpu profile; the quick one races a few);
# * **local chunked-2**, **local greedy**: the local pipeline, each stage stepping after every
#   micro-batch (so its updates are micro-batch sized);
# * **local/M chunked-2**: the local pipeline stepping once per step (pipelined backprop's updates).
#
# Each method runs at the learning rate the committed deep-MLP study found best at the batch its
# optimizer steps on (no tuning for the race). The clock starts once every process has started;
# start-up and evaluation are shown apart. The quick profile races a small MLP on the digits in
# seconds; the `cpu` profile is the deep MLP (10x256 with LayerNorm, CIFAR-10 at 8 px) on 2 CPU
# processes, at three batch sizes, three repeats.

# %% tags=["parameters"]
profile = "quick"            # quick | cpu | full
figures_dir = "../figures"   # relative paths start at this notebook's folder
results_dir = "../results"   # the race's store is results_dir/<its name>; learning rates from its studies
data_dir = None              # cpu and full: where CIFAR-10 is (e.g. /path/to/cifar10)
train_missing = True         # make the runs the store lacks (False: read the store only)
threads = 1                  # torch threads per process

# %%
import pandas as pd
from IPython.display import display

from paper_repro import analysis, plots, race, studies
from paper_repro.analysis import race as race_tables
from paper_repro.simulate import race as simulate_race
from paper_repro.simulate.engine import Link
from paper_repro.notebooks import check_parameters, notebook_path
from paper_repro.settings import race_settings

check_parameters(dict(profile=profile, figures_dir=figures_dir, results_dir=results_dir, data_dir=data_dir,
                      train_missing=train_missing, threads=threads),
                 dict(profile=str, figures_dir=str, results_dir=str, data_dir=(str, type(None)),
                      train_missing=bool, threads=int))
figures_dir, results_dir, data_dir = (notebook_path(p) for p in (figures_dir, results_dir, data_dir))
S = race_settings(profile)
runs = race.race_runs(S, results_dir)
model = plots.model_label(S.model, S.model_kwargs, S.data_kwargs.get("image_size"))
print(model, "|", S.dataset, "|", S.processes, "processes on", S.device, "| batches", list(S.batches),
      "| micro-batches per step", S.micro_batches, "| targets", list(S.targets), "| repeats", S.repeats)

# %% [markdown]
# ## The strategies and their learning rates
# `update batch` is the batch each optimizer step sees: the micro-batch for `local`.

# %%
display(pd.DataFrame([dict(strategy=r.strategy.name, batch=r.batch, update_batch=r.update_batch, method=r.method,
                           lr=r.lr) for r in runs if r.repeat == 0]).pivot(
    index="strategy", columns="batch", values="lr").rename_axis(columns="lr at batch"))

# %% [markdown]
# ## The race

# %%
store = results_dir and f"{results_dir}/{S.name}"
if train_missing:
    store = race.run_race(S, results_dir, data_dir=data_dir, threads=threads)
records = race_tables.load_race(store)
ttt = race_tables.time_to_target(records, S.targets)
table = race_tables.race_table(ttt)
print(f"{records['run_id'].nunique()} of {len(runs)} runs in {store}")

# %% [markdown]
# ## Seconds to each target, at every batch
# Median [min-max] over repeats. `speedup` is the fastest backprop strategy's seconds at that batch
# (`reference`) over this strategy's. Its training part (evaluations left out) is
# `training_time_ratio` = `examples_ratio` (the reference's examples to the target over this one's)
# x `throughput_ratio` (this one's samples/s over the reference's); evaluation and start-up seconds
# are in their own columns.

# %%
shown = ["target", "batch", "strategy", "update_batch", "seconds", "seconds_min", "seconds_max", "reached",
         "updates", "samples_per_s", "eval_seconds", "startup_seconds", "reference", "speedup",
         "training_time_ratio", "examples_ratio", "throughput_ratio"]
display(table[shown].round(3))

# %% [markdown]
# ## Every strategy at its fastest batch
# Time to target is what a user tunes the batch for.

# %%
fastest = race_tables.fastest_table(table, ttt)
if profile != "quick":  # cpu/full: the tables beside the store's runs, for the README and docs to cite
    analysis.save_tables(store, dict(race_table=table, fastest=fastest))
display(fastest.round(3))

# %%
fig = plots.plot_race(race_tables.loss_curves(records), S.targets,
                      plots.figure_title("Training-subset loss against wall-clock seconds", model=model,
                                         dataset=S.dataset, profile=profile, device=S.device))
plots.save_figure(fig, f"10_race_{profile}", figures_dir)

# %% [markdown]
# ## Predicted for more devices (a prediction, not a measurement)
# Time to each target on more devices = the committed studies' steps (at 2 devices the race's
# 10-block net, from the deep study; at 4, 8 and 16 the speedup-vs-modules study's net of that
# depth, one block per device) x the simulator's step time on per-block costs calibrated on this
# machine; DDP from a stated formula (`paper_repro.simulate.race`). Steps at a batch the study did
# not train are interpolated (`steps_from`). At 2 devices the prediction stands beside the
# measured race, evaluation left out of both: its error is shown, not tuned away.

# %%
if S.predict_devices:
    deep = pd.read_csv(f"{results_dir}/{S.lr_store}/steps_vs_batch.csv").assign(depth=10)
    modules = studies.modules_study("cpu", results_dir=results_dir, train_missing=False)
    steps = pd.concat([deep, modules.steps[modules.steps["depth"] != 10]], ignore_index=True)
    link = Link(*S.link) if S.link else Link()
    predicted = simulate_race.predict(steps, race.prediction_costs(S, store, threads), S.predict_devices,
                                      list(S.strategies), S.batches, S.targets, S.micro_batches, link)
    print("link:", f"latency {link.latency:g} s, bandwidth {link.bandwidth:g} B/s" if S.link else "ideal (not measured)")
    display(predicted.pivot_table(index=["target", "batch", "strategy"], columns="devices", values="seconds").round(1))
    error = simulate_race.prediction_error(predicted, table)
    analysis.save_tables(store, dict(predicted=predicted, prediction_error=error))
    display(error.round(3))
else:
    print(f"the {profile} profile has no committed study to predict from")

# %% [markdown]
# ## Checks

# %%
assert records["run_id"].nunique() == len(runs), "the store lacks runs: run with train_missing=True"
assert (ttt["seconds"].dropna() > 0).all()
reached = table.dropna(subset=["speedup"])
assert (reached[reached["strategy"] == reached["reference"]]["speedup"] == 1).all()
identity = reached["examples_ratio"] * reached["throughput_ratio"]
assert ((identity - reached["training_time_ratio"]).abs() <= 1e-9 * identity.abs()).all()
print("checks passed:", len(reached), "rows")
