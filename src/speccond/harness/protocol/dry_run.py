"""``speccond compare --dry-run``: everything a comparison would build, and no training.

For every method of the comparison: the task's data pipeline (its data read, augmentation and mixing set
up), the model (its method applied), the optimiser and the schedule, then one forward of the task's loss on
a first batch of two training examples through that pipeline (the training loop's first batch of a run with
``batch_size`` 2, what a streamed folder's loader decodes), without gradients; returned as one line per method
(parameters, optimiser, steps), so a full-scale recipe can be checked on any machine before it is launched.
Nothing is written (the dataset's own cache aside).
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

from speccond.harness.config.train_config import TrainConfig
from speccond.harness.protocol.compare import variants
from speccond.harness.training.distributed import Context
from speccond.harness.training.preflight import built_model
from speccond.harness.training.recipe import Schedule, check_recipe, make_optimizer
from speccond.harness.training.training_tasks import training_task


def dry_run(base: TrainConfig, methods: Sequence[str]) -> list[dict]:
    """One row per method: what its run would build ({"method", "parameters", "optimizer", "steps", ...})."""
    rows = []
    task = None
    for name, config in variants(base, methods, {}):
        check_recipe(config)
        # the data are the same for every method; batches of 2, one slice each, for the forward below
        task = task or training_task(config.replaced(batch_size=2, accumulate_steps=1))
        with torch.random.fork_rng(devices=[]):  # building a model seeds the global generator
            model = built_model(config)
        steps_per_epoch = math.ceil(task.samples / config.data.batch_size)
        optimizer = make_optimizer(config, task, model)
        Schedule(config, optimizer, steps_per_epoch * config.optimizer.epochs).set(0)
        with torch.no_grad():
            first = torch.randperm(task.samples, generator=torch.Generator().manual_seed(config.run.seed * 1000))[:2]
            loss, _, _ = task.train_loss(model, first, 0, Context())  # train.py's batch of step 0
        rows.append({
            "method": name, "model": config.model.name, "parameters": sum(p.numel() for p in model.parameters()),
            "optimizer": f"{type(optimizer).__name__} ({config.optimizer.name})", "scheduler": config.optimizer.scheduler,
            "train_examples": task.samples, "batch_size": config.data.batch_size, "accumulate_steps": config.optimizer.accumulate_steps,
            "steps_per_epoch": steps_per_epoch, "epochs": config.optimizer.epochs, "steps": steps_per_epoch * config.optimizer.epochs,
            "initial_loss": float(loss), "precision": config.run.precision, "ema_decay": config.optimizer.ema_decay,
        })
        del model, optimizer
    return rows


def describe(row: dict) -> str:
    """One line: "spectral: timm:vit_base_patch16_224, 86.6M parameters, AdamW (timm:adamw), ..."."""
    return (f"{row['method']}: {row['model']}, {row['parameters'] / 1e6:.1f}M parameters, {row['optimizer']}, "
            f"scheduler {row['scheduler']}; {row['train_examples']} training examples, batch {row['batch_size']} "
            f"in {row['accumulate_steps']} micro-batches, {row['steps_per_epoch']} steps per epoch x {row['epochs']} "
            f"epochs = {row['steps']} steps; {row['precision']}"
            + (f", weight average {row['ema_decay']:g}" if row["ema_decay"] else "")
            + f"; initial loss {row['initial_loss']:.3f}")
