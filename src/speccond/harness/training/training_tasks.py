"""What the training loop (train.py) asks of a task: the TrainingTask protocol and its registry.

    task = training_task(config)        # by how the config's task reads its data (tasks.py)
    task.samples                        # training examples; the loop draws a seeded order of them per epoch
    local_mean, counts, extra = task.train_loss(model, chosen, step, context)
    row = task.evaluate(model, "test")  # the figures of one split, under the task's own keys

Two implementations: :class:`Supervised` (cross-entropy: image, sequence and text classification and
masked-language-model pre-training) here, and harness/tasks/detection/task.py's ``Detection`` (Mask R-CNN's losses,
COCO metrics), a plugin task (tasks/plugins.py). A new task of that kind is one plugin module, named by the
``plugin`` of its task file (harness/tasks/registry.py).
"""
from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from speccond.harness.config.train_config import TrainConfig
from speccond.harness.tasks import mlm
from speccond.harness.tasks.datasets import (
    VALIDATION_SEED, check_task_settings, indices_sha256, load_task, task, task_shape,
)
from speccond.harness.tasks.plugins import hook
from speccond.harness.training.distributed import Context
from speccond.harness.training.image_transforms import image_seed
from speccond.harness.training.optimizer import adamw
from speccond.harness.training.streaming import Tally, streamed_task, two_class_figures


class TrainingTask(Protocol):
    metrics: tuple[str, ...]  # the final row's figures, headline first ("accuracy", "box_ap")
    libraries: tuple[str, ...]  # whose versions config.json records beside speccond's and torch's
    evaluates_each_epoch: bool  # True: the test split after every epoch (the final row is the last one's)
    samples: int
    splits: dict  # how the validation split was drawn, for config.json ({} when there is none)

    def make_optimizer(self, model: nn.Module) -> torch.optim.AdamW: ...

    def train_loss(self, model: nn.Module, chosen: torch.Tensor, step: int, context: Context
                   ) -> tuple[torch.Tensor, tuple[int, int], dict[str, torch.Tensor]]:
        """This rank's mean loss over its share of the examples ``chosen`` (global batch indices), the
        (local, global) counts it averages over, and extra figures for the "train" row."""
        ...

    def evaluate(self, model: nn.Module, split: str) -> dict: ...

    def probe(self) -> torch.Tensor | None:
        """Inputs for the tracker's attention rows (None: this task cannot be tracked)."""
        ...


def augment(images: torch.Tensor, generator: torch.Generator, context: Context | None = None,
            batch: int = 0) -> torch.Tensor:
    """Random horizontal flip and a random shift of up to 2 pixels (zero padded): (B, C, H, W).

    With ``context`` and ``batch``: ``images`` are this rank's rows (``rank::world``) of a global batch of
    ``batch`` images, augmented as they would be in the global batch (the same draws, this rank's rows)."""
    flip = torch.rand(batch or images.shape[0], generator=generator) < 0.5
    if context is not None:
        flip = context.shard(flip)
    images = torch.where(flip[:, None, None, None], images.flip(-1), images)
    padded = F.pad(images, (2, 2, 2, 2))
    dy, dx = torch.randint(0, 5, (2,), generator=generator).tolist()
    return padded[..., dy : dy + images.shape[-2], dx : dx + images.shape[-1]]


def evaluate(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, batch_size: int = 500,
             context: Context | None = None, two_class: bool = False) -> dict:
    """Accuracy and mean cross-entropy over the predictions: one per example, or one per masked token (mlm), the
    majority class's share of the targets (streaming.reduced); ``two_class``: also "mcc" (Matthews correlation)
    and "f1" (of class 1), as GLUE scores CoLA and MRPC.
    Under torchrun (``context`` distributed) each rank evaluates its rows ``rank::world`` and the sums are
    all-reduced, so every example counts once."""
    if context is not None and context.distributed:
        inputs, labels = context.shard(inputs), context.shard(labels)
    device = next(model.parameters()).device
    model.eval()
    tally = Tally(two_class)
    with torch.no_grad():
        for start in range(0, inputs.shape[0], batch_size):
            logits = model(inputs[start : start + batch_size].to(device))  # (b, classes) or (n, vocab)
            tally.add(logits, mlm.targets(labels[start : start + batch_size]).to(device))  # (b,) or (n,)
    model.train()
    return tally.figures(context or Context())


class Supervised:
    """Cross-entropy over classes, or over the masked tokens (mlm.py: masks drawn per step)."""

    metrics = ("accuracy", "loss")
    libraries = ("timm",)

    def __init__(self, config: TrainConfig, context: Context | None = None):
        self.config = config
        self.context = context or Context()
        self.metrics = supervised_metrics(config)
        self.shape = task_shape(config.data.task)
        # a streamed image folder or text task reads its batches from disk (streaming.py); every other is in memory
        self.stream = streamed_task(config, self.context)
        self.data = load_task(config) if self.stream is None else {"val_index": self.stream.val_index}
        self.samples = self.data["train_x"].shape[0] if self.stream is None else self.stream.samples
        # Without a validation split, the test split after every epoch (the published runs' protocol); with
        # one, "val" rows after every epoch and the test split once, at the end (the tuning protocol of
        # docs/RESULTS.md, "Pre-registered protocol of the fair comparison").
        self.evaluates_each_epoch = not config.data.val_size
        self.mixing = None
        if (config.data.mixup or config.data.cutmix or config.data.label_smoothing) and self.shape.kind == "image":
            from timm.data import Mixup

            self.mixing = Mixup(mixup_alpha=config.data.mixup, cutmix_alpha=config.data.cutmix,
                                label_smoothing=config.data.label_smoothing, num_classes=self.shape.classes,
                                prob=1.0 if (config.data.mixup or config.data.cutmix) else 0.0)
        self.transform = None  # timm's training augmentation, when asked (image_transforms.py)
        self._prepared = (None, None, None, None)  # a streamed step's rows: (step, inputs, labels, soft targets)
        if (config.data.auto_augment or config.data.random_erasing) and self.shape.kind == "image" and self.stream is None:
            from speccond.harness.training.image_transforms import TimmAugmentation

            self.transform = TimmAugmentation(config, self.data["train_x"].shape[-1], self.data["pixel_mean"],
                                              self.data["pixel_std"])
        self.channels_last = bool(config.run.channels_last)
        self.splits = {}
        if config.data.val_size:
            self.splits["val"] = {"size": config.data.val_size, "seed": VALIDATION_SEED,
                                  "indices_sha256": indices_sha256(self.data["val_index"])}

    def make_optimizer(self, model: nn.Module) -> torch.optim.AdamW:
        """optimizer.adamw with the model's ``no_weight_decay()`` names exempt, read as names (timm's position
        embedding and class tokens)."""
        exempt = model.no_weight_decay() if hasattr(model, "no_weight_decay") else ()
        return adamw(model, self.config.optimizer.lr, self.config.optimizer.weight_decay, exempt_names=exempt)

    def train_loss(self, model, chosen, step, context, part=(0, 1)):
        """``part`` (i, N): the i-th of N consecutive slices of the batch, prepared whole (accumulation.py);
        its counts are then (this slice's targets on this rank, the whole global batch's targets)."""
        config = self.config
        if self.stream is not None:  # this rank's rows alone are decoded, normalised, augmented and mixed
            inputs, labels, soft = self._stream_rows(chosen, step, context, part)
            if part != (0, 1):  # (b / world / N, ...) the i-th consecutive slice of this rank's rows
                rows = torch.tensor_split(torch.arange(inputs.shape[0]), part[1])[part[0]]
                inputs, labels = inputs[rows], labels[rows]
                soft = None if soft is None else soft[rows]
            inputs = inputs.to(context.device)
            if self.channels_last:
                inputs = inputs.contiguous(memory_format=torch.channels_last)
            if soft is not None:
                from timm.loss import SoftTargetCrossEntropy

                local_mean = SoftTargetCrossEntropy()(model(inputs), soft.to(context.device))
            else:
                local_mean = F.cross_entropy(model(inputs), labels.to(context.device))
            return local_mean, (labels.shape[0], chosen.shape[0]), {}
        inputs = self.data["train_x"][chosen]  # (b, C, H, W) images, (b, L) tokens or (b, 2, L) pairs
        labels = self.data["train_y"][chosen]  # (b,) classes, or (b, L) tokens for mlm
        if inputs.dim() == 4 and self.transform is not None:  # timm.data.create_transform (image_transforms.py)
            inputs = self.transform(inputs, [image_seed(config.run.seed, step, p) for p in range(inputs.shape[0])])
        elif inputs.dim() == 4:
            inputs = augment(inputs, torch.Generator().manual_seed(config.run.seed * 10**6 + step))
        soft = None  # (b, classes) mixed and smoothed targets, when the recipe mixes (timm.data.Mixup)
        if self.mixing is not None:
            inputs, soft = self.mix(inputs, labels, config.run.seed * 10**6 + step)
        if self.shape.mlm:  # inputs (b, 2, L) ids and prediction flags, labels (b, L) with IGNORE
            masks = torch.Generator().manual_seed(config.run.seed * 10**6 + step)
            inputs, labels = mlm.mask_tokens(inputs, masks, self.shape.vocab)
        whole = mlm.targets(labels).shape[0]  # the global batch's targets: examples, or masked tokens (mlm)
        if part != (0, 1):  # (b / N, ...) the slice of this micro-batch
            rows = torch.tensor_split(torch.arange(inputs.shape[0]), part[1])[part[0]]
            inputs, labels = inputs[rows], labels[rows]
            soft = None if soft is None else soft[rows]
        inputs = context.shard(inputs).to(context.device)  # (b / world, ...)
        if self.channels_last and inputs.dim() == 4:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        local_targets = mlm.targets(context.shard(labels).to(context.device))  # (b / world,) or (n / world,)
        if soft is not None:  # timm's soft-target cross-entropy over the mixed, smoothed targets
            from timm.loss import SoftTargetCrossEntropy

            local_mean = SoftTargetCrossEntropy()(model(inputs), context.shard(soft).to(context.device))
        else:
            local_mean = F.cross_entropy(model(inputs), local_targets)
        return local_mean, (local_targets.shape[0], whole), {}

    def _stream_rows(self, chosen, step, context, part):
        """This rank's rows of the streamed global batch ``chosen``, prepared whole once per step (so every
        micro-batch of it reads the same draws): (b / world, 3, S, S) images or (b / world, width) token ids
        (a streamed text task, neither augmented nor mixed), (b / world,) labels, and
        (b / world, classes) soft targets or None.

        The built-in flip and shift draw for the global batch and apply this rank's rows (a torchrun run
        equals a one-process run), timm's augmentation draws per image in the loader (streaming.py). Mixing
        is timm's Mixup over this rank's rows alone, seeded by (run seed, step, rank), as DeiT's main.py
        mixes per GPU: one process mixes the whole batch exactly as the in-memory task does, but under
        torchrun each rank mixes its own rows, so a run with mixup, cutmix or label smoothing differs from
        the one-process run (other pairs and other draws), unlike every other part of a streamed run."""
        if part[0] == 0 or self._prepared[0] != step:
            config = self.config
            inputs, labels = self.stream.train_batch(chosen, step, context)  # (b / world, ...), (b / world,)
            if inputs.dim() == 4 and self.stream.augmentation is None:  # images: texts are not augmented
                inputs = augment(inputs, torch.Generator().manual_seed(config.run.seed * 10**6 + step), context,
                                 chosen.shape[0])
            soft = None
            if self.mixing is not None:
                inputs, soft = self.mix(inputs, labels, config.run.seed * 10**6 + step, context.rank)
            self._prepared = (step, inputs, labels, soft)
        return self._prepared[1:]

    def mix(self, images: torch.Tensor, labels: torch.Tensor, seed: int, rank: int = 0
            ) -> tuple[torch.Tensor, torch.Tensor]:
        """timm's Mixup / CutMix with label smoothing on the batch: (b, C, H, W) images and (b, classes)
        soft targets. timm draws from numpy's global generator, so it is seeded per step here: a run is the
        same whether or not it was resumed. ``rank`` > 0 (a streamed folder's rows of another rank) seeds
        it with (seed, rank) instead, so each rank draws its own."""
        import numpy as np

        from timm.data.mixup import mixup_target

        state = np.random.get_state()
        np.random.seed(seed % 2**32 if rank == 0 else [seed % 2**32, rank])
        try:
            if images.shape[0] % 2 == 0:
                return self.mixing(images, labels)
            # timm mixes pairs of a batch: an odd last batch mixes all but its last example, which keeps
            # its own (smoothed) target
            mixed, soft = self.mixing(images[:-1], labels[:-1])
            last = mixup_target(labels[-1:], self.shape.classes, 1.0, self.config.data.label_smoothing)
            return torch.cat([mixed, images[-1:]]), torch.cat([soft, last])
        finally:
            np.random.set_state(state)

    def evaluate(self, model, split):
        if self.stream is not None:
            return self.stream.evaluate(model, split, self.context)
        return evaluate(model, self.data[f"{split}_x"], self.data[f"{split}_y"], self.config.data.eval_batch_size, self.context,
                        two_class_figures(self.config))

    def probe(self):
        """The first 8 test inputs, or validation inputs in a tuning run (which never reads the test split):
        (8, C, H, W) images, (8, L) or (8, 2, L) tokens."""
        split = "val" if self.config.run.tuning else "test"
        return self.stream.probe(split) if self.stream is not None else self.data[f"{split}_x"][:8]


def supervised_metrics(config: TrainConfig) -> tuple[str, ...]:
    """A classification task's figures, headline first: the ones its task declares (registry.Task.metrics, such as
    "mcc" for glue-cola), then accuracy and loss."""
    return tuple(dict.fromkeys((*task(config.data.task).metrics, "accuracy", "loss")))


def headline_metric(config: TrainConfig) -> str:
    """The figure runs of ``config.data.task`` are tuned and compared on: its TrainingTask's first metric."""
    found = task_class(config)
    return supervised_metrics(config)[0] if found is Supervised else found.metrics[0]


def task_class(config: TrainConfig) -> type:
    """The TrainingTask class of ``config.data.task``, without loading its data (its ``metrics``, headline first)."""
    found = hook(task(config.data.task).reading, "training_task")  # a plugin task's own class (tasks/plugins.py)
    return found() if found else Supervised


def training_task(config: TrainConfig, context: Context | None = None) -> TrainingTask:
    """The TrainingTask of ``config.data.task``, its data loaded (``context``: the ranks its evaluation is sharded
    over, handed to Supervised and to a plugin's class alike; one process when None). Settings the task would not use are refused, not ignored
    (datasets.check_task_settings: mixing, timm's augmentation, channels_last, workers); gradient accumulation
    slices the batches of Supervised tasks only (held in memory or streamed)."""
    check_task_settings(config)
    found = task_class(config)
    if config.optimizer.accumulate_steps > 1 and found is not Supervised:
        raise ValueError(f"TrainConfig.accumulate_steps slices batches of classification and mlm tasks; task "
                         f"{config.data.task!r} trains its own way: leave accumulate_steps at 1")
    return found(config, context)
