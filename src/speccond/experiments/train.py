"""One training run, readable top to bottom: ``train(config, run_dir)``; resumable at any step.

Classification tasks train on cross-entropy over classes; the mlm task on cross-entropy over the masked
tokens (mlm.py: masks drawn per step, ``mlm.targets`` lists the labels the model's logits stand for).
A run with ``config.init_from`` starts from a pre-trained encoder (pretrained.py), loaded once, before
the first step; a resumed run reads its own checkpoint instead.

The run directory (run_dir.py) holds config.json (the config, versions, seed, command), metrics.jsonl
(rows as they happen: "train" every 10 steps, "eval" after each epoch, tracker rows if asked) and
checkpoints/ (checkpoint.py). Data order and augmentation are functions of (seed, epoch, step), so a run resumed from
any checkpoint ends with the same weights, bit for bit, as one that was never interrupted.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

import speccond
from speccond.experiments import checkpoint, mlm
from speccond.experiments.config import TrainConfig
from speccond.experiments.distributed import Context
from speccond.experiments.optimizer import adamw
from speccond.experiments.pretrained import load_pretrained
from speccond.experiments.run_dir import (
    METRICS, StepLoop, all_finite, append_row, drop_rows_after, record_divergence, recorded_divergence, resume,
    write_config,
)
from speccond.experiments.run_model import build_model
from speccond.experiments.tasks import load_task, task_shape

TRAIN_ROW_EVERY = 10
log = logging.getLogger(__name__)


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """optimizer.adamw with the model's ``no_weight_decay()`` names exempt, read as names (timm's position
    embedding and class tokens)."""
    exempt = model.no_weight_decay() if hasattr(model, "no_weight_decay") else ()
    return adamw(model, config.lr, config.weight_decay, exempt_names=exempt)


def augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random horizontal flip and a random shift of up to 2 pixels (zero padded): (B, C, H, W)."""
    flip = torch.rand(images.shape[0], generator=generator) < 0.5
    images = torch.where(flip[:, None, None, None], images.flip(-1), images)
    padded = F.pad(images, (2, 2, 2, 2))
    dy, dx = torch.randint(0, 5, (2,), generator=generator).tolist()
    return padded[..., dy : dy + images.shape[-2], dx : dx + images.shape[-1]]


def learning_rate(config: TrainConfig, step: int, total_steps: int) -> float:
    """Linear warm-up to config.lr, then cosine decay to 0."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, total_steps - config.warmup_steps)
    return config.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def evaluate(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, batch_size: int = 500) -> dict:
    """Accuracy and mean cross-entropy over the predictions: one per example, or one per masked token (mlm)."""
    device = next(model.parameters()).device
    model.eval()
    correct, loss, count = 0, 0.0, 0
    with torch.no_grad():
        for start in range(0, inputs.shape[0], batch_size):
            logits = model(inputs[start : start + batch_size].to(device))  # (b, classes) or (n, vocab)
            target = mlm.targets(labels[start : start + batch_size]).to(device)  # (b,) or (n,)
            loss += float(F.cross_entropy(logits, target, reduction="sum"))
            correct += int((logits.argmax(-1) == target).sum())
            count += target.shape[0]
    model.train()
    return {"accuracy": correct / count, "loss": loss / count}


def train(config: TrainConfig, run_dir: Path, stop_after: Optional[int] = None, progress: bool = True) -> dict:
    """Train (or resume) the run in ``run_dir``; return the final row.

    The final row is the last evaluation ({"kind": "eval", ...}), or {"kind": "diverged", ...} when the
    training loss became NaN or inf: the run stops before that step's update, keeps its last good
    checkpoint, records the row in metrics.jsonl, and is not trained again when resumed.
    Under torchrun the same call trains data-parallel (distributed.py); only rank 0 writes.
    ``stop_after``: stop right after that global step, as a kill would (for tests of resumption).
    """
    context = Context.from_environment(config.device)
    run_dir = Path(run_dir)
    metrics = run_dir / METRICS
    if context.is_main:
        write_config(run_dir, config, libraries=("timm",))
    context.barrier()
    diverged = recorded_divergence(run_dir)
    if diverged is not None:
        return diverged
    task = load_task(config)
    samples = task["train_x"].shape[0]
    _check_shards(samples, config.batch_size, context)
    shape = task_shape(config.task)
    model = build_model(config, shape)
    model.to(context.device)  # the task stays on the CPU; each batch is moved
    optimizer = make_optimizer(model, config)
    steps_per_epoch = math.ceil(samples / config.batch_size)
    total_steps = steps_per_epoch * config.epochs
    step = resume(run_dir, model, optimizer)
    if step == 0 and config.init_from:
        load_pretrained(model, config)  # in place: the optimiser holds the same parameters
    if context.is_main:
        drop_rows_after(metrics, step)
    trained = context.wrap(model)
    tracker = _tracker(config, model, task, metrics) if context.is_main else None
    if tracker is not None and step == 0:
        tracker.step(0)

    def save() -> None:
        if context.is_main:
            checkpoint.save(run_dir, step, step // steps_per_epoch, model, {"optimizer": optimizer.state_dict()})

    final: dict = {}
    with StepLoop(total_steps, step, progress and context.is_main) as steps:
        while step < total_steps:
            epoch, index = divmod(step, steps_per_epoch)
            order = torch.randperm(samples, generator=torch.Generator().manual_seed(config.seed * 1000 + epoch))
            batch = order[index * config.batch_size : (index + 1) * config.batch_size]
            inputs = task["train_x"][batch]  # (b, C, H, W) images, (b, L) tokens or (b, 2, L) pairs
            labels = task["train_y"][batch]  # (b,) classes, or (b, L) tokens for mlm
            if inputs.dim() == 4:
                inputs = augment(inputs, torch.Generator().manual_seed(config.seed * 10**6 + step))
            if shape.mlm:  # inputs (b, 2, L) ids and prediction flags, labels (b, L) with IGNORE
                masks = torch.Generator().manual_seed(config.seed * 10**6 + step)
                inputs, labels = mlm.mask_tokens(inputs, masks, shape.vocab)
            inputs = context.shard(inputs).to(context.device)  # (b / world, ...)
            local_labels = context.shard(labels).to(context.device)
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(config, step, total_steps)
            local_targets = mlm.targets(local_labels)  # (b / world,) or (n / world,): what the logits predict
            local_mean = F.cross_entropy(trained(inputs), local_targets)
            counts = (local_targets.shape[0], mlm.targets(labels).shape[0])  # this rank's and the global batch's
            loss_value = context.global_mean(local_mean, *counts)
            if not math.isfinite(loss_value):
                return record_divergence(run_dir, step, loss_value, total_steps, write=context.is_main)
            optimizer.zero_grad(set_to_none=True)
            context.local_loss(local_mean, *counts).backward()
            if config.grad_clip:
                nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            step += 1
            steps.advanced(loss_value)
            if step % TRAIN_ROW_EVERY == 0 and context.is_main:
                append_row(metrics, {"kind": "train", "step": step, "loss": loss_value, "lr": optimizer.param_groups[0]["lr"]})
            if config.refresh_every and step % config.refresh_every == 0:
                speccond.refresh(model)  # svd corrections and auto lams follow the weights (PAPER.md section 5)
            if tracker is not None and step % tracker.every == 0 and all_finite(model):
                tracker.step(step)  # non-finite weights are left to the next step's divergence check
            epoch_done = step % steps_per_epoch == 0
            if epoch_done:
                final = {"kind": "eval", "step": step, "epoch": step // steps_per_epoch, "total_steps": total_steps,
                         **evaluate(model, task["test_x"], task["test_y"])}
                if context.is_main:
                    append_row(metrics, final)
            if steps.boundary(step, save, epoch_done or step % config.checkpoint_every == 0, stop_after):
                return {}
    if not final:  # resumed after the last epoch had finished
        final = {"kind": "eval", "step": step, "epoch": step // steps_per_epoch, "total_steps": total_steps,
                 **evaluate(model, task["test_x"], task["test_y"])}
    return final


def _check_shards(samples: int, batch_size: int, context: Context) -> None:
    """Every rank needs at least one image of every batch, the last (short) one included."""
    last = samples % batch_size or batch_size
    if context.distributed and min(batch_size, last) < context.world:
        raise ValueError(
            f"batch_size {batch_size} over {samples} examples leaves a batch of {min(batch_size, last)} for "
            f"{context.world} processes; choose batch_size and train_size so every batch has >= {context.world} examples"
        )


def _tracker(config: TrainConfig, model: nn.Module, task: dict, metrics: Path):
    """Spectra and entropy rows every config.track_every steps, on the first 8 test examples (None = off)."""
    if not config.track_every:
        return None
    from speccond.diagnostics import Tracker
    from speccond.diagnostics.heads import rebuild_refusal

    # Entropy needs the head diagnostics to rebuild every attention layer: softmax over tokens rebuilt from
    # the weights (timm ViT and DeiT, BERT; not windowed, channel or landmark attention, nor q and k changed
    # by a hook such as qk-norm's). Asked of the model, not of its family's name.
    refusal = rebuild_refusal(model)
    if refusal:
        log.info("attention entropy not tracked: %s", refusal)
    entropy = not refusal
    probe = task["test_x"][:8].to(next(model.parameters()).device)  # (8, C, H, W) images, (8, L) or (8, 2, L) tokens
    return Tracker(model, (probe,), every=config.track_every, path=metrics, entropy=entropy)
