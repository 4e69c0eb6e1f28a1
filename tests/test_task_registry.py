"""The task registry (harness/tasks/registry.py): every task is one file of tasks/catalogue/ listed by one
line; what each declares (dataset, reading, presets, model family) is what the harness reads and trains."""
from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import pytest

from speccond.harness.config.presets import preset
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.tasks import plugins, registry
from speccond.harness.tasks.datasets import image_tasks, task
from speccond.harness.tasks.registry import Task

CATALOGUE = Path(registry.__file__).parent / "catalogue"

# name -> (dataset, reading) of every task before the registry: the names and readings runs were made with
BUILT_IN = {
    "fashion-mnist": ("fashion-mnist", "image"), "cifar10": ("cifar10", "image"), "digits": ("digits", "image"),
    "pathfinder": ("pathfinder", "image"), "pathfinder-small": ("pathfinder-small", "image"),
    "lra-image": ("cifar10", "pixels"), "lra-pathfinder": ("pathfinder-small", "pixels"),
    "lra-pathfinder-full": ("pathfinder", "pixels"), "lra-listops": ("listops-small", "tokens"),
    "lra-listops-full": ("listops", "tokens"), "lra-text": ("text-bytes", "tokens"),
    "lra-retrieval": ("pairs-bytes", "pairs"), "fashion-scenes": ("fashion-scenes", "scenes"),
    "mlm": ("language", "mlm"), "glue-sst2": ("language", "text"), "glue-cola": ("language", "text"),
    "glue-mrpc": ("language", "text"), "glue-rte": ("language", "text"),
}


def test_every_catalogue_file_is_listed_once_and_every_listed_module_exists():
    files = sorted(f"{registry._HERE}.{path.stem}" for path in CATALOGUE.glob("*.py") if path.stem != "__init__")
    assert sorted(registry.MODULES) == files and len(set(registry.MODULES)) == len(registry.MODULES)


def test_the_built_in_tasks_keep_their_names_datasets_and_readings():
    found = {name: (defined.dataset, defined.reading) for name, defined in registry.tasks().items()}
    assert {name: found[name] for name in BUILT_IN} == BUILT_IN
    assert image_tasks() == ["cifar10", "digits", "fashion-mnist", "pathfinder", "pathfinder-small"]
    assert task("glue-mrpc").subset == "mrpc" and task("lra-listops") is registry.tasks()["lra-listops"]


@pytest.mark.parametrize("name", [n for n, t in registry.tasks().items() if t.presets is not None])
@pytest.mark.parametrize("size", ["quick", "full"])
def test_each_preset_trains_the_model_family_its_task_declares(name, size):
    config = TrainConfig().replaced(task=name).with_overrides(preset(size, name))
    assert config.model.name == registry.tasks()[name].model


def test_a_task_without_presets_and_an_unknown_preset_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^no presets for task 'lra-listops-full'; tasks with presets: "
                                         r"fashion-mnist, cifar10, lra-image, lra-pathfinder, lra-listops, "):
        preset("quick", "lra-listops-full")
    with pytest.raises(ValueError, match=r"^unknown preset 'long'; choose one of quick, full$"):
        preset("long", "digits")


def test_an_unknown_task_is_one_line_naming_the_nearest_tasks_then_all():
    with pytest.raises(ValueError) as refused:
        task("lra-listop")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("unknown task 'lra-listop'; nearest: lra-listops, lra-listops-full")
    assert f"; known tasks: {', '.join(sorted(registry.tasks()))}, or imagefolder:DIR (" in message
    assert message.endswith(", or text:DIR?text=COLUMN&label=COLUMN (your texts)")
    with pytest.raises(ValueError, match=r"^unknown task 'nope'; known tasks: "):  # nothing near: no list of it
        task("nope")


def test_a_task_declaring_a_reading_or_family_the_harness_lacks_is_refused():
    with pytest.raises(ValueError, match=r"reading 'audio' is not one of image, pixels, .*choose one"):
        Task("sounds", "sounds", "audio")
    with pytest.raises(ValueError, match=r"model 'vit' is not a family that takes its sequence inputs"):
        Task("bits", "bits", "tokens")  # the default family, vit, takes images
    with pytest.raises(ValueError, match=r"model 'resnet' is not a family"):
        Task("pics", "pics", "image", model="resnet")


def test_two_modules_defining_one_task_name_are_refused(monkeypatch):
    twice = (importlib.import_module(f"{registry._HERE}.digits"),) * 2
    monkeypatch.setattr(registry, "modules", lambda: twice)
    with pytest.raises(ValueError, match=r"task 'digits' is defined by both .*digits and .*digits; rename one"):
        registry.tasks.__wrapped__()


def test_a_dataset_a_task_brings_may_not_take_a_name_another_dataset_has(monkeypatch):
    from speccond import data

    mine = dataclasses.replace(data.spec("digits"), generated_sha256="0" * 64)  # a different dataset called digits
    monkeypatch.setattr(registry, "tasks", lambda: {"my-digits": Task("my-digits", "digits", "image", data=mine)})
    with pytest.raises(ValueError, match=r"task 'my-digits' brings a dataset named 'digits', a name another dataset "
                                         r"has \(speccond.data or another task\); rename it"):
        registry.own_datasets()
    other = dataclasses.replace(mine, name="mine")
    pair = {name: Task(name, "mine", "image", data=spec) for name, spec in
            (("one", other), ("two", dataclasses.replace(other, format_version=2)))}
    monkeypatch.setattr(registry, "tasks", lambda: pair)
    with pytest.raises(ValueError, match=r"task 'two' brings a dataset named 'mine'"):
        registry.own_datasets()
    monkeypatch.setattr(registry, "tasks", lambda: {"one": pair["one"]})
    assert registry.own_datasets() == {"mine": other}


def test_a_plugin_is_found_through_the_task_that_names_it():
    from speccond.harness.tasks.detection import plugin

    assert registry.tasks()["fashion-scenes"].plugin == plugin.__name__
    assert plugins.hook("scenes", "training_task") is plugin.training_task
    assert plugins.hook("image", "training_task") is None and plugins.hook("scenes", "no_such_hook") is None


def test_your_own_data_is_a_task_made_from_its_name(tmp_path):
    for split in ("train", "test"):
        (tmp_path / split / "cat").mkdir(parents=True)
    made = task(f"imagefolder:{tmp_path}")
    assert (made.reading, made.dataset, made.model) == ("image", f"imagefolder:{tmp_path}", "vit")
    assert preset("full", f"imagefolder:{tmp_path}") == ["epochs=100", "batch_size=64", "warmup_steps=500"]
    assert dataclasses.replace(made, name="x").name == "x"  # a plain frozen record
