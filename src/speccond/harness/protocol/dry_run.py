"""``speccond compare --dry-run``: everything a comparison would build, and no training.

For every method of the comparison: the task's data pipeline (its data read, augmentation and mixing set
up), the model (its method applied), the optimiser and the schedule, then one forward of the task's loss on
a first batch of two training examples through that pipeline (the training loop's first batch of a run with
``batch_size`` 2, what a streamed folder's loader decodes), without gradients; returned as one line per method
(parameters, optimiser, steps), so a full-scale recipe can be checked on any machine before it is launched.
Nothing is written (the dataset's own cache aside).

Then a few training steps are timed (:func:`step_seconds`, at the run's batch or, for a model too slow for
that here, at a few examples and scaled) on this machine's CPU or the GPU the run would take, and the run's
wall time is estimated as that step time times its steps: training only (evaluation, data loading from
disk and checkpoints not counted), per seed.
"""
from __future__ import annotations

import math
import time
from typing import Sequence

import torch

from speccond.harness.config.train_config import TrainConfig
from speccond.harness.protocol.compare import variants
from speccond.harness.training.accumulation import backward_over
from speccond.harness.training.distributed import Context
from speccond.harness.training.precision import MixedPrecision
from speccond.harness.training.preflight import built_model
from speccond.harness.reporting.numbers import duration, time_unit
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
        seconds, timed_batch = step_seconds(config, task, model, optimizer)
        rows.append({
            "method": name, "model": config.model.name, "parameters": sum(p.numel() for p in model.parameters()),
            "optimizer": f"{type(optimizer).__name__} ({config.optimizer.name})", "scheduler": config.optimizer.scheduler,
            "train_examples": task.samples, "batch_size": config.data.batch_size, "accumulate_steps": config.optimizer.accumulate_steps,
            "steps_per_epoch": steps_per_epoch, "epochs": config.optimizer.epochs, "steps": steps_per_epoch * config.optimizer.epochs,
            "initial_loss": float(loss), "precision": config.run.precision, "ema_decay": config.optimizer.ema_decay,
            "step_seconds": seconds, "timed_batch": timed_batch,
            "estimated_seconds": seconds * steps_per_epoch * config.optimizer.epochs,
        })
        del model, optimizer
    return rows


TIMED_STEPS = 3  # timed training steps per batch size tried, after one untimed
SLOW_STEP = 0.5  # s: a step this slow is timed once, and no larger batch is tried


def step_seconds(config: TrainConfig, task, model: torch.nn.Module, optimizer) -> tuple[float, int]:
    """(estimated wall time of one training step of ``config``, in s; the batch it was timed at).

    Steps (forward, backward, clip, optimiser step) are timed at 2 examples, then 8, 32, ... up to the run's
    batch: TIMED_STEPS at each (one when a step takes SLOW_STEP or more, which also ends the climb), after
    one untimed step; the mean at the largest batch timed, scaled by batch_size over it. So a small model is
    timed at its own batch in about a second and a full-scale one at a few examples, not for minutes. On
    the device the run would train on; the model's weights change, so the caller discards it."""
    cuda = config.run.device == "cuda" or (config.run.device == "auto" and torch.cuda.is_available())
    if cuda and not torch.cuda.is_available():
        raise ValueError("TrainConfig.device is cuda, but torch sees no CUDA device here: time the steps with "
                         "--set device=cpu, or dry-run on the machine that trains")
    context = Context(device=torch.device("cuda" if cuda else "cpu"))  # one process: no group is joined
    model.to(context.device)
    precision = MixedPrecision(config.run.precision, context.device)
    order = torch.randperm(task.samples, generator=torch.Generator().manual_seed(config.run.seed * 1000))

    def step(batch: int) -> float:
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        backward_over(task, model, order[:batch], 0, context, precision, config.optimizer.accumulate_steps)
        if config.optimizer.grad_clip:
            precision.unscale(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.optimizer.grad_clip)
        precision.step(optimizer)
        if cuda:
            torch.cuda.synchronize(context.device)
        return time.perf_counter() - started

    full = min(config.data.batch_size, task.samples)
    batch = min(2, full)
    step(batch)  # untimed: the first call's allocations
    while True:
        times = [step(batch)]
        if times[0] < SLOW_STEP:
            times += [step(batch) for _ in range(TIMED_STEPS - 1)]
        seconds = sum(times) / len(times)
        if batch == full or seconds >= SLOW_STEP:
            return seconds * config.data.batch_size / batch, batch
        batch = min(batch * 4, full)


def estimate(rows: list[dict], seeds: int) -> str:
    """The comparison's estimated training time: per method (one run) and in all, for ``seeds`` seeds."""
    total = sum(row["estimated_seconds"] for row in rows) * seeds
    unit = time_unit(row["estimated_seconds"] for row in rows)  # one unit for every run's figure
    each = ", ".join(f"{row['method']} {duration(row['estimated_seconds'], unit)}" for row in rows)
    return (f"estimated training time: {duration(total)} for {len(rows)} method(s) x {seeds} seed(s) run one after "
            f"another (per run: {each}), from a few timed steps of each on this machine as it is loaded "
            "now; evaluation and checkpoints not counted")


def describe(row: dict) -> str:
    """One line: "spectral: timm:vit_base_patch16_224, 86.6M parameters, AdamW (timm:adamw), ..."."""
    return (f"{row['method']}: {row['model']}, {row['parameters'] / 1e6:.1f}M parameters, {row['optimizer']}, "
            f"scheduler {row['scheduler']}; {row['train_examples']} training examples, batch {row['batch_size']} "
            f"in {row['accumulate_steps']} micro-batches, {row['steps_per_epoch']} steps per epoch x {row['epochs']} "
            f"epochs = {row['steps']} steps; {row['precision']}"
            + (f", weight average {row['ema_decay']:g}" if row["ema_decay"] else "")
            + f"; initial loss {row['initial_loss']:.3f}; {1000 * row['step_seconds']:.0f} ms per step"
            + (f" (timed at batch {row['timed_batch']}, scaled)" if row["timed_batch"] < row["batch_size"] else "")
            + f", about {duration(row['estimated_seconds'])} per run")
