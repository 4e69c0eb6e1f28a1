"""The presets of ``speccond compare``: one config function per task (big_vision's shape), declared by the
task itself (harness/tasks/registry.py, ``Task.presets``; the functions live in harness/tasks/catalogue/).

Each function takes ``full`` (False: the quick preset, True: the full one) and returns TrainConfig
overrides (``key=value`` strings); ``--set`` overrides them in turn, so a task without a preset can
still be compared with ``--set`` alone. Its docstring gives the command and the run time measured on
this project's 2-core machine. The published runs were made with exactly these overrides
(their config.json and docs/results/*/results.json record the resulting configs).
"""
from __future__ import annotations

from speccond.harness.tasks import registry

NAMES = ("quick", "full")


def preset(name: str, task: str) -> list[str]:
    """The TrainConfig overrides of preset ``name`` ("quick" or "full") for ``task``."""
    chosen = registry.task(task)
    if chosen.presets is None:
        having = [defined.name for defined in registry.tasks().values() if defined.presets is not None]
        raise ValueError(f"no presets for task {task!r}; tasks with presets: {', '.join(having)}")
    if name not in NAMES:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(NAMES)}")
    return chosen.presets(name == "full")
