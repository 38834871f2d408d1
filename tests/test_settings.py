"""The settings registry: every study x profile is there, valid, and bad names are clear errors."""
import pytest

from pathlib import Path

from paper_repro import settings, sweep
from paper_repro.distributed import PipelineConfig
from paper_repro.distributed.options import configs_for
from paper_repro.train import TrainConfig


def test_every_study_and_profile_resolves_to_valid_settings():
    assert set(settings.STUDIES) == {*settings.COMPUTE_STUDIES, settings.MODULES_STUDY, "quickstart",
                                     *settings.SIMILARITY_STUDIES, "pipeline", "scaling"}
    for study, profiles in settings.STUDIES.items():
        assert profiles and set(profiles) <= set(settings.PROFILES)
        for profile in profiles:
            value = settings.get(study, profile, **({"data_dir": "/data"} if study == "quickstart" else {}))
            if study in settings.COMPUTE_STUDIES:
                assert isinstance(value, sweep.Grid) and profile in value.name
                value.validate()  # builds and checks every point's TrainConfig
            elif study == settings.MODULES_STUDY:  # one grid per depth, the depth in its net and name
                for depth, grid in value.items():
                    assert grid.model_kwargs["depth"] == depth and profile in grid.name
                    grid.validate()
            elif study == "quickstart":
                assert isinstance(value, TrainConfig) and value.model == "mlp"
                value.validate()
            elif study == "pipeline":
                configs = configs_for(value)  # every (micro-batch, schedule) config validates
                assert {c.micro_batch for c in configs} == set(value["micro_batch"])
            elif study == "scaling":
                for model in ("resnet", "transformer"):  # the simulated models are valid pipeline configs
                    PipelineConfig(**value[model], micro_batch=value["micro_batch"]).validate()
                for file in (value["calibrations"] or {}).values():  # cached per-block costs are committed
                    assert (Path(__file__).resolve().parents[1] / "results" / "simulate" / file).is_file()
            else:
                assert value["methods"] and value["dataset"]
    assert settings.STUDIES["resnet-imagenet"] == ("full",)


def test_settings_are_copies():
    s = settings.similarity_settings("gradient", "quick")
    assert s["depth"] == 5
    s["methods"].append("backprop")
    assert "backprop" not in settings.similarity_settings("gradient", "quick")["methods"]
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
