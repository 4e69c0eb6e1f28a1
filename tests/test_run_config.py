"""The run config in sections (harness/config/sections.py, train_config.py): five typed sections, one flat
key per field for the command line and config.json, validation where the fields live, and records written
before the sections read as they were."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from speccond.harness.config.sections import DataConfig, MethodConfig, ModelConfig, OptimizerConfig, RunConfig
from speccond.harness.config.train_config import PUBLISHED_ORDER, TrainConfig
from speccond.harness.values import show_value

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = {"model": ModelConfig, "data": DataConfig, "method": MethodConfig, "optimizer": OptimizerConfig, "run": RunConfig}


def test_every_field_has_one_flat_key_and_config_json_keeps_its_published_order():
    fields = [(section, f.name) for section, kind in SECTIONS.items() for f in dataclasses.fields(kind)]
    keys = TrainConfig.keys()
    assert len(keys) == len(set(keys)) == len(fields)
    assert {key: TrainConfig().value(key) for key in keys} == TrainConfig().to_dict()
    for section, name in fields:  # a section's own name is said by the section's key
        key = section if name == "name" else name
        assert TrainConfig().value(key) == getattr(getattr(TrainConfig(), section), name)
    assert keys[: len(PUBLISHED_ORDER)] == PUBLISHED_ORDER  # config.json's keys, as every published run wrote them
    published = json.loads(next((ROOT / "docs" / "results").rglob("config.json")).read_text())["config"]
    assert list(published) == [key for key in PUBLISHED_ORDER if key in published]


@pytest.mark.parametrize("key", TrainConfig.keys())
def test_a_key_set_by_string_or_by_value_lands_in_its_section(key):
    """with_overrides (the command line's strings) and replaced (typed values) agree for every key."""
    changed = {"model": "deit", "method": "baseline", "optimizer": "timm:lamb", "scheduler": "timm:step",
               "task": "digits", "lam": "auto", "corrected": "q", "correction": "svd", "granularity": "projection",
               "attention_norm": "none", "precision": "bfloat16", "device": "cpu", "auto_augment": "rand-m9",
               "init_from": "runs/mlm/{method}/seed-{seed}", "model_args": "", "embed_dim": 256, "num_heads": 8, "target_kappa": 3.0,
               "key_basis": "orthogonal"}
    default = TrainConfig().value(key)
    if key in changed:
        value = changed[key]
    elif isinstance(default, float):
        value = default / 2 if default else 0.25
    else:
        value = 1 if key in ("flush_denormal", "tuning", "compile", "channels_last") else default + 2
    base = TrainConfig().replaced(**{"tuning": {"val_size": 10}, "target_kappa": {"lam": "auto"}}.get(key, {}))
    if key == "model_args":
        base = base.replaced(model="timm:vit_tiny_patch16_224")
        value = "depth=2"
    text = show_value(value) if isinstance(value, float) else str(value)
    by_string, by_value = base.with_overrides([f"{key}={text}"]), base.replaced(**{key: value})
    assert by_string == by_value and by_value.value(key) == value
    assert TrainConfig.from_dict(by_value.to_dict()) == by_value  # the flat record round-trips


def test_each_section_refuses_its_own_bad_fields_and_the_config_those_of_two_sections():
    with pytest.raises(ValueError, match=r"TrainConfig\.lam must be a finite number >= 0 or 'auto', got -1"):
        MethodConfig(lam=-1.0)
    with pytest.raises(ValueError, match=r"TrainConfig\.num_heads \(3\) must divide embed_dim \(128\)"):
        ModelConfig(num_heads=3)
    with pytest.raises(ValueError, match=r"TrainConfig\.tuning=1 scores the validation split, so it needs val_size > 0"):
        TrainConfig().replaced(tuning=1)
    assert TrainConfig().replaced(tuning=1, val_size=5).run.tuning == 1  # both sections at once: one check
    with pytest.raises(ValueError, match=r"accumulate_steps must be between 1 and batch_size \(4\), got 8"):
        TrainConfig().replaced(batch_size=4, accumulate_steps=8)
    with pytest.raises(ValueError, match=r"unknown TrainConfig field 'lr_max'; known: \[.*'lr'"):
        TrainConfig().replaced(lr_max=1.0)
    with pytest.raises(ValueError, match=r"unknown TrainConfig field 'name'"):  # a section's name has the section's key
        TrainConfig().with_overrides(["name=vit"])
    with pytest.raises(TypeError, match=r"TrainConfig\.model must be a ModelConfig, got DataConfig"):
        TrainConfig(model=DataConfig())
    with pytest.raises(ValueError, match=r"TrainConfig\.init_from may name TrainConfig keys in braces"):
        TrainConfig().replaced(init_from="runs/{variant}")


def test_sections_are_what_their_readers_take():
    """A method reads its section alone; the key a folder name or --set says is the section field it sets."""
    config = TrainConfig().with_overrides(["method=spectral", "lam=auto", "target_kappa=3", "lr=3e-4", "seed=2"])
    assert config.method == MethodConfig(name="spectral", lam="auto", target_kappa=3.0)
    assert (config.optimizer.lr, config.run.seed) == (3e-4, 2)
    assert config.model == ModelConfig() and config.data == DataConfig()
    assert TrainConfig().replaced(init_from="r/{method}-lam={lam:g}/seed-{seed}", method="spectral", lam=2.0,
                                  seed=1).init_path() == \
        "r/spectral-lam=2/seed-1"


@pytest.mark.parametrize("given, message", [
    (["model=timm:vit_tiny_patch16_224", "model_args=depth=2,depth=3"],
     r"model_args takes key=value pairs joined by commas, each key once.*\(depth is given twice in depth=2, depth=3"),
])
def test_a_key_given_twice_where_one_would_be_ignored_is_refused(given, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig().with_overrides(given)


def test_an_arm_that_sets_a_key_twice_is_refused():
    from speccond.harness.config.fields import arm_settings

    with pytest.raises(ValueError, match=r"lam is set twice in arm 'spectral:lam=5\+lam=10'; set each key once"):
        arm_settings("spectral:lam=5+lam=10")
    assert arm_settings("spectral:corrected=q+lam=auto") == ("spectral", ["corrected=q", "lam=auto"])


@pytest.mark.parametrize("args, where", [
    (["train", "--out", "{out}", "--set", "lr=1e-3", "--set", "lr=3e-4"], "--set"),
    (["compare", "--out", "{out}", "--task", "digits", "--set", "task=fashion-mnist"], "--task, --model and --set"),
    (["tune", "--out", "{out}", "--val-size", "100", "--set", "epochs=1", "--set", "epochs=2"], "--task, --model and --set"),
])
def test_the_command_line_refuses_a_key_given_twice_before_writing(args, where, tmp_path, capsys):
    from speccond.harness.cli import main

    out = tmp_path / "out"
    assert main([a.replace("{out}", str(out)) for a in args]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"is set twice in {where}; set each key once" in error and not out.exists()
