"""Every setting of every study and profile, in one package: the compute studies' grids and
readings in :mod:`~paper_repro.settings.compute`, the quickstart's and the similarity probes' in
:mod:`~paper_repro.settings.probes`, the pipeline, scaling and race studies' in
:mod:`~paper_repro.settings.systems`, their types in :mod:`~paper_repro.settings.types`; the
functions here hand out fresh copies.

Profiles: ``quick`` (offline, minutes on a 2-core CPU: what the notebook tests run),
``cpu`` (hours to days on a 2-core CPU; the committed ``results/`` come from it) and ``full``
(paper scale, GPU servers). Studies and what their settings are:

==========================================  ============================  =========================
study                                       function                      returns
==========================================  ============================  =========================
mlp, mlp-deep, transformer, resnet,         :func:`compute_grid`          a sweep ``Grid``
resnet-imagenet, transformer-lm,
transformer-lm-pilot
mlp-modules, transformer-lm-modules         :func:`module_grids`          ``{depth: Grid}``
quickstart                                  :func:`quickstart_config`     a ``TrainConfig``
gradient, features, random_labels           :func:`similarity_settings`   a ``GradientSettings``, ...
pipeline                                    :func:`pipeline_settings`     a ``PipelineSettings``
scaling                                     :func:`scaling_settings`      a ``ScalingSettings``
race                                        :func:`race_settings`         a ``RaceSettings``
==========================================  ============================  =========================

:func:`get` dispatches on the study name (and returns the same); :data:`STUDIES` lists every
study with its profiles. Notebook 04 also draws :func:`communication_settings` (a
``CommunicationSettings``, the same at every profile) and :func:`stored_pipeline_runs` (a
dict ``{run name: [record files]}``). The typed settings (``PipelineSettings``,
``CommunicationSettings``, ``ScalingSettings`` with its ``SimulatedModel``, and the similarity
studies' ``GradientSettings``, ``FeatureSettings`` and ``RandomLabelSettings``) are the frozen
dataclasses of :mod:`paper_repro.settings.types`, each field described there. Data folders are
never set here: CIFAR-10, ImageNet and an LM1B-style text are passed as ``data_dir`` by the caller (the offline defaults are sklearn digits and the pydoc
text corpus; the transformer-lm studies name the built-in ``stdlib`` corpus and its hash in
``data_kwargs``). :data:`PAPER_CLAIMS` holds the paper's claim for each compute study's
architecture.
Public names: ``__all__``.
"""
from __future__ import annotations

import copy

from ..names import COMPUTE_STUDIES, DEPTH_SERIES, MODULES_STUDY, PROFILES, SIMILARITY_STUDIES
from ..sweep.grid import Grid
from ..train import TrainConfig
from .compute import (_ANALYSIS, _FULL_ANALYSIS, _GRIDS, _MODULES, LOCAL, PAPER_CLAIMS,
                      STDLIB_TEXT, loggrid, pow2)
from .probes import _QUICKSTART, _SIMILARITY, QUICKSTART_METHODS
from .systems import _COMMUNICATION, _PIPELINE, _RACE, _SCALING, _STORED_RUNS
from .types import (CommunicationSettings, FeatureSettings, GradientSettings, PipelineSettings, RaceSettings,
                    RandomLabelSettings, ScalingSettings)

__all__ = ["COMPUTE_STUDIES", "DEPTH_SERIES", "LOCAL", "MODULES_STUDY", "PAPER_CLAIMS",
           "PROFILES",
           "QUICKSTART_METHODS", "SIMILARITY_STUDIES", "STDLIB_TEXT", "STUDIES", "analysis_settings",
           "communication_settings", "compute_grid", "get", "loggrid", "module_grids", "module_sources",
           "pipeline_settings", "pow2", "quickstart_config", "race_settings", "scaling_settings",
           "similarity_settings", "stored_pipeline_runs"]

# every study -> its profiles
STUDIES = {**{s: tuple(p for t, p in _GRIDS if t == s) for s in COMPUTE_STUDIES},
           "quickstart": tuple(_QUICKSTART), **{s: tuple(_SIMILARITY[s]) for s in SIMILARITY_STUDIES},
           **{s: tuple(_MODULES[s]) for s in DEPTH_SERIES}, "pipeline": tuple(_PIPELINE),
           "scaling": tuple(_SCALING),
           "race": tuple(_RACE)}


def _check(study: str, profile: str, known: tuple) -> None:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid: {', '.join(PROFILES)}")
    if study not in known:
        raise ValueError(f"unknown study {study!r}; valid: {', '.join(known)}")
    if profile not in STUDIES[study]:
        raise ValueError(f"study {study!r} has no {profile!r} profile; it has: {', '.join(STUDIES[study])}")


def compute_grid(study: str, profile: str = "quick") -> Grid:
    """The sweep grid of ``study`` (mlp | transformer | resnet | resnet-imagenet) at ``profile``."""
    _check(study, profile, COMPUTE_STUDIES)
    return Grid(**copy.deepcopy(_GRIDS[(study, profile)]))


def module_grids(profile: str = "quick", series: str = MODULES_STUDY) -> dict[int, Grid]:
    """The grids of the depth series ``series`` (:data:`DEPTH_SERIES`: the speedup against the
    number of local modules) at ``profile``: ``{depth: Grid}``, each the series' grid with the
    depth in its name and model, and the fields its ``per_depth`` entry sets for that depth."""
    _check(series, profile, tuple(DEPTH_SERIES))
    spec = copy.deepcopy(_MODULES[series][profile])
    out = {}
    for depth in spec["depths"]:
        grid = dict(spec["grid"], name=spec["grid"]["name"].format(depth=depth),
                    description=spec["grid"]["description"].format(depth=depth))
        grid["model_kwargs"] = dict(grid["model_kwargs"], **{spec["depth_key"]: depth})
        grid.update(copy.deepcopy(spec.get("per_depth", {}).get(depth, {})))
        out[depth] = Grid(**grid)
    return out


def module_sources(profile: str = "quick", series: str = MODULES_STUDY) -> list[Grid]:
    """The grids of the compute studies whose finished points the depth series ``series`` at
    ``profile`` copies instead of training again (``sweep.run_sweep(reuse=...)``)."""
    _check(series, profile, tuple(DEPTH_SERIES))
    return [compute_grid(study, profile) for study in _MODULES[series][profile].get("reuse", [])]


def analysis_settings(study: str, profile: str = "quick") -> dict:
    """How ``study`` at ``profile`` is read: ``rule``, sensitivity ``rules``, ``targets``."""
    _check(study, profile, (*COMPUTE_STUDIES, *DEPTH_SERIES))
    return copy.deepcopy(_ANALYSIS.get((study, profile), _FULL_ANALYSIS))


def quickstart_config(profile: str = "quick", data_dir: str | None = None, seed: int = 0) -> TrainConfig:
    """The quickstart's run: a 4-block MLP (8 at full scale), to be trained with every method."""
    _check("quickstart", profile, ("quickstart",))
    kw = copy.deepcopy(_QUICKSTART[profile])
    if kw["dataset"] != "digits" and data_dir is None:
        raise ValueError(f"profile {profile!r} trains on {kw['dataset']}: pass data_dir (e.g. an ImageFolder "
                         "tree with train/<class>/*.jpg, or the official cifar-10-batches-py folder)")
    return TrainConfig(model="mlp", data_dir=data_dir, seed=seed, **kw)


def similarity_settings(study: str, profile: str = "quick") -> GradientSettings | FeatureSettings | RandomLabelSettings:
    """The run sizes of a probing study at ``profile`` (a fresh copy): ``gradient`` ->
    ``GradientSettings``, ``features`` -> ``FeatureSettings``, ``random_labels`` ->
    ``RandomLabelSettings`` (every field: :mod:`paper_repro.settings.types`)."""
    _check(study, profile, SIMILARITY_STUDIES)
    return copy.deepcopy(_SIMILARITY[study][profile])


def pipeline_settings(profile: str = "quick") -> PipelineSettings:
    """The pipeline benchmark's runs at ``profile`` (a fresh copy; turn it into configs with
    :func:`paper_repro.distributed.options.configs_for`)."""
    _check("pipeline", profile, ("pipeline",))
    return copy.deepcopy(_PIPELINE[profile])


def race_settings(profile: str = "quick") -> RaceSettings:
    """The race of notebook 10 at ``profile`` (:mod:`paper_repro.race`)."""
    _check("race", profile, ("race",))
    return copy.deepcopy(_RACE[profile])


def communication_settings() -> CommunicationSettings:
    """The communication figure's model, sizes, stage counts and schedules (a fresh copy, for
    :func:`paper_repro.distributed.bench.comm_by_size`)."""
    return copy.deepcopy(_COMMUNICATION)


def stored_pipeline_runs() -> dict[str, list[str]]:
    """The committed all-schedule benchmark runs: ``{run name: [record files in results/pipeline]}``."""
    return copy.deepcopy(_STORED_RUNS)


def scaling_settings(profile: str = "quick") -> ScalingSettings:
    """The scaling notebook's models, sizes, schedules and cached files at ``profile`` (a fresh
    copy; every field: :class:`~paper_repro.settings.types.ScalingSettings`)."""
    _check("scaling", profile, ("scaling",))
    return copy.deepcopy(_SCALING[profile])


def get(study: str, profile: str = "quick", **kwargs):
    """The settings of any ``study`` of :data:`STUDIES` at ``profile``, as the study's function
    in the table at the top returns them (``kwargs`` go to :func:`quickstart_config`:
    ``data_dir``, ``seed``)."""
    if study in COMPUTE_STUDIES:
        return compute_grid(study, profile)
    if study == "quickstart":
        return quickstart_config(profile, **kwargs)
    if study in SIMILARITY_STUDIES:
        return similarity_settings(study, profile)
    if study in DEPTH_SERIES:
        return module_grids(profile, study)
    if study == "pipeline":
        return pipeline_settings(profile)
    if study == "scaling":
        return scaling_settings(profile)
    if study == "race":
        return race_settings(profile)
    raise ValueError(f"unknown study {study!r}; valid: {', '.join(STUDIES)}")
