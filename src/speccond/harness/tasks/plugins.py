"""Tasks that bring their own training loss and report (detection: Mask R-CNN's losses, COCO metrics, a
box and mask AP table), named by import path in the task's own ``Task.plugin`` (harness/tasks/registry.py)
and loaded only when a run of them starts; their models are families of models/registry.py, named by the
same path.

    Task("fashion-scenes", ..., reading="scenes", plugin="speccond.harness.tasks.detection.plugin")

A plugin module defines the hooks it needs, each optional:

- ``training_task()``: its TrainingTask class (training/training_tasks.py; Supervised otherwise), built with
  the config and the run's ranks (``Context``), over which its evaluation is sharded;
- ``write_report(folders, out)``: its report, written by reporting/report.py for runs that are all of it.

Naming the module by its path keeps the plugin above the rest of the harness: it may import training,
reporting and models, and none of them imports it (tests/test_imports.py). A new task of this kind is
its task file, naming its plugin module, and that module.
"""
from __future__ import annotations

import importlib
from typing import Callable, Optional

from speccond.harness.tasks import registry


def hook(reading: str, name: str) -> Optional[Callable]:
    """The plugin hook ``name`` of tasks read as ``reading`` (datasets.py's readings), or None when that
    reading has no plugin or its plugin does not define the hook."""
    module = registry.plugin_of(reading)
    return getattr(importlib.import_module(module), name, None) if module else None
