"""The settings registry: every study x profile is there, valid, and bad names are clear errors."""
import ast
import dataclasses
import subprocess
import sys

import pytest

from pathlib import Path

from paper_repro import names, settings, sweep, race
from paper_repro.settings import types as settings_types
from paper_repro.distributed import PipelineConfig
from paper_repro.distributed.options import configs_for
from paper_repro.settings.types import CommunicationSettings, PipelineSettings, ScalingSettings, SimulatedModel
from paper_repro.train import TrainConfig


def test_every_study_and_profile_resolves_to_valid_settings():
    assert set(settings.STUDIES) == {*settings.COMPUTE_STUDIES, *settings.DEPTH_SERIES, "quickstart",
                                     *settings.SIMILARITY_STUDIES, "pipeline", "scaling", "race"}
    for study, profiles in settings.STUDIES.items():
        assert profiles and set(profiles) <= set(settings.PROFILES)
        for profile in profiles:
            value = settings.get(study, profile, **({"data_dir": "/data"} if study == "quickstart" else {}))
            if study in settings.COMPUTE_STUDIES:
                assert isinstance(value, sweep.Grid) and profile in value.name
                value.validate()  # builds and checks every point's TrainConfig
            elif study in settings.DEPTH_SERIES:  # one grid per depth, the depth in its net and name
                for depth, grid in value.items():
                    assert depth in (grid.model_kwargs.get("depth"), grid.model_kwargs.get("n_layers"))
                    assert profile in grid.name and str(depth) in grid.name
                    grid.validate()
            elif study == "quickstart":
                assert isinstance(value, TrainConfig) and value.model == "mlp"
                value.validate()
            elif study == "pipeline":
                assert isinstance(value, PipelineSettings)
                configs = configs_for(value)  # every (micro-batch, schedule) config validates
                assert {c.micro_batch for c in configs} == set(value.micro_batch)
            elif study == "race":      # every run's config validates, every strategy's lr is found
                assert isinstance(value, settings_types.RaceSettings) and profile in value.name
                assert len(race.race_runs(value)) == len(value.strategies) * len(value.batches) * value.repeats
            elif study == "scaling":
                assert isinstance(value, ScalingSettings) and set(value.models) == {"resnet", "transformer"}
                for model in value.models.values():  # the simulated models are valid pipeline configs
                    PipelineConfig(**model.config_fields(), micro_batch=value.micro_batch).validate()
                for file in (value.calibrations or {}).values():  # cached per-block costs are committed
                    assert (Path(__file__).resolve().parents[1] / "results" / "simulate" / file).is_file()
            else:   # a similarity study
                assert isinstance(value, (settings_types.GradientSettings, settings_types.FeatureSettings,
                                          settings_types.RandomLabelSettings))
                assert value.methods and value.dataset
    assert settings.STUDIES["resnet-imagenet"] == ("full",)


def test_settings_are_copies():
    s = settings.similarity_settings("gradient", "quick")
    assert s.depth == 5
    s.methods.append("backprop")
    s.ablation.variants.clear()
    fresh = settings.similarity_settings("gradient", "quick")
    assert "backprop" not in fresh.methods and len(fresh.ablation.variants) == 5
    g = settings.compute_grid("mlp", "quick")
    g.model_kwargs["depth"] = 99
    assert settings.compute_grid("mlp", "quick").model_kwargs["depth"] == 4


def test_bad_names_are_clear_errors():
    with pytest.raises(ValueError, match="unknown profile 'huge'; valid: quick, cpu, full"):
        settings.pipeline_settings("huge")
    with pytest.raises(ValueError, match="unknown profile 'huge'; valid: quick, cpu, full"):
        settings.similarity_settings("gradient", "huge")
    with pytest.raises(ValueError, match="unknown study 'nope'; valid: gradient, features, random_labels"):
        settings.similarity_settings("nope", "quick")
    with pytest.raises(ValueError, match="study 'resnet-imagenet' has no 'quick' profile; it has: full"):
        settings.compute_grid("resnet-imagenet", "quick")
    with pytest.raises(ValueError, match="unknown study 'nope'; valid: mlp, mlp-deep, transformer"):
        settings.get("nope")
    with pytest.raises(ValueError, match="pass data_dir"):
        settings.quickstart_config("cpu")


# ----------------------------------------------------------- typed pipeline and scaling settings
@pytest.mark.parametrize("profile", settings.STUDIES["pipeline"])
def test_pipeline_settings_are_typed_and_expand_into_valid_configs(profile):
    s = settings.get("pipeline", profile)
    assert type(s) is PipelineSettings and s == settings.pipeline_settings(profile)
    configs = configs_for(s)
    assert configs and all(isinstance(c, PipelineConfig) for c in configs)
    runs = s.schedules or names.RUN_NAMES
    # one config per repeat x micro-batch size x run name (local/M is local stepping once per step)
    assert len(configs) == s.repeats * len(s.micro_batch) * len(runs)
    for c in configs:
        assert (c.model, c.model_kwargs, c.image_size, c.num_classes, c.stages, c.micro_batches, c.steps,
                c.warmup_steps, c.device) == (s.model, s.model_kwargs, s.image_size, s.num_classes, s.stages,
                                              s.micro_batches, s.steps, s.warmup_steps, s.device)
        assert c.micro_batch in s.micro_batch and c.validate() is c
    # what configs_for makes of the dataclass, it makes of the same keys in a dict
    assert configs_for(dataclasses.asdict(s)) == configs


@pytest.mark.parametrize("profile", settings.STUDIES["scaling"])
def test_scaling_settings_are_typed(profile):
    s = settings.get("scaling", profile)
    assert type(s) is ScalingSettings and s == settings.scaling_settings(profile)
    assert all(type(m) is SimulatedModel for m in s.models.values())
    for per_model in (s.ratio_stages, s.micro_batch_sweep_stages, s.calibrations or s.models):
        assert set(per_model) == set(s.models)
    assert type(settings.communication_settings()) is CommunicationSettings


@pytest.mark.parametrize("make", [lambda: settings.pipeline_settings("quick"), lambda: settings.scaling_settings("quick"),
                                  settings.communication_settings])
def test_a_misspelt_setting_fails_where_it_is_read(make):
    s = make()
    assert dataclasses.is_dataclass(s) and not hasattr(s, "__getitem__") and not hasattr(s, "get")
    with pytest.raises(TypeError):
        s["micro_batch"]                                  # the dict spelling is gone
    with pytest.raises(AttributeError):
        s.micro_batchs                                    # a misspelt field
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.micro_batch = 4                                 # changes go through dataclasses.replace
    with pytest.raises(TypeError, match="micro_batchs"):
        dataclasses.replace(s, micro_batchs=4)


def test_typed_settings_are_fresh_copies():
    s = settings.pipeline_settings("cpu")
    s.micro_batch.append(1024)
    s.model_kwargs["width"] = 1
    assert settings.pipeline_settings("cpu").micro_batch == [8, 16, 32]
    assert settings.pipeline_settings("cpu").model_kwargs == {"width": 16}
    s = settings.scaling_settings("quick")
    s.ratio_stages["resnet"].append(32)
    s.models["transformer"].model_kwargs["n_layers"] = 2
    fresh = settings.scaling_settings("quick")
    assert 32 not in fresh.ratio_stages["resnet"] and fresh.models["transformer"].model_kwargs["n_layers"] == 64


def test_the_settings_types_need_only_the_standard_library():
    """The typed settings are plain frozen dataclasses: their module imports nothing but the
    standard library, so any tool can read them."""
    tree = ast.parse(Path(settings_types.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
    assert imported <= set(sys.stdlib_module_names), imported
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level], "relative import"
    assert settings_types.PipelineSettings is PipelineSettings


def test_the_deep_mlp_studies_use_the_layernorm_net_and_say_so():
    """The deep-MLP and speedup-vs-modules studies train the MLP with LayerNorm in every block
    (without it backprop trains the 10-block net slowly, a weak baseline); titles name it."""
    from paper_repro.plots.labels import grid_labels
    grids = [settings.compute_grid("mlp-deep", p) for p in ("quick", "cpu")]
    grids += [g for p in ("quick", "cpu") for g in settings.module_grids(p).values()]
    for grid in grids:
        assert grid.model_kwargs["layer_norm"] is True and "_ln_" in grid.name and "LayerNorm" in grid.description
        assert grid_labels(grid)[0].endswith("+ LayerNorm")
    assert "LayerNorm" not in grid_labels(settings.compute_grid("mlp", "cpu"))[0]
