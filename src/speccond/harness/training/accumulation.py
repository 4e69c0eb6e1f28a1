"""The gradient of one optimiser step, over the global batch at once or over N micro-batches of it.

    optimizer.zero_grad(set_to_none=True)
    loss, figures = backward_over(task, trained, chosen, step, context, precision, parts=config.optimizer.accumulate_steps)
    if not math.isfinite(loss): ...     # stopped before a non-finite micro-batch's backward; no update is made

With ``parts`` = 1 (the default) this is the loop the published runs ran: one forward of the task's loss
over ``chosen``, its global mean, and one backward. With ``parts`` = N the task prepares the whole batch as
it would for one step (augmentation, mixing and masking are drawn per step over the whole batch) and
trains on its N consecutive slices in turn (``task.train_loss(..., part=(i, N))``; a streamed image folder
prepares and slices this rank's rows of it, training_tasks.py); each slice's mean is
weighted by its share of the whole batch's targets, so the summed gradient is the gradient of the whole
batch's mean, up to the order of floating-point sums. Under DDP the gradients are all-reduced once, on
the last slice (``no_sync`` before it).
"""
from __future__ import annotations

import math
from contextlib import nullcontext

import torch
from torch import nn

from speccond.harness.training.distributed import Context
from speccond.harness.training.precision import MixedPrecision


def backward_over(task, trained: nn.Module, chosen: torch.Tensor, step: int, context: Context,
                  precision: MixedPrecision, parts: int = 1) -> tuple[float, dict[str, torch.Tensor]]:
    """Accumulate the gradient of the global batch ``chosen``'s mean loss; return that mean (identical on
    every rank) and the task's extra figures (averaged over the micro-batches). A non-finite mean is returned
    at once, before its backward. A batch too short for ``parts`` slices of at least one example per rank
    (an epoch's short last batch) is cut into fewer: the same gradient."""
    parts = max(1, min(parts, chosen.shape[0] // context.world))
    if parts == 1:
        with precision.forward():
            local_mean, counts, figures = task.train_loss(trained, chosen, step, context)
        loss_value = context.global_mean(local_mean, *counts)
        if math.isfinite(loss_value):
            precision.backward(context.local_loss(local_mean, *counts))
        return loss_value, figures
    total, summed = 0.0, {}
    for index in range(parts):
        last = index == parts - 1
        quiet = trained.no_sync() if context.distributed and not last else nullcontext()
        with quiet:
            with precision.forward():
                # counts: (this slice's targets on this rank, the whole global batch's targets)
                local_mean, counts, figures = task.train_loss(trained, chosen, step, context, part=(index, parts))
            # this slice's part of the whole batch's mean: sum over ranks of mean x count, over the whole's count
            share = (context.global_mean(local_mean, *counts) if context.distributed
                     else float(local_mean.detach()) * counts[0] / counts[1])
            total += share
            if not math.isfinite(total):
                return total, {}
            precision.backward(context.local_loss(local_mean, *counts))
        for name, value in figures.items():
            summed[name] = summed.get(name, 0) + value.detach() / parts
    return total, summed
