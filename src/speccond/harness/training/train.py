"""One training run of any task, readable top to bottom: ``train(config, run_dir)``; resumable at any step.

The task (training_tasks.py) supplies the data, the loss of a batch and the evaluation: cross-entropy
over classes or over masked tokens (classification, mlm), Mask R-CNN's losses and COCO AP (detection).
A run with ``config.model.init_from`` starts from a pre-trained encoder (pretrained.py), loaded once, before
the first step; a resumed run reads its own checkpoint instead.

The run directory (run_dir.py) holds config.json (the config, versions, seed, command), metrics.jsonl
(rows as they happen: "train" every 10 steps; "eval" on the test split after each epoch, or, with a
validation split (``val_size``) and for detection, "val" rows after each epoch and one "eval" at the end,
on validation for a tuning run; tracker rows if asked) and
checkpoints/ (checkpoint.py). Data order and augmentation are functions of (seed, epoch, step), so a run resumed from
any checkpoint ends with the same weights, bit for bit, as one that was never interrupted.
"""
from __future__ import annotations

import logging
import math
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Optional

import torch
from torch import nn

import speccond
from speccond.diagnostics.records import read_metrics
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.training import checkpoint
from speccond.harness.training.accumulation import backward_over
from speccond.harness.training.distributed import Context
from speccond.harness.training.folder_lock import writing
from speccond.harness.training.pretrained import load_pretrained, pretrained_config, run_vocabulary
from speccond.harness.training.run_dir import (
    METRICS, TRAIN_ROW_EVERY, StepLoop, all_finite, announce, append_row, check_records, drop_rows_after,
    record_divergence, recorded_divergence, resume, write_config,
)
from speccond.harness.training.precision import MixedPrecision
from speccond.harness.training.preflight import built_model
from speccond.harness.training.recipe import (  # learning_rate: the default schedule, kept importable here
    Schedule, WeightAverage, adapted_warmup, check_recipe, learning_rate, make_optimizer, prepared,
)
from speccond.harness.training.training_tasks import TrainingTask, training_task

log = logging.getLogger(__name__)


def train(config: TrainConfig, run_dir: Path, stop_after: Optional[int] = None, progress: bool = True,
          on_checkpoint: Optional[Callable[[int], None]] = None, label: str = "") -> dict:
    """Train (or resume) the run in ``run_dir``; return the final row (:func:`train_run`), with subnormal
    floats flushed to 0 for its duration when ``config.run.flush_denormal`` says so."""
    if not config.run.flush_denormal:
        return train_run(config, run_dir, stop_after, progress, on_checkpoint, label)
    if not torch.set_flush_denormal(True):
        raise ValueError("TrainConfig.flush_denormal=1, but this CPU cannot flush subnormal floats (torch needs SSE3); "
                         "use flush_denormal=0")
    try:
        return train_run(config, run_dir, stop_after, progress, on_checkpoint, label)
    finally:
        torch.set_flush_denormal(False)


def train_run(config: TrainConfig, run_dir: Path, stop_after: Optional[int] = None, progress: bool = True,
              on_checkpoint: Optional[Callable[[int], None]] = None, label: str = "") -> dict:
    """Train (or resume) the run in ``run_dir``; return the final row.

    The final row is the test evaluation ({"kind": "eval", ...} with the task's figures), or {"kind":
    "diverged", ...} when the training loss became NaN or inf: the run stops before that step's update,
    keeps its last good checkpoint, records the row in metrics.jsonl, and is not trained again when
    resumed. A run whose metrics.jsonl holds its final row but which has no checkpoint (a finished run kept
    without them: kept_runs) returns that row and trains nothing, rather than starting again over its records.
    Under torchrun the same call trains data-parallel (distributed.py); only rank 0 writes.
    ``stop_after``: stop right after that global step, as a kill would (for tests of resumption).
    ``on_checkpoint(step)``: called on the main process after each checkpoint is on disk (timing.py's
    record of the wall time). ``label`` (which run, e.g. "spectral-svd seed 1") heads the progress bar and the
    line said, with ``progress``, when the run is resumed ("resuming from step N of M") or was finished
    before ("done, skipped").
    """
    context = Context.from_environment(config.run.device)
    run_dir = Path(run_dir)
    metrics = run_dir / METRICS
    check_records(run_dir, config)  # another config, or a lost config.json or metrics.jsonl: refused, not taken over
    task = training_task(config, context)  # loads the data, its sizes checked
    model = built_model(config)  # both before the run directory is written: a refused config leaves nothing
    check_recipe(config)
    if config.model.init_from and not (run_dir / "config.json").exists():  # a new run: its pre-training checked first
        with torch.random.fork_rng(devices=[]):  # reading the pre-training run's kappa builds a model
            pretrained_config(config)
    samples = task.samples
    steps_per_epoch = math.ceil(samples / config.data.batch_size)
    total_steps = steps_per_epoch * config.optimizer.epochs
    warmup = adapted_warmup(config, total_steps)  # a warm-up not shorter than the run: a tenth of it (recipe.py)
    if warmup:
        log.warning("warmup_steps=%d is not shorter than the run's %d steps, so the lr would never reach its peak "
                    "nor decay: %d warm-up steps used (a tenth of the run; recorded in config.json). Set "
                    "warmup_steps below %d to choose", warmup["asked"], total_steps, warmup["used"], total_steps)
    with ExitStack() as held:
        if context.is_main:  # one writer per run directory (folder_lock.py); released however the process ends
            held.enter_context(writing(run_dir))
            write_config(run_dir, config, libraries=task.libraries, splits=task.splits,
                         vocabulary=run_vocabulary(config), warmup=warmup)
        context.barrier()
        def say(what: str) -> None:
            announce(label, what, progress and context.is_main)

        diverged = recorded_divergence(run_dir)
        if diverged is not None:
            say(f"diverged before at step {diverged.get('step', '?')}, skipped")
            return diverged
        _check_shards(samples, config.data.batch_size, context)
        finished = [r for r in read_metrics(metrics, as_written=True) if r.get("kind") == "eval" and r.get("step") == total_steps]
        if finished and checkpoint.latest(run_dir) is None:  # kept without its checkpoints (kept_runs): not trained again
            say("done, skipped")
            return finished[-1]
        model.to(context.device)  # the task stays on the CPU; each batch is moved
        optimizer = make_optimizer(config, task, model)  # the recipe's parts: recipe.py
        schedule = Schedule(config, optimizer, total_steps)
        precision = MixedPrecision(config.run.precision, context.device)
        average = WeightAverage.of(config, model)  # None unless ema_decay
        step = resume(run_dir, model, optimizer, lambda state: _load_extra(state, precision, average))
        if step == 0 and config.model.init_from:
            load_pretrained(model, config)  # in place: the optimiser holds the same parameters
            if average is not None:
                average.ema.set(model)
        if context.is_main:  # rows after the checkpoint go; without one, all (a tracker's step-0 rows included)
            drop_rows_after(metrics, step if step else -1)
        if finished and step == total_steps:  # resumed after the last epoch had finished
            say("done, skipped")
            return finished[-1]
        if step:
            say(f"resuming from step {step} of {total_steps}")
        trained = prepared(config, model, context.wrap)
        tracker = _tracker(config, model, task, metrics) if context.is_main else None
        if tracker is not None and step == 0:
            tracker.step(0)

        def save() -> None:
            if context.is_main:
                checkpoint.save(run_dir, step, step // steps_per_epoch, model,
                                {"optimizer": optimizer.state_dict(), **precision.state(),
                                 **(average.state() if average is not None else {})})
                if on_checkpoint is not None:
                    on_checkpoint(step)

        def evaluation(kind: str, split: str) -> dict:
            row = {"kind": kind, "step": step, "epoch": step // steps_per_epoch}
            if average is not None:  # the weight average is what is evaluated
                return {**row, "total_steps": total_steps, "weights": "ema", **task.evaluate(average.module, split)}
            return {**row, "total_steps": total_steps, **task.evaluate(model, split)}

        final: dict = {}
        with StepLoop(total_steps, step, progress and context.is_main, label) as steps:
            while step < total_steps:
                epoch, index = divmod(step, steps_per_epoch)
                order = torch.randperm(samples, generator=torch.Generator().manual_seed(config.run.seed * 1000 + epoch))
                chosen = order[index * config.data.batch_size : (index + 1) * config.data.batch_size]
                schedule.set(step)
                optimizer.zero_grad(set_to_none=True)
                loss_value, figures = backward_over(task, trained, chosen, step, context, precision,
                                                    config.optimizer.accumulate_steps)  # accumulation.py
                if not math.isfinite(loss_value):
                    return record_divergence(run_dir, step, loss_value, total_steps, write=context.is_main)
                if config.optimizer.grad_clip:
                    precision.unscale(optimizer)
                    nn.utils.clip_grad_norm_(model.parameters(), config.optimizer.grad_clip)
                precision.step(optimizer)
                step += 1
                if average is not None:
                    average.update(model, step)
                steps.advanced(loss_value)
                if step % TRAIN_ROW_EVERY == 0 and context.is_main:
                    append_row(metrics, {"kind": "train", "step": step, "loss": loss_value, "lr": optimizer.param_groups[0]["lr"],
                                         **{name: float(value.detach()) for name, value in figures.items()}})
                if config.method.refresh_every and step % config.method.refresh_every == 0:
                    speccond.refresh(model)  # svd corrections and auto lams follow the weights (docs/THEORY.md section 5)
                if tracker is not None and step % tracker.every == 0 and all_finite(model):
                    tracker.step(step)  # non-finite weights are left to the next step's divergence check
                epoch_done = step % steps_per_epoch == 0
                if epoch_done and task.evaluates_each_epoch:
                    final = evaluation("eval", "test")
                    if context.is_main:
                        append_row(metrics, final)
                elif epoch_done and config.data.val_size and all_finite(model):
                    row = evaluation("val", "val")
                    if context.is_main:
                        append_row(metrics, row)
                if steps.boundary(step, save, epoch_done or step % config.run.checkpoint_every == 0, stop_after):
                    return {}
        if not final:  # the test split once, after training (the validation split, for a tuning run)
            final = {**evaluation("eval", "val"), "split": "val"} if config.run.tuning else evaluation("eval", "test")
            if context.is_main:
                append_row(metrics, final)
        return final


def _load_extra(state: dict, precision: MixedPrecision, average: Optional[WeightAverage]) -> None:
    """What a checkpoint holds beside the model and the optimiser: the gradient scaler, the weight average."""
    precision.load(state)
    if average is not None:
        average.load(state)


def _check_shards(samples: int, batch_size: int, context: Context) -> None:
    """Every rank needs at least one image of every batch, the last (short) one included."""
    last = samples % batch_size or batch_size
    if context.distributed and min(batch_size, last) < context.world:
        raise ValueError(
            f"batch_size {batch_size} over {samples} examples leaves a batch of {min(batch_size, last)} for "
            f"{context.world} processes; choose batch_size and train_size so every batch has >= {context.world} examples"
        )


def _tracker(config: TrainConfig, model: nn.Module, task: TrainingTask, metrics: Path):
    """Spectra and entropy rows every config.run.track_every steps, on the first 8 test examples (None = off)."""
    if not config.run.track_every:
        return None
    from speccond.diagnostics import Tracker
    from speccond.diagnostics.heads import layer_count, refused_layers
    from speccond.diagnostics.spectra import spectra_refusal

    # Spectra need q, k, v that the weights tell: not qk-norm's, whose LayerNorms act after the weights.
    weights = spectra_refusal(model)
    if weights:
        log.info("projection spectra not tracked: %s", weights)
    # Entropy is read on the layers whose heads the head diagnostics rebuild: softmax over tokens rebuilt from
    # the weights (timm ViT and DeiT, BERT; not windowed, channel or landmark attention, an attention pooling
    # head, nor q and k changed by a hook such as qk-norm's). Asked of the model, not of its family's name.
    try:
        refused = refused_layers(model)
        layers, reasons = [index for index in range(layer_count(model)) if index not in refused], list(refused.values())
    except ValueError as uncovered:  # attention no adapter recognises, or none found
        layers, reasons = [], [str(uncovered)]
    for reason in reasons:
        log.info("attention entropy not tracked: %s", reason)
    probe = task.probe().to(next(model.parameters()).device)  # (8, C, H, W) images, (8, L) or (8, 2, L) tokens
    return Tracker(model, (probe,), every=config.run.track_every, path=metrics, entropy=bool(layers),
                   spectra=not weights, layers=layers or None)
