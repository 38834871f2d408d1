"""The long probing experiments, resumable: first-layer filters + CKA, and random labels over seeds.

Each function trains one unit of work at a time (one method; one method x seed) and saves it
to a :class:`~.store.UnitStore` folder as soon as it finishes, skipping the units already
there, then rebuilds the summary tables from every saved unit. Stopping a run loses at most
the unit in progress; running the same call again continues where it stopped.

* :func:`run_features` one ResNet per method and seed, every method of a seed from the same
  initial net: the stem filters (``<method>_s<seed>.pt``), the training summary
  (``<method>_s<seed>.json``) and the whole net (``nets/<method>_s<seed>.pt``, for CKA; large,
  kept out of version control); tables ``filter_structure.csv`` and ``filter_summary.csv``
  (low-frequency share per seed, and over seeds), ``training.csv`` and, for each seed whose
  methods have all finished, ``cka.csv`` and ``cka_summary.csv``.
* :func:`run_random_labels` training accuracy on random labels after every epoch, one unit
  per net x method x seed; tables ``random_labels.csv`` and ``random_label_summary.csv``.

:func:`load_features` and :func:`load_random_labels` read the saved results back (what the
notebooks' ``cpu`` profile draws); :func:`experiment` is where notebooks 06 and 07 start: the
settings and the folder of the runs, trained there and then at the quick profile.
"""
from __future__ import annotations

import dataclasses
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Callable

import pandas as pd
import torch

from .. import settings
from .. import train as train_mod
from ..settings.types import FeatureSettings, RandomLabelRun, RandomLabelSettings
from .cka import cka_table
from .filters import filter_structure, first_conv
from .store import UnitStore
from .method_runs import initial_net, load_data, random_label_claims, random_label_runs

Log = Callable[[str], None]


def _stamp(log: Log, text: str) -> None:
    log(f"[{time.strftime('%H:%M:%S')}] {text}")


def progress_callback(log: Log, label: str, total: int, every: int = 100):
    """A ``train.train`` callback that logs the step and the elapsed time every ``every`` steps."""
    start = time.perf_counter()

    def callback(step, learner, x, y):
        if step % every == 0:
            elapsed = time.perf_counter() - start
            _stamp(log, f"{label}: step {step}/{total}, {elapsed:.0f} s, {elapsed / step:.3f} s/step")
    return callback


def check_same_settings(store: UnitStore, name: str, S: dict) -> None:
    """A ValueError when unit ``name`` of ``store`` was saved with other settings than ``S`` (as
    a unit records them): resuming would mix two experiments in one folder."""
    saved = store.load(name).get("settings")
    if saved != json.loads(json.dumps(S)):
        changed = sorted(k for k in set(saved or {}) | set(S) if (saved or {}).get(k) != S.get(k))
        raise ValueError(f"{store.root} holds an experiment with other settings (differing keys: "
                         f"{', '.join(changed)}); use another folder or delete this one")


# ------------------------------------------------------------------------- filters + CKA
def features_config(S: FeatureSettings, device: str = "cpu", seed: int = 0) -> train_mod.TrainConfig:
    """The training run of the feature-similarity settings ``S`` for one seed (method set per run)."""
    return train_mod.TrainConfig(model=S.model, model_kwargs=dict(S.model_kwargs), dataset=S.dataset,
                                 data_kwargs=dict(S.data_kwargs), steps=S.steps, batch_size=S.batch_size, lr=S.lr,
                                 seed=seed, eval_every=0, eval_examples=S.eval_examples, device=device,
                                 progress=False)


def _unit_settings(S: FeatureSettings) -> dict:
    """What one seed's units must share to sit in one folder: everything but the seed list
    (adding a seed later does not change the experiment)."""
    return {k: v for k, v in dataclasses.asdict(S).items() if k != "seeds"}


def run_features(S: FeatureSettings, data, root: str | Path, device: str = "cpu", log: Log = print,
                 seeds: list[int] | None = None) -> dict[str, pd.DataFrame]:
    """Train one net per method and seed of ``S`` (resumable, see the module docstring); each seed
    starts every method from its own initial net. ``seeds`` restricts this call to some seeds.
    Returns the tables."""
    store = UnitStore(root)
    settings = _unit_settings(S)
    for seed in S.seeds if seeds is None else seeds:
        cfg = features_config(S, device, seed)
        init = f"init_s{seed}"
        if not store.done(init):
            store.save(init, {"method": "init", "seed": seed, "settings": settings},
                       {"stem": first_conv(initial_net(cfg, data)).weight})
        check_same_settings(store, init, settings)
        for method in S.methods:
            name = f"{method}_s{seed}"
            if store.done(name):
                _stamp(log, f"features {name}: done before, skipped")
                continue
            _stamp(log, f"features {name}: {cfg.steps} steps of batch {cfg.batch_size} on {data}")
            result = train_mod.train(dataclasses.replace(cfg, method=method), data=data,
                                     callback=progress_callback(log, f"features {name}", cfg.steps))
            summary = result.summary()
            store.save_tensors(f"nets/{name}", result.learner.net.state_dict())
            store.save(name, {**summary, "seed": seed, "n_train": data.num_examples("train"), "settings": settings},
                       {"stem": first_conv(result.learner.net).weight})
            _stamp(log, f"features {name}: {summary['status']}, final loss {summary['final_loss']:.3f}, "
                        f"test acc {summary['eval_acc']:.3f}, {summary['wall_time_s']:.0f} s")
        _save_cka(S, data, store, seed, device)   # as soon as the seed is complete
    return summarise_features(S, data, root, device)


def _saved_seeds(store: UnitStore) -> list[int]:
    return sorted(int(n[len("init_s"):]) for n in store.names() if re.fullmatch(r"init_s\d+", n))


def spread_over_seeds(df: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """Per ``keys``: the mean of ``value`` over seeds, its min and max, and the number of seeds."""
    return (df.groupby(keys, sort=False)[value].agg(["mean", "min", "max", "count"])
            .rename(columns={"mean": value, "min": f"{value}_min", "max": f"{value}_max", "count": "seeds"})
            .reset_index())


def _save_cka(S: FeatureSettings, data, store: UnitStore, seed: int, device: str) -> None:
    """Save the unit ``cka_s<seed>``: block-by-block CKA of every method's net of ``seed`` against
    backprop's, once every method of the seed has finished (and not again). The nets are read
    from ``nets/``, which only the machine that trained them has: the saved table outlives them."""
    if store.done(f"cka_s{seed}") or "backprop" not in S.methods or \
            not all(store.done(f"{m}_s{seed}") for m in S.methods):
        return
    cfg = features_config(S, device, seed)
    nets = {}
    for m in S.methods:
        net = initial_net(cfg, data)
        net.load_state_dict(store.tensors(f"nets/{m}_s{seed}"))
        nets[m] = net.eval()
    x_eval = next(data.eval_batches("test", batch_size=S.cka_examples))[0].to(device)
    store.save(f"cka_s{seed}", {"seed": seed, "rows": cka_table(nets, "backprop", x_eval)})


def summarise_features(S: FeatureSettings, data, root: str | Path, device: str = "cpu") -> dict[str, pd.DataFrame]:
    """Rebuild the tables from the saved units: ``filter_structure.csv`` (per seed and method,
    with the common start ``init``), ``filter_summary.csv`` (over seeds), ``training.csv``, and
    ``cka.csv`` and ``cka_summary.csv`` over the seeds whose methods have all finished (each
    seed's CKA is computed once, from its nets, and saved as the unit ``cka_s<seed>``)."""
    store = UnitStore(root)
    structure, training, cka = [], [], []
    for seed in _saved_seeds(store):
        done = [m for m in S.methods if store.done(f"{m}_s{seed}")]
        init = store.tensors(f"init_s{seed}")["stem"]
        stems = {m: store.tensors(f"{m}_s{seed}")["stem"] for m in done}
        structure.append(filter_structure({"init": init, **stems}, init).assign(seed=seed))
        training += [{k: v for k, v in store.load(f"{m}_s{seed}").items() if k != "settings"} for m in done]
        _save_cka(S, data, store, seed, device)
        if store.done(f"cka_s{seed}"):
            cka.append(pd.DataFrame(store.load(f"cka_s{seed}")["rows"]).assign(seed=seed))
    if not structure:
        raise ValueError(f"no filter experiment in {root}: run `python -m paper_repro.probes.run features`")
    structure = pd.concat(structure, ignore_index=True)
    tables = {"filter_structure": structure,
              "filter_summary": spread_over_seeds(structure, ["method"], "low_freq_mean"),
              "training": pd.DataFrame(training)}
    if cka:
        tables["cka"] = pd.concat(cka, ignore_index=True)
        tables["cka_summary"] = spread_over_seeds(tables["cka"], ["method", "layer"], "cka")
    for name, df in tables.items():
        store.write_table(name, df)
    return tables


def load_features(root: str | Path, seed: int | None = None) -> dict:
    """The saved filter experiment: ``stems`` (method -> stem weights of ``seed``, the first saved
    seed by default, in training order), ``init`` (that seed's common initial stem), ``seeds``
    (every saved seed), ``settings`` and the tables ``filter_structure``, ``filter_summary``,
    ``training``, ``cka`` and ``cka_summary`` (None where not every method of a seed has finished)."""
    store = UnitStore(root)
    seeds = _saved_seeds(store)
    if not seeds:
        raise ValueError(f"no filter experiment in {root}: run `python -m paper_repro.probes.run features`")
    seed = seeds[0] if seed is None else seed
    if seed not in seeds:
        raise ValueError(f"seed {seed} of the filter experiment is not saved in {root} (have: {seeds})")
    settings = store.load(f"init_s{seed}")["settings"]
    out = {"init": store.tensors(f"init_s{seed}")["stem"], "seed": seed, "seeds": seeds, "settings": settings,
           "stems": {m: store.tensors(f"{m}_s{seed}")["stem"] for m in settings["methods"]
                     if store.done(f"{m}_s{seed}")}}
    for name in ("filter_structure", "filter_summary", "training", "cka", "cka_summary"):
        path = Path(root) / f"{name}.csv"
        out[name] = pd.read_csv(path) if path.exists() else None
    return out


# --------------------------------------------------------------------------- random labels
def run_label(run: RandomLabelRun) -> str:
    """The short name of one random-label net of the settings (``resnet18``, ``mlp``)."""
    return run.key or run.model


def _run_settings(run: RandomLabelRun) -> dict:
    """What a saved unit records of its net's settings (and must match to be resumed): the
    fields it sets."""
    return json.loads(json.dumps({k: v for k, v in dataclasses.asdict(run).items() if v is not None}))


def run_random_labels(S: RandomLabelSettings, data_dir, root: str | Path, device: str = "cpu", log: Log = print,
                      methods: list[str] | None = None, seeds: list[int] | None = None,
                      nets: list[str] | None = None) -> dict[str, pd.DataFrame]:
    """Training accuracy on random labels, one saved unit per net x seed x method (resumable).

    A net of ``S.runs`` may set its own ``seeds``; the default is ``S.seeds``. ``methods``
    / ``seeds`` / ``nets`` (names from :func:`run_label`) restrict this call to some of the units
    (the others are left for a later call)."""
    store = UnitStore(root)
    for run in S.runs:
        if nets is not None and run_label(run) not in nets:
            continue
        data = None
        for seed in S.seeds if run.seeds is None else run.seeds:
            for method in S.methods:
                if (methods is not None and method not in methods) or (seeds is not None and seed not in seeds):
                    continue
                name = f"{run_label(run)}_{method}_s{seed}"
                if store.done(name):
                    if store.load(name).get("settings") != _run_settings(run):
                        raise ValueError(f"unit {name} in {root} was saved with other settings than {run}; "
                                         "use another folder or delete that unit")
                    _stamp(log, f"random labels {name}: done before, skipped")
                    continue
                data = data if data is not None else load_data(S, data_dir, run.data_kwargs)
                cfg = train_mod.TrainConfig(model=run.model, dataset=S.dataset, batch_size=run.batch_size,
                                            lr=run.lr, device=device, model_kwargs=dict(run.model_kwargs),
                                            progress=False)
                _stamp(log, f"random labels {name}: {run.epochs} epochs on {data}")
                t0 = time.perf_counter()
                df = random_label_runs(cfg, [method], [seed], run.epochs, data=data)
                store.save(name, {"model": run.label, "key": run_label(run), "method": method, "seed": seed,
                                  "epochs": run.epochs, "n_train": data.num_examples("train"),
                                  "wall_time_s": time.perf_counter() - t0, "settings": _run_settings(run),
                                  "rows": df})
                _stamp(log, f"random labels {name}: final train acc {df.train_acc.iloc[-1]:.3f}, "
                            f"{time.perf_counter() - t0:.0f} s")
    return summarise_random_labels(root)


def summarise_random_labels(root: str | Path) -> dict[str, pd.DataFrame]:
    """Rebuild ``random_labels.csv`` (every epoch of every saved unit) and ``random_label_summary.csv``."""
    store = UnitStore(root)
    frames = []
    for name in store.names():
        r = store.load(name)
        frames.append(pd.DataFrame(r["rows"]).assign(model=r["model"], n_train=r["n_train"]))
    if not frames:
        raise ValueError(f"no random-label runs saved in {root}")
    df = pd.concat(frames, ignore_index=True)
    tables = {"random_labels": df, "random_label_summary": random_label_claims(df)}
    for name, t in tables.items():
        store.write_table(name, t)
    return tables


def load_random_labels(root: str | Path) -> pd.DataFrame:
    """Every saved epoch of the random-label experiment (columns of :func:`random_label_runs`
    plus ``model`` and ``n_train``)."""
    path = Path(root) / "random_labels.csv"
    if not path.exists():
        raise ValueError(f"no random-label results in {root}: run `python -m paper_repro.probes.run random_labels`")
    return pd.read_csv(path)


def load_table(root: str | Path, name: str) -> pd.DataFrame:
    """A saved summary table ``<root>/<name>.csv``."""
    path = Path(root) / f"{name}.csv"
    if not path.exists():
        raise ValueError(f"no table {name}.csv in {root}")
    return pd.read_csv(path)


def set_threads(n: int) -> None:
    """Use ``n`` torch CPU threads (0: leave torch's default)."""
    if n:
        torch.set_num_threads(n)


def experiment(study: str, profile: str, data_dir=None, results_dir="results/similarity",
               threads: int = 1) -> tuple[FeatureSettings | RandomLabelSettings, Path]:
    """The settings of the long experiment ``study`` (``features`` | ``random_labels``) at
    ``profile`` and the folder of its runs. The quick profile trains them now, in a temporary
    folder; the other profiles read ``results_dir/<study>_<profile>``, made by
    ``python -m paper_repro.probes.run <study>`` (which saves each unit as it finishes).
    ``threads``: torch CPU threads (0: torch's default; small models on a shared CPU gain
    nothing from more than one)."""
    if study not in ("features", "random_labels"):
        raise ValueError(f"unknown experiment {study!r}; valid: features, random_labels")
    set_threads(threads)
    s = settings.similarity_settings(study, profile)
    if profile != "quick":
        return s, Path(results_dir) / f"{study}_{profile}"
    root = Path(tempfile.mkdtemp())
    if study == "features":
        run_features(s, load_data(s, data_dir), root, log=lambda line: None)
    else:
        run_random_labels(s, data_dir, root, log=lambda line: None)
    return s, root
