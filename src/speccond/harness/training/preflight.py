"""What a command checks before it writes anything (docs/RELIABILITY.md, "validated before writing").

- :func:`check_writable`: an output path (``--out``, ``--json``) is, or can become, a folder or file
  there: no part of it is a file, and the nearest existing folder is writable;
- :func:`check_runnable`: a config builds its model and its data sizes fit the task's stored examples
  (the dataset must be prepared);
- :func:`check_comparison_folder`: a comparison folder holds one task and one protocol (the data its
  figures are measured on), so a paired difference never crosses them.

Each raises ValueError naming the path or field and what to do.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from speccond.harness.config.train_config import TrainConfig

# The fields that say which examples a comparison's figures are measured on: its runs must share them.
PROTOCOL_FIELDS = ("task", "train_size", "val_size", "test_size")


def check_writable(path: str | Path, flag: str, folder: bool = True) -> None:
    """``path`` (a folder when ``folder``, else a file) can be written: refused when it, or a part of it,
    is a file where a folder is needed, or when the nearest existing folder is read-only."""
    path = Path(path)
    if folder and path.is_file():
        raise ValueError(f"{flag} {path} is a file, not a folder; give a folder path")
    if not folder and path.is_dir():
        raise ValueError(f"{flag} {path} is a folder, not a file; give a file path")
    existing = path if folder and path.is_dir() else path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{flag} {path}: {existing} is a file, not a folder; give a path under a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path}: {existing} is not writable (permissions or a read-only file system); "
                         "give a folder you can write")


def check_runnable(config: TrainConfig) -> None:
    """ValueError unless ``config`` builds its model, its settings are ones its task uses (its device, timm's
    optimiser, scheduler and augmentation by name, the pre-training run it starts from) and its sizes fit its
    task's prepared data."""
    import torch

    from speccond.harness.tasks.datasets import check_sizes, check_task_settings, stored_counts, task

    from speccond.harness.training.distributed import uses_cuda
    from speccond.harness.training.recipe import check_recipe

    check_task_settings(config)
    uses_cuda(config.run.device)  # device=cuda without a GPU
    check_recipe(config)  # timm's optimiser and scheduler by name
    if config.data.auto_augment or config.data.random_erasing:  # timm reads the augmentation's string
        from speccond.harness.training.image_transforms import TimmAugmentation

        TimmAugmentation(config, 32, torch.zeros(3), torch.ones(3))
    if config.model.init_from:  # a finished pre-training run that fits
        from speccond.harness.training.pretrained import pretrained_config

        with torch.random.fork_rng(devices=[]):  # reading the pre-training run's kappa builds a model
            pretrained_config(config)
    if task(config.data.task).reading != "scenes":  # detection checks its own sizes (harness/tasks/detection/task.py)
        check_sizes(config, *stored_counts(config))
    with torch.random.fork_rng(devices=[]):  # building a model seeds the global generator
        built_model(config)


def built_model(config: TrainConfig):
    """The model of a run of ``config`` (run_model.model_for); a failure to build it is a ValueError that
    names the fields that shape it."""
    from speccond.harness.models.run_model import model_for

    try:
        return model_for(config)
    except ValueError:
        raise
    except (RuntimeError, TypeError, AssertionError, IndexError) as error:
        raise ValueError(f"model {config.model.name!r} cannot be built for task {config.data.task!r} with embed_dim="
                         f"{config.model.embed_dim}, depth={config.model.depth}, num_heads={config.model.num_heads}, patch_size="
                         f"{config.model.patch_size} ({type(error).__name__}: {error}); change those --set values") from None


def check_comparison_folder(out: Path, config: TrainConfig, varied: Iterable[str] = ()) -> None:
    """ValueError when ``out`` already holds runs whose task or protocol (PROTOCOL_FIELDS, less the
    ``varied`` ones a sweep sets) differs from ``config``'s: their differences would be meaningless."""
    from speccond.harness.training.runs import read_config

    out = Path(out)
    if not out.is_dir():
        return
    fields = [f for f in PROTOCOL_FIELDS if f not in set(varied)]
    for path in sorted({*out.glob("*/config.json"), *out.glob("*/*/config.json"), *out.glob("*/*/*/config.json")}):
        recorded = read_config(path.parent)
        for name in fields:
            theirs, ours = recorded.value(name), config.value(name)
            if theirs == ours:
                continue
            if name == "task":
                raise ValueError(f"{out} holds runs of task {theirs!r} ({path}); a comparison folder holds one task: "
                                 f"use another --out for task {ours!r}")
            raise ValueError(f"{out} holds runs with {name}={theirs} ({path}), not {name}={ours}; a comparison folder "
                             f"holds one protocol ({', '.join(PROTOCOL_FIELDS)}): use another --out, or --sweep {name}")
