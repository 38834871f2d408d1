"""The probing studies: runs of several methods and their comparison with the paper.

* gradient similarity: :func:`gradient_similarity_runs` (methods x seeds, the cosine of
  :mod:`.gradients` every few steps) and :func:`gradient_claims` beside the paper's ranges;
* feature similarity: :func:`train_nets` (one net per method from the same initial net,
  :func:`initial_net`) and :func:`feature_claims` of a :func:`~.cka.cka_table`;
* random labels: :func:`random_label_runs` (train accuracy per epoch) and
  :func:`random_label_claims`.

The sizes of each study and profile live in :mod:`paper_repro.settings`; the figures in
:mod:`paper_repro.plots.similarity`.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from .. import data as data_mod
from .. import train as train_mod
from ..models import BlockNet
from .gradients import GradientCosineRecorder


def load_data(s, data_dir=None, data_kwargs: dict | None = None):
    """The data set of study settings ``s``: its ``dataset`` with its ``data_kwargs``, or with
    ``data_kwargs`` when given (``data_dir`` is ignored for the offline digits)."""
    kwargs = s.data_kwargs if data_kwargs is None else data_kwargs
    return data_mod.load(s.dataset, None if s.dataset == "digits" else data_dir, **kwargs)


# ------------------------------------------------------------------- gradient similarity
def gradient_similarity_runs(cfg: train_mod.TrainConfig, methods: list[str], seeds: list[int], every: int,
                             data=None) -> pd.DataFrame:
    """Train ``cfg`` once per method x seed, recording the gradient cosine every ``every`` steps.

    Returns a tidy DataFrame: method, seed, step, layer, cosine."""
    data = data if data is not None else train_mod.load_data(cfg)
    frames = []
    for method in methods:
        for seed in seeds:
            run_cfg = dataclasses.replace(cfg, method=method, seed=seed, eval_every=0)
            rec = GradientCosineRecorder(every)
            result = train_mod.train(run_cfg, data=data, callback=rec)
            if result.status != "finished":
                raise RuntimeError(f"{method} seed {seed} diverged; lower the learning rate ({cfg.lr})")
            frames.append(rec.frame().assign(method=method, seed=seed))
    return pd.concat(frames, ignore_index=True)[["method", "seed", "step", "layer", "cosine"]]


# The paper's greedy 5-module curves, read off its figure (docs/paper.md): layer -> (low, high).
PAPER_GREEDY_COSINE = {5: (1.0, 1.0), 4: (0.95, 1.0), 3: (0.6, 0.75), 2: (0.4, 0.5), 1: (0.25, 0.3)}


def gradient_claims(df: pd.DataFrame, method: str = "greedy", last_fraction: float = 0.2) -> pd.DataFrame:
    """Mean (and sd over seeds) cosine per layer over the last ``last_fraction`` of steps,
    next to the paper's range for the greedy 5-module net."""
    d = df[df.method == method]
    if d.empty:
        raise ValueError(f"no rows for method {method!r}; have: {sorted(df.method.unique())}")
    cut = d.step.max() * (1 - last_fraction)
    per_seed = d[d.step >= cut].groupby(["layer", "seed"]).cosine.mean()
    out = per_seed.groupby("layer").agg(["mean", "std"]).rename(columns={"mean": "measured", "std": "sd_over_seeds"})
    n_layers = int(d.layer.max())
    rows = []
    for layer, r in out.iterrows():
        paper_layer = 5 - (n_layers - layer)  # align from the top: the last layer is the paper's 5th
        lo, hi = PAPER_GREEDY_COSINE.get(paper_layer, (math.nan, math.nan))
        rows.append({"layer": layer, "paper_low": lo, "paper_high": hi, "measured": round(r.measured, 3),
                     "sd_over_seeds": round(r.sd_over_seeds, 3) if np.isfinite(r.sd_over_seeds) else math.nan,
                     "in_paper_range": bool(lo - 0.025 <= r.measured <= hi + 0.025)})
    return pd.DataFrame(rows)


def ordering_holds(claims: pd.DataFrame) -> bool:
    """The paper's qualitative claim: similarity rises with depth (layer 1 < 2 < ... < last)."""
    return bool(np.all(np.diff(claims.sort_values("layer").measured.to_numpy()) > 0))


# --------------------------------------------------------------------- feature similarity
def feature_claims(cka: pd.DataFrame, reference: str = "backprop") -> pd.DataFrame:
    """Per method: CKA with the reference at the stem (layer 1), at the last block and the
    mean over blocks; the paper's visual claim is that chunked nets stay closer to backprop's
    features than overlapping and greedy ones."""
    d = cka[cka.method != reference]
    out = d.groupby("method", sort=False).agg(stem_cka=("cka", "first"), last_cka=("cka", "last"),
                                              mean_cka=("cka", "mean")).reset_index()
    return out.round(3)


def initial_net(cfg: train_mod.TrainConfig, data) -> BlockNet:
    """The net every method of ``cfg`` starts from (``build_learner`` seeds, then builds the
    net before any auxiliary head, so the initial net does not depend on the method)."""
    return train_mod.build_learner(dataclasses.replace(cfg, method="backprop"), data).net.eval()


def train_nets(cfg: train_mod.TrainConfig, methods: list[str], data=None) -> tuple[dict[str, BlockNet], pd.DataFrame]:
    """Train ``cfg`` once per method (same seed: the same initial net); returns the nets by
    method and a summary table (method, final train loss, test accuracy, wall time)."""
    data = data if data is not None else train_mod.load_data(cfg)
    nets, rows = {}, []
    for method in methods:
        result = train_mod.train(dataclasses.replace(cfg, method=method, eval_every=0), data=data)
        s = result.summary()
        rows.append({"method": method, "status": s["status"], "final_loss": s["final_loss"],
                     "test_acc": s["eval_acc"], "wall_time_s": s["wall_time_s"]})
        nets[method] = result.learner.net.eval()
    return nets, pd.DataFrame(rows)


# --------------------------------------------------------------------------- random labels
def random_label_runs(cfg: train_mod.TrainConfig, methods: list[str], seeds: list[int], epochs: int,
                      data=None) -> pd.DataFrame:
    """Training accuracy (on the training set with its random labels) after each epoch.

    ``data`` (or ``cfg``'s data set) gets random labels drawn with each seed; one epoch is
    ``ceil(n_train / batch_size)`` steps (the sampler shuffles every epoch). Returns a tidy
    DataFrame: method, seed, epoch (0 = initial net), train_acc, train_loss."""
    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1:
        raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
    base = data if data is not None else train_mod.load_data(cfg)
    rows = []
    for seed in seeds:
        shuffled = base.with_random_labels(seed)
        per_epoch = math.ceil(shuffled.num_examples("train") / cfg.batch_size)
        for method in methods:
            run_cfg = dataclasses.replace(cfg, method=method, seed=seed, steps=epochs * per_epoch, eval_every=0)

            def record(learner, epoch):
                loss, acc = train_mod.evaluate(learner.net, shuffled, "train", None, cfg.device)
                rows.append({"method": method, "seed": seed, "epoch": epoch, "train_acc": acc, "train_loss": loss})

            def callback(step, learner, x, y):  # before update `step`: `step - 1` updates done
                if (step - 1) % per_epoch == 0:
                    record(learner, (step - 1) // per_epoch)

            result = train_mod.train(run_cfg, data=shuffled, callback=callback)
            if result.status != "finished":
                raise RuntimeError(f"{method} seed {seed} diverged; lower the learning rate ({cfg.lr})")
            record(result.learner, epochs)
    return pd.DataFrame(rows)


# The paper's random-label figure after 100 epochs (docs/paper.md); chunked-2 is not in the paper.
PAPER_RANDOM_LABELS = {"backprop": 0.78, "greedy": 0.28}


def last_epochs(epochs: int, last_fraction: float = 0.1) -> int:
    """How many final epochs make the last ``last_fraction`` of a run (at least one)."""
    if not 0 < last_fraction <= 1:
        raise ValueError(f"last_fraction must be in (0, 1], got {last_fraction!r}")
    return max(1, round(epochs * last_fraction))


def random_label_claims(df: pd.DataFrame, last_fraction: float = 0.1) -> pd.DataFrame:
    """Training accuracy on random labels per method, over the last ``last_fraction`` of epochs
    and over seeds, next to the paper's; one block of rows per ``model`` when ``df`` has that column.

    ``mean_acc``: mean over seeds of each seed's mean over the final epochs; ``sd_over_seeds``:
    the sd of those per-seed means (NaN for one seed); ``sd_over_epochs``: the sd over the final
    epochs within a seed, averaged over seeds (how much one epoch differs from the next);
    ``min_acc`` / ``max_acc``: the extremes of every final epoch of every seed."""
    out = []
    for model, d in (df.groupby("model", sort=False) if "model" in df else [(None, df)]):
        epochs = int(d.epoch.max())
        k = last_epochs(epochs, last_fraction)
        window = d[d.epoch > epochs - k]
        rows = []
        for method, w in window.groupby("method", sort=False):
            per_seed = w.groupby("seed").train_acc
            rows.append({"method": method, "epochs": epochs, "last_epochs": k,
                         "n_train": int(w.n_train.iloc[0]) if "n_train" in w else None,
                         "seeds": int(per_seed.ngroups),
                         "paper_acc_100_epochs": PAPER_RANDOM_LABELS.get(method, math.nan),
                         "mean_acc": round(float(per_seed.mean().mean()), 3),
                         "sd_over_seeds": round(float(per_seed.mean().std()), 3) if per_seed.ngroups > 1 else math.nan,
                         "sd_over_epochs": round(float(per_seed.std(ddof=0).mean()), 3),
                         "min_acc": round(float(w.train_acc.min()), 3), "max_acc": round(float(w.train_acc.max()), 3)})
        rows = pd.DataFrame(rows)
        out.append(rows if model is None else rows.assign(model=model)[["model", *rows.columns]])
    return pd.concat(out, ignore_index=True)
