"""The recipe's parts from timm around the training loop (train.py), each off by default:

    optimizer = make_optimizer(config, task, model)    # "adamw": the task's own; "timm:<name>": create_optimizer_v2
    schedule = Schedule(config, optimizer, total_steps)
    schedule.set(step)                                  # every group's lr for this step
    average = WeightAverage.of(config, model)           # timm.utils.ModelEmaV3 when ema_decay > 0, else None
    trained = prepared(config, model, context.wrap)     # channels_last, DDP when distributed, torch.compile

The defaults (optimizer "adamw", scheduler "cosine", ema_decay 0, compile 0, channels_last 0) run exactly the
code the published runs ran: the task's AdamW, ``learning_rate`` of train.py, no average, the model itself.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import torch
from torch import nn

from speccond.harness.config.train_config import TIMM_PREFIX, TrainConfig


WARMUP_SHARE_OF_RUN = 0.1  # the warm-up a run uses when the one asked for is not shorter than the run


def warmup_steps(config: TrainConfig, total_steps: int) -> int:
    """The warm-up the run's schedule uses: ``warmup_steps`` when shorter than the run's ``total_steps``.
    A warm-up as long as the run or longer would never reach the peak lr and never decay, so it is adapted
    to a tenth of the run (rounded down; 0 below 10 steps: the cosine decay from the peak lr alone).
    train.py records the adaptation in config.json (``ADAPTED_WARMUP``) and the report says so."""
    asked = config.optimizer.warmup_steps
    return asked if asked < total_steps else int(WARMUP_SHARE_OF_RUN * total_steps)


ADAPTED_WARMUP = "warmup_adapted"  # config.json's key: {"asked", "used", "total_steps"} when warmup_steps was adapted


def adapted_warmup(config: TrainConfig, total_steps: int) -> dict:
    """config.json's record of an adapted warm-up ({} when the asked one is used as it is)."""
    used = warmup_steps(config, total_steps)
    if used == config.optimizer.warmup_steps:
        return {}
    return {"asked": config.optimizer.warmup_steps, "used": used, "total_steps": total_steps}


def learning_rate(config: TrainConfig, step: int, total_steps: int) -> float:
    """Linear warm-up to config.optimizer.lr over :func:`warmup_steps`, then cosine decay to 0 (scheduler
    "cosine", every published run's)."""
    warmup = warmup_steps(config, total_steps)
    if step < warmup:
        return config.optimizer.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, total_steps - warmup)
    return config.optimizer.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def check_recipe(config: TrainConfig) -> None:
    """ValueError unless timm knows the config's timm:<name> optimiser and scheduler (before anything is written)."""
    if config.optimizer.name.startswith(TIMM_PREFIX):
        from timm.optim import list_optimizers

        name = config.optimizer.name[len(TIMM_PREFIX):]
        if name.lower() not in list_optimizers():
            raise ValueError(f"TrainConfig.optimizer {config.optimizer.name!r}: timm has no optimiser {name!r}; "
                             f"choose one of timm.optim.list_optimizers(), e.g. timm:adamw, timm:lamb, timm:sgd")
    if config.optimizer.scheduler.startswith(TIMM_PREFIX):
        name = config.optimizer.scheduler[len(TIMM_PREFIX):]
        if name not in TIMM_SCHEDULERS:
            raise ValueError(f"TrainConfig.scheduler {config.optimizer.scheduler!r}: choose timm:<one of {', '.join(TIMM_SCHEDULERS)}>")


# create_scheduler_v2's schedules that set the lr as a function of the step alone ("plateau" reads a metric)
TIMM_SCHEDULERS = ("cosine", "tanh", "step", "multistep", "poly", "wsd", "rsqrt", "constant")


def make_optimizer(config: TrainConfig, task, model: nn.Module) -> torch.optim.Optimizer:
    """The task's own optimiser (optimizer "adamw"), or timm's ``create_optimizer_v2`` by name, with
    config.optimizer.lr and config.optimizer.weight_decay; timm exempts biases, norms and ``no_weight_decay()`` from decay."""
    if not config.optimizer.name.startswith(TIMM_PREFIX):
        return task.make_optimizer(model)
    from timm.optim import create_optimizer_v2

    return create_optimizer_v2(model, opt=config.optimizer.name[len(TIMM_PREFIX):], lr=config.optimizer.lr,
                               weight_decay=config.optimizer.weight_decay)


class Schedule:
    """The lr of every step. "cosine": ``learning_rate`` into every group. timm:<name>: ``create_scheduler_v2``
    counted in optimiser steps (its "epochs" are steps here: a linear warm-up over :func:`warmup_steps` from lr 0
    to config.optimizer.lr, then the schedule over the run's remaining steps down to 0), read by ``step_update(step)``:
    a function of the step alone, so a resumed run sets the same lrs."""

    def __init__(self, config: TrainConfig, optimizer: torch.optim.Optimizer, total_steps: int):
        self.config, self.optimizer, self.total_steps = config, optimizer, total_steps
        self.timm = None
        if config.optimizer.scheduler.startswith(TIMM_PREFIX):
            from timm.scheduler import create_scheduler_v2

            warmup = warmup_steps(config, total_steps)
            self.timm, _ = create_scheduler_v2(optimizer, sched=config.optimizer.scheduler[len(TIMM_PREFIX):],
                                               num_epochs=max(1, total_steps - warmup),
                                               warmup_epochs=warmup, warmup_prefix=True, warmup_lr=0.0,
                                               min_lr=0.0, step_on_epochs=False, updates_per_epoch=1)

    def set(self, step: int) -> None:
        if self.timm is not None:
            self.timm.step_update(num_updates=step)
            return
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(self.config, step, self.total_steps)


class WeightAverage:
    """An exponential moving average of the weights (timm.utils.ModelEmaV3, buffers included), updated
    after every optimiser step with the step count as timm's train.py does: the first update copies the
    weights, each later one makes ``average = decay * average + (1 - decay) * weights``. Evaluation reads
    it, and each checkpoint keeps it (state "ema")."""

    def __init__(self, model: nn.Module, decay: float):
        from timm.utils import ModelEmaV3

        self.ema = ModelEmaV3(model, decay=decay)

    @classmethod
    def of(cls, config: TrainConfig, model: nn.Module) -> Optional["WeightAverage"]:
        return cls(model, config.optimizer.ema_decay) if config.optimizer.ema_decay else None

    @property
    def module(self) -> nn.Module:
        return self.ema.module

    def update(self, model: nn.Module, step: int) -> None:
        self.ema.update(model, step=step)

    def state(self) -> dict:
        return {"ema": {k: v.detach().cpu() for k, v in self.ema.module.state_dict().items()}}

    def load(self, state: dict) -> None:
        if "ema" not in state:
            raise ValueError("TrainConfig.ema_decay is set but the checkpoint holds no weight average (state 'ema'); "
                             "resume with the run's recorded config")
        self.ema.module.load_state_dict(state["ema"])


def prepared(config: TrainConfig, model: nn.Module, wrap: Callable[[nn.Module], nn.Module]) -> nn.Module:
    """The module the training steps call: ``model`` in channels_last memory format (in place, when asked),
    then ``wrap``-ped (DistributedDataParallel under torchrun), then ``torch.compile``-d when asked; each
    shares ``model``'s parameters, so the optimiser, checkpoints and evaluation see the same weights.
    ``wrap(model)`` itself by default."""
    if config.run.channels_last:
        model.to(memory_format=torch.channels_last)
    wrapped = wrap(model)
    return torch.compile(wrapped) if config.run.compile else wrapped
