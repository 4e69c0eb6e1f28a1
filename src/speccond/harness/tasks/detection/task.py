"""The fashion-scenes detection task for the one training loop (harness/training/train.py).

Mask R-CNN (harness/tasks/detection/model.py) on the task's scenes: the loss is the sum of torchvision's five Mask
R-CNN losses, each also written to the "train" rows; evaluation is COCO box and mask AP (metrics.py),
as fractions under their own keys (box_ap, box_ap50, ..., mask_ap, ...). The test scenes are scored once,
after training; the validation scenes (``val_size``) after every epoch, as "val" rows. Data order and
flips are functions of (seed, epoch, step), and the global generator, which Mask R-CNN's anchor and
proposal sampling draw from, is seeded at every step, so a resumed run ends bit for bit where an
uninterrupted one does. Under torchrun each rank takes scenes rank, rank + world, ... of the batch and
DDP averages the ranks' losses (torchvision's reference recipe: Mask R-CNN normalises its losses per
batch of sampled anchors, so this is not exactly the one-process gradient). Evaluation is sharded the same
way: each rank runs the model on scenes rank, rank + world, ... of the split alone, the ranks' detections
are gathered to every rank in scene order and COCO AP is computed once over them, so every rank reports the
figures one process reports for the same weights (tests/test_detection_sharded_evaluation.py).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from speccond import data
from speccond.data.fashion_scenes import Scenes
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.tasks.datasets import task
from speccond.harness.tasks.detection.metrics import coco_evaluate, coco_ground_truth, detections
from speccond.harness.training.distributed import Context
from speccond.harness.training.optimizer import adamw


def load_scenes(config: TrainConfig) -> dict[str, Scenes]:
    """train, val and test scenes of the config's task: the first ``train_size`` (0 = all) training scenes
    of a permutation seeded by config.run.seed, the first ``val_size`` and ``test_size`` (0 = all) in stored
    order."""
    arrays = data.load(task(config.data.task).dataset)
    chosen = {}
    for split, size in (("train", config.data.train_size), ("val", config.data.val_size), ("test", config.data.test_size)):
        available = arrays[f"{split}_images"].shape[0]
        if size > available:
            raise ValueError(f"TrainConfig.{split}_size={size} but task {config.data.task!r} has {available} "
                             f"{split} scenes; use at most {available}, or 0 for all")
        if split == "train":
            index = torch.randperm(available, generator=torch.Generator().manual_seed(config.run.seed))[: size or None]
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


def evaluate(model: nn.Module, scenes: Scenes, batch_size: int = 25, context: Optional[Context] = None) -> dict:
    """COCO box and mask AP of ``model`` on ``scenes`` (metrics.py), and the number of scenes.

    Under torchrun (``context`` distributed) each rank runs the model on its scenes rank, rank + world, ...
    only; every rank gathers all the ranks' detection rows, puts them in scene order (within a scene, in the
    order the model gave them, as one process has them) and scores them once: AP is not a mean of the
    shards' APs."""
    everything = torch.arange(scenes.images.shape[0])  # (N,) scene ids, the COCO image ids
    sharded = context is not None and context.distributed
    results = scene_detections(model, scenes, context.shard(everything) if sharded else everything, batch_size)
    if sharded:  # a stable sort: each rank's rows are already in scene order
        results = sorted((row for rows in context.gathered(results) for row in rows), key=lambda row: row["image_id"])
    truth = coco_ground_truth(scenes.instances, scenes.labels, scenes.boxes)
    return {**coco_evaluate(truth, results), "scenes": int(scenes.images.shape[0])}


def scene_detections(model: nn.Module, scenes: Scenes, index: torch.Tensor, batch_size: int) -> list[dict]:
    """COCO result rows (metrics.detections) of ``model`` on scenes ``index`` (int64 (n,)), run in
    consecutive batches of ``batch_size`` of them in eval mode; the rows in the order of ``index``."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    results = []
    with torch.no_grad():
        for start in range(0, index.shape[0], batch_size):
            chosen = index[start : start + batch_size]  # (b,)
            images, _ = batch_of(scenes, chosen)
            outputs = model([image.to(device) for image in images])
            results += detections(chosen.tolist(), [{k: v.cpu() for k, v in o.items()} for o in outputs])
    model.train(was_training)
    return results


class Detection:
    """The TrainingTask (harness/training/training_tasks.py) of the fashion-scenes task."""

    metrics = ("box_ap", "box_ap50", "box_ap75", "mask_ap", "mask_ap50")
    libraries = ("torchvision", "timm", "pycocotools")
    evaluates_each_epoch = False  # the test scenes once, at the end; "val" rows after each epoch

    def __init__(self, config: TrainConfig, context: Optional[Context] = None):
        """``context``: the ranks its evaluation is sharded over (one process when None)."""
        if config.run.track_every:
            raise ValueError("TrainConfig.track_every: the tracker reads classification models; the detection "
                             "task is not tracked (leave track_every at 0)")
        self.config = config
        self.context = context or Context()
        self.scenes = load_scenes(config)
        self.samples = self.scenes["train"].images.shape[0]
        self.splits = {"val": {"size": config.data.val_size, "stored": "the dataset's own val scenes"}} if config.data.val_size else {}

    def make_optimizer(self, model: nn.Module) -> torch.optim.AdamW:
        """optimizer.adamw with the trunk's ``no_weight_decay()`` names exempt as patterns (position
        embeddings; XCiT's "pos_embed.*")."""
        exempt = [f"backbone.trunk.{name}" for name in model.backbone.trunk.no_weight_decay()]
        return adamw(model, self.config.optimizer.lr, self.config.optimizer.weight_decay, exempt_patterns=exempt)

    def train_loss(self, model, chosen, step, context):
        seed = self.config.run.seed * 10**6 + step
        flip = torch.rand(chosen.numel(), generator=torch.Generator().manual_seed(seed)) < 0.5
        images, targets = batch_of(self.scenes["train"], chosen, flip)
        images = [image.to(context.device) for image in context.shard(images)]
        targets = [{k: v.to(context.device) for k, v in target.items()} for target in context.shard(targets)]
        torch.manual_seed(seed)  # Mask R-CNN samples anchors and proposals from it
        losses = model(images, targets)  # {"loss_classifier", "loss_box_reg", "loss_mask", "loss_objectness", ...}
        return sum(losses.values()), (len(images), chosen.numel()), losses

    def evaluate(self, model, split):
        return evaluate(model, self.scenes[split], self.config.data.eval_batch_size, self.context)

    def probe(self):
        return None
