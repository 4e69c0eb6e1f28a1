"""One detection training run, readable top to bottom: ``train(config, run_dir)``; resumable at any step.

The classification harness's conventions (experiments/train.py), kept by the same run-directory code
(experiments/run_dir.py): config.json (the config, versions, command), metrics.jsonl ("train" rows every
10 steps with each Mask R-CNN loss, "val" rows after each epoch, a final "eval" row on the test scenes,
or a "diverged" row), atomic checkpoints (experiments/checkpoint.py) every ``checkpoint_every`` steps
and at each epoch's end, a tqdm progress bar with rate and ETA, Ctrl-C honoured at a step boundary,
warm-up then cosine learning rate, AdamW with decay on matrices only.

The final row is {"kind": "eval", "split": "test", "box_ap", "box_ap50", "box_ap75", "mask_ap", ...,
"accuracy": box_ap} (COCO AP as fractions, metrics.py; "accuracy" carries the reported figure, box AP,
for readers of classification rows). Data order and flips are functions of (seed, epoch, step), and the
global generator, which Mask R-CNN's anchor and proposal sampling draw from, is seeded at every step, so
a run resumed from any checkpoint ends with the same weights, bit for bit, as one never interrupted.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import torch
from torch import nn

import speccond
from speccond import data
from speccond.data.fashion_scenes import SceneConfig, Scenes
from speccond.detection.config import TASKS, DetectionConfig
from speccond.diagnostics.records import read_metrics
from speccond.detection.metrics import coco_evaluate, coco_ground_truth, detections
from speccond.detection.model import build_detector
from speccond.experiments import checkpoint
from speccond.experiments.optimizer import adamw
from speccond.experiments.run_dir import (
    METRICS, StepLoop, all_finite, append_row, drop_rows_after, record_divergence, recorded_divergence,
    resume, write_config,
)
from speccond.experiments.train import TRAIN_ROW_EVERY, learning_rate

KIND = "detection"  # config.json "kind": tells detection run directories from classification ones


def load_scenes(config: DetectionConfig) -> dict[str, Scenes]:
    """train, val and test scenes of the config's task: the first ``train_size`` (0 = all) training scenes
    of a permutation seeded by config.seed, the first ``val_size`` and ``test_size`` (0 = all) in stored
    order."""
    arrays = data.load(TASKS[config.task])
    chosen = {}
    for split, size in (("train", config.train_size), ("val", config.val_size), ("test", config.test_size)):
        available = arrays[f"{split}_images"].shape[0]
        if size > available:
            raise ValueError(f"DetectionConfig.{split}_size={size} but task {config.task!r} has {available} "
                             f"{split} scenes; use at most {available}, or 0 for all")
        if split == "train":
            index = torch.randperm(available, generator=torch.Generator().manual_seed(config.seed))[: size or None]
        else:
            index = torch.arange(size or available)
        chosen[split] = Scenes(*(arrays[f"{split}_{field}"][index] for field in Scenes._fields))
    return chosen


def batch_of(scenes: Scenes, index: torch.Tensor, flip: Optional[torch.Tensor] = None) -> tuple[list, list]:
    """Mask R-CNN inputs for scenes ``index``: images [(1, S, S) float in [0, 1]] and targets [{"boxes"
    float (n, 4), "labels" int64 (n,) class + 1, "masks" uint8 (n, S, S)}], each scene flipped left-right
    where ``flip`` (bool per scene) says."""
    images, targets = [], []
    for position, n in enumerate(index.tolist()):
        image, owner = scenes.images[n].float().div(255), scenes.instances[n]  # (1, S, S), (S, S)
        present = torch.nonzero(scenes.labels[n] >= 0).flatten()  # (k,)
        boxes = scenes.boxes[n, present].float()  # (k, 4) x0, y0, x1, y1
        if flip is not None and bool(flip[position]):
            image, owner = image.flip(-1), owner.flip(-1)
            width = image.shape[-1]
            boxes = torch.stack([width - boxes[:, 2], boxes[:, 1], width - boxes[:, 0], boxes[:, 3]], dim=1)
        masks = (owner.unsqueeze(0) == (present + 1).view(-1, 1, 1).to(owner.dtype)).to(torch.uint8)  # (k, S, S)
        images.append(image)
        targets.append({"boxes": boxes, "labels": scenes.labels[n, present] + 1, "masks": masks})
    return images, targets


def evaluate(model: nn.Module, scenes: Scenes, batch_size: int = 25) -> dict:
    """COCO box and mask AP of ``model`` on ``scenes`` (metrics.py), and the number of scenes."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    results = []
    with torch.no_grad():
        for start in range(0, scenes.images.shape[0], batch_size):
            index = torch.arange(start, min(start + batch_size, scenes.images.shape[0]))
            images, _ = batch_of(scenes, index)
            outputs = model([image.to(device) for image in images])
            results += detections(index.tolist(), [{k: v.cpu() for k, v in o.items()} for o in outputs])
    model.train(was_training)
    truth = coco_ground_truth(scenes.instances, scenes.labels, scenes.boxes)
    return {**coco_evaluate(truth, results), "scenes": int(scenes.images.shape[0])}


def make_optimizer(model: nn.Module, config: DetectionConfig) -> torch.optim.AdamW:
    """optimizer.adamw with the trunk's ``no_weight_decay()`` names exempt (position embeddings; patterns
    such as XCiT's "pos_embed.*")."""
    exempt = [f"backbone.trunk.{name}" for name in model.backbone.trunk.no_weight_decay()]
    return adamw(model, config.lr, config.weight_decay, exempt_patterns=exempt)


def detector_for(config: DetectionConfig) -> nn.Module:
    """The model a run of ``config`` trains (for loading its checkpoints)."""
    spec = data.spec(TASKS[config.task])
    return build_detector(config, len(spec.classes), SceneConfig().canvas)  # the task stores the default scenes


def train(config: DetectionConfig, run_dir: Path, stop_after: Optional[int] = None, progress: bool = True) -> dict:
    """Train (or resume) the detection run in ``run_dir``; return the final row (module docstring).

    A run whose training loss becomes NaN or inf stops before that step's update with a "diverged" row
    and keeps its last good checkpoint, as in the classification harness. ``stop_after``: stop right
    after that global step, as a kill would (for tests of resumption)."""
    run_dir = Path(run_dir)
    metrics = run_dir / METRICS
    write_config(run_dir, config, libraries=("torchvision", "timm", "pycocotools"), kind=KIND)
    diverged = recorded_divergence(run_dir)
    if diverged is not None:
        return diverged
    device = torch.device("cuda" if config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available()) else "cpu")
    scenes = load_scenes(config)
    samples = scenes["train"].images.shape[0]
    model = detector_for(config).to(device)
    model.train()
    optimizer = make_optimizer(model, config)
    steps_per_epoch = math.ceil(samples / config.batch_size)
    total_steps = steps_per_epoch * config.epochs
    step = resume(run_dir, model, optimizer)
    drop_rows_after(metrics, step)
    finished = [r for r in read_metrics(metrics, as_written=True) if r.get("kind") == "eval" and r.get("step") == total_steps]
    if finished:
        return finished[-1]

    def save() -> None:
        checkpoint.save(run_dir, step, step // steps_per_epoch, model, {"optimizer": optimizer.state_dict()})

    with StepLoop(total_steps, step, progress) as steps:
        while step < total_steps:
            epoch, index = divmod(step, steps_per_epoch)
            order = torch.randperm(samples, generator=torch.Generator().manual_seed(config.seed * 1000 + epoch))
            chosen = order[index * config.batch_size : (index + 1) * config.batch_size]
            flip = torch.rand(chosen.numel(), generator=torch.Generator().manual_seed(config.seed * 10**6 + step)) < 0.5
            images, targets = batch_of(scenes["train"], chosen, flip)
            images = [image.to(device) for image in images]
            targets = [{k: v.to(device) for k, v in target.items()} for target in targets]
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(config, step, total_steps)
            torch.manual_seed(config.seed * 10**6 + step)  # Mask R-CNN samples anchors and proposals from it
            losses = model(images, targets)  # {"loss_classifier", "loss_box_reg", "loss_mask", "loss_objectness", ...}
            loss = sum(losses.values())
            loss_value = float(loss.detach())
            if not math.isfinite(loss_value):
                return record_divergence(run_dir, step, loss_value, total_steps)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip:
                nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            step += 1
            steps.advanced(loss_value)
            if step % TRAIN_ROW_EVERY == 0:
                append_row(metrics, {"kind": "train", "step": step, "loss": loss_value, "lr": optimizer.param_groups[0]["lr"],
                                     **{name: float(value.detach()) for name, value in losses.items()}})
            if config.refresh_every and step % config.refresh_every == 0:
                speccond.refresh(model.backbone.trunk)
            epoch_done = step % steps_per_epoch == 0
            if epoch_done and config.val_size and all_finite(model):
                append_row(metrics, {"kind": "val", "step": step, "epoch": step // steps_per_epoch,
                                     **evaluate(model, scenes["val"], config.eval_batch_size)})
            if steps.boundary(step, save, epoch_done or step % config.checkpoint_every == 0, stop_after):
                return {}
    result = evaluate(model, scenes["test"], config.eval_batch_size)
    final = {"kind": "eval", "split": "test", "step": step, "epoch": step // steps_per_epoch, "total_steps": total_steps,
             "accuracy": result["box_ap"], **result}
    append_row(metrics, final)
    return final
