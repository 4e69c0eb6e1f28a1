"""Every task a run can name (``TrainConfig.task``): one module per task, or per family of tasks that share
a dataset, named here by import path, one line each. Adding a task is one file in ``tasks/catalogue/`` and
one line in MODULES below.

    task("lra-listops")   # Task(name="lra-listops", dataset="listops-small", reading="tokens", model="nystromformer", ...)

A task module defines ``TASKS``, a tuple of :class:`Task`: the task's name, the prepared dataset it reads
(one of ``speccond.data.DATASETS``, or a ``DatasetSpec`` of its own in ``Task.data``), how it reads it (a
reading of harness/tasks/datasets.py), its quick and full presets (TrainConfig overrides for ``speccond
compare --preset``), the model family those presets train, and for a task with its own loss and report
the plugin module that brings them (tasks/plugins.py). A module whose names are written by the user
(``imagefolder:DIR``) also defines ``named(name) -> Task | None`` and ``NAMED``, how an error describes them (a tuple).

The catalogue sits with the other catalogues (the model families, the methods): a task module imports only
this file, the model registry and the library (``speccond.data``), so the config functions may read it; the
rooms that read and train a task name it through here, and its plugin by path.
"""
from __future__ import annotations

import difflib
import functools
import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Optional

from speccond.harness.models.registry import FAMILIES

if TYPE_CHECKING:
    from speccond.data.store import DatasetSpec

# A reading (harness/tasks/datasets.py's module docstring) -> the kind of model input it gives (models/registry.py)
READINGS = {"image": "image", "pixels": "sequence", "tokens": "sequence", "pairs": "sequence", "text": "text",
            "mlm": "text", "scenes": "scenes"}


@dataclass(frozen=True)
class Task:
    name: str
    dataset: str  # the prepared dataset it reads (speccond data prepare DATASET)
    reading: str  # a key of READINGS
    note: str = ""
    subset: str = ""  # "text": the task's name inside its dataset (language.SUBSETS)
    presets: Optional[Callable[[bool], list[str]]] = None  # full -> TrainConfig overrides (False: quick, True: full)
    model: str = "vit"  # the model family its presets train (TrainConfig's default for image tasks)
    plugin: str = ""  # import path of the module with its own training task and report (tasks/plugins.py)
    data: Optional["DatasetSpec"] = None  # a dataset the task brings itself, named ``dataset``
    # What a classification task is scored by, headline first: "accuracy", "mcc" (Matthews correlation) or "f1"
    # (of class 1), each over the scored split; a plugin task's figures are its own (its TrainingTask.metrics).
    metrics: tuple[str, ...] = ("accuracy",)

    def __post_init__(self) -> None:
        if self.reading not in READINGS:
            raise ValueError(f"task {self.name!r}: reading {self.reading!r} is not one of {', '.join(READINGS)}; "
                             "choose one (harness/tasks/datasets.py says what each reads)")
        if self.model not in FAMILIES or FAMILIES[self.model].kind != READINGS[self.reading]:
            raise ValueError(f"task {self.name!r}: model {self.model!r} is not a family that takes its "
                             f"{READINGS[self.reading]} inputs; choose a family of models/registry.py whose kind is "
                             f"{READINGS[self.reading]!r}")
        if not self.metrics or not set(self.metrics) <= {"accuracy", "mcc", "f1"}:
            raise ValueError(f"task {self.name!r}: metrics {self.metrics} must be some of accuracy, mcc, f1")
        if self.data is not None and self.data.name != self.dataset:
            raise ValueError(f"task {self.name!r}: its own dataset is named {self.data.name!r}, not {self.dataset!r}; "
                             "give dataset the DatasetSpec's name")


_HERE = "speccond.harness.tasks.catalogue"
MODULES = (
    f"{_HERE}.fashion_mnist",
    f"{_HERE}.cifar10",
    f"{_HERE}.long_range_arena",
    f"{_HERE}.language",
    f"{_HERE}.fashion_scenes",
    f"{_HERE}.digits",
    f"{_HERE}.pathfinder",
    f"{_HERE}.your_data",
    f"{_HERE}.associative_recall",
)


@functools.cache
def modules() -> tuple[ModuleType, ...]:
    return tuple(importlib.import_module(path) for path in MODULES)


@functools.cache
def tasks() -> dict[str, Task]:
    """Every named task, in MODULES order; ValueError for a name two modules define."""
    found: dict[str, Task] = {}
    owner: dict[str, str] = {}
    for module in modules():
        for defined in module.TASKS:
            if defined.name in found:
                raise ValueError(f"task {defined.name!r} is defined by both {owner[defined.name]} and "
                                 f"{module.__name__}; rename one")
            found[defined.name], owner[defined.name] = defined, module.__name__
    return found


def task(name: str) -> Task:
    """Task ``name``: a named one, or one a module makes from a name the user writes (``imagefolder:DIR``);
    a one-line ValueError naming the nearest tasks and every known one otherwise."""
    for module in modules():
        made = module.named(name) if hasattr(module, "named") else None
        if made is not None:
            return made
    known = tasks()
    if name not in known:
        nearest = difflib.get_close_matches(name, list(known), n=3)
        near = f"nearest: {', '.join(nearest)}; " if nearest else ""
        written = "".join(f", or {described}" for module in modules() for described in getattr(module, "NAMED", ()))
        raise ValueError(f"unknown task {name!r}; {near}known tasks: {', '.join(sorted(known))}{written}")
    return known[name]


def own_datasets() -> dict[str, "DatasetSpec"]:
    """The datasets tasks bring themselves (``Task.data``), by name: what ``speccond data prepare`` adds to
    speccond.data's; ValueError for a name speccond.data has, or two datasets of one name (one cache folder)."""
    from speccond.data import DATASETS

    found: dict[str, "DatasetSpec"] = {}
    for defined in tasks().values():
        if defined.data is None:
            continue
        if defined.dataset in DATASETS or found.get(defined.dataset, defined.data) != defined.data:
            raise ValueError(f"task {defined.name!r} brings a dataset named {defined.dataset!r}, a name another "
                             "dataset has (speccond.data or another task); rename it")
        found[defined.dataset] = defined.data
    return found


def plugin_of(reading: str) -> str:
    """The plugin module of the tasks read as ``reading`` ("" for none); ValueError when they name two."""
    plugins = sorted({defined.plugin for defined in tasks().values() if defined.reading == reading and defined.plugin})
    if len(plugins) > 1:
        raise ValueError(f"the tasks read as {reading!r} name two plugins, {' and '.join(plugins)}; give them one")
    return plugins[0] if plugins else ""
