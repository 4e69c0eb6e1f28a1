"""Streamed tasks: an image folder (``imagefolder:DIR?stream=1``), images decoded from disk as batches need
them, and your own texts (``text:DIR?...&stream=1``), token ids read from a memory-mapped file.

    task = streamed_task(config, context)   # StreamedImages / StreamedTexts (None: the task is held in memory)
    inputs, labels = task.train_batch(chosen, step, context)   # this rank's share (images normalised, augmented)
    task.evaluate(model, "test", context)    # each rank its shard, the sums all-reduced

What both share is :class:`StreamedSplits`'s: the examples chosen as the in-memory task chooses them, the
training batches of :class:`RankBatches` through a ``DataLoader`` with ``config.data.num_workers`` workers, and each
rank's evaluation shard (:class:`RankShard`) with the sums all-reduced. A streamed text task
(:class:`StreamedTexts`) reads rows of the ids data/text_stream.py prepared a chunk at a time; its inputs are the
in-memory task's, so its run is the in-memory run exactly. The rest of this docstring is the image folder's.

Nothing is cached and no split is held in memory: :class:`speccond.data.image_folder.FolderImages` keeps the
paths, a ``torch.utils.data.DataLoader`` with ``config.data.num_workers`` worker processes decodes them.

The run is the run the in-memory task would train, step for step:

- the training and validation examples are :func:`split_indices`'s, the test examples the first ``test_size``;
- the batches are the training loop's (train.py): epoch ``e`` is ``randperm(N, seed * 1000 + e)`` cut into
  global batches of ``batch_size``, and :class:`RankBatches` hands each rank rows ``rank::world`` of each, so
  DDP's averaged gradient is the global batch's, and a resumed run starts its loader at the step it resumes.
  torch's ``DistributedSampler`` is not used for training because it splits an epoch into one stream per rank
  (rank r's batch i is not rows r::world of the one-process run's batch i) and pads the last batches with
  repeated examples; :class:`RankBatches` is a distributed sampler with neither;
- the normalisation is per channel over the training subset, as the in-memory task's, from exact integer sums
  of the pixels (so the same on any number of ranks; it differs from the in-memory float32 statistics in the
  last bits only), and is cached beside the folder's other data under the folder's key;
- augmentation draws the same random numbers for the global batch and applies this rank's rows of them;
  timm's (``auto_augment``, ``random_erasing``: image_transforms.py) runs in the loader's workers, each image
  with its own seed, ``image_seed(run seed, step, its position in the global batch)``, the seed the in-memory
  task gives it, and with the streamed statistics below.

Mixing (timm's Mixup, CutMix, label smoothing) and gradient accumulation act on this rank's rows
(training_tasks.py's Supervised.train_loss).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Sampler

from speccond.data import image_folder, text_files, text_stream
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.tasks.datasets import check_sizes, indices_sha256, split_indices
from speccond.harness.training.distributed import Context
from speccond.harness.training.image_transforms import TimmAugmentation, image_seed


class RankBatches(Sampler[list]):
    """This rank's rows (``rank::world``) of each global batch of an epoch, from batch ``start`` on: the batches
    of train.py's loop, whose order is ``randperm(samples, seed * 1000 + epoch)``. With ``seeded`` each row is
    (example, its augmentation seed): ``image_seed(seed, step, its position in the global batch)``."""

    def __init__(self, samples: int, batch_size: int, seed: int, epoch: int, start: int, context: Context,
                 seeded: bool = False):
        self.samples, self.batch_size, self.seed, self.epoch, self.start = samples, batch_size, seed, epoch, start
        self.rank, self.world, self.seeded = context.rank, context.world, seeded

    def __len__(self) -> int:
        return max(0, math.ceil(self.samples / self.batch_size) - self.start)

    def __iter__(self):
        order = torch.randperm(self.samples, generator=torch.Generator().manual_seed(self.seed * 1000 + self.epoch))
        steps_per_epoch = math.ceil(self.samples / self.batch_size)
        for index in range(self.start, self.start + len(self)):
            batch = order[index * self.batch_size : (index + 1) * self.batch_size].tolist()
            positions = range(self.rank, len(batch), self.world)
            if self.seeded:
                step = self.epoch * steps_per_epoch + index
                yield [(batch[p], image_seed(self.seed, step, p)) for p in positions]
            else:
                yield [batch[p] for p in positions]


class AugmentedImages(torch.utils.data.Dataset):
    """Item ``(i, seed)``: image ``i`` of ``images`` through timm's augmentation drawn from ``seed``,
    (3, S, S) standardised, with its label and ``i``; decoded and augmented in the loader's worker."""

    def __init__(self, images: image_folder.FolderImages, augmentation: TimmAugmentation):
        self.images, self.augmentation = images, augmentation

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, key: tuple[int, int]) -> tuple[torch.Tensor, int, int]:
        index, seed = key
        pixels, label, _ = self.images[index]  # uint8 (3, S, S)
        return self.augmentation.pixels(pixels, seed), label, index


class RankShard(Sampler[int]):
    """Examples ``rank, rank + world, ...`` of ``count``: every example on exactly one rank, none repeated
    (torch's DistributedSampler without its padding)."""

    def __init__(self, count: int, context: Context):
        self.indices = range(context.rank, count, context.world)

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self):
        return iter(self.indices)


class StreamedSplits:
    """What every streamed task shares: its examples chosen as the in-memory task chooses them, the training
    batches of :class:`RankBatches` through a DataLoader with ``config.data.num_workers`` workers, and the evaluation
    of each rank's shard (:class:`RankShard`) with the sums all-reduced. A subclass sets ``self.splits`` (datasets
    whose item i is (inputs, label, i)) from ``self.chosen`` and says what the model reads (:meth:`model_inputs`)."""

    augmentation = None  # a subclass's own, drawn in the loader's workers (StreamedImages)

    def __init__(self, config: TrainConfig, train_count: int, test_count: int):
        self.config = config
        check_sizes(config, train_count, test_count)
        self.train_index, self.val_index = split_indices(train_count, config)
        self.chosen = {"train": self.train_index, "val": self.val_index,
                       "test": torch.arange(config.data.test_size or test_count)}  # int64 stored rows of each split
        self.samples = self.train_index.shape[0]
        self.steps_per_epoch = math.ceil(self.samples / config.data.batch_size)
        self._batches = None  # the training loader's iterator, and the step it yields next
        self._next_step = -1

    def model_inputs(self, inputs: torch.Tensor) -> torch.Tensor:
        """A loader's batch of inputs as the model reads them."""
        return inputs

    def _loader(self, dataset, **sampling) -> DataLoader:
        return DataLoader(dataset, num_workers=self.config.data.num_workers, pin_memory=False, **sampling)

    def _rank_batch(self, dataset, chosen: torch.Tensor, step: int, context: Context, seeded: bool = False) -> tuple:
        """This rank's rows of the global batch ``chosen`` at ``step`` from ``dataset``'s loader (rebuilt when a run
        starts or resumes, and each epoch): the loader's (inputs, labels) of rows ``rank::world`` of ``chosen``."""
        epoch, index = divmod(step, self.steps_per_epoch)
        if step != self._next_step or index == 0:
            sampler = RankBatches(self.samples, self.config.data.batch_size, self.config.run.seed, epoch, index, context,
                                  seeded=seeded)
            self._batches = iter(self._loader(dataset, batch_sampler=sampler))
        inputs, labels, indices = next(self._batches)
        self._next_step = step + 1
        assert torch.equal(indices, context.shard(chosen)), (step, indices, chosen)  # the loop's own batch
        return inputs, labels

    def evaluate(self, model: nn.Module, split: str, context: Context) -> dict:
        """Accuracy and mean cross-entropy over the split: each rank its shard (RankShard), the sums all-reduced."""
        dataset = self.splits[split]
        loader = self._loader(dataset, sampler=RankShard(len(dataset), context), batch_size=self.config.data.eval_batch_size)
        device = next(model.parameters()).device
        model.eval()
        tally = Tally(two_class_figures(self.config))
        with torch.no_grad():
            for inputs, labels, _ in loader:
                tally.add(model(self.model_inputs(inputs).to(device)), labels.to(device))  # (b, classes), (b,)
        model.train()
        return tally.figures(context)

    def probe(self, split: str) -> torch.Tensor:
        """The first 8 examples of ``split`` as the model reads them: (8, ...)."""
        dataset = self.splits[split]
        return self.model_inputs(torch.stack([dataset[i][0] for i in range(min(8, len(dataset)))]))


class StreamedImages(StreamedSplits):
    """The splits of a streamed image folder as lazily decoded datasets, with their normalisation."""

    def __init__(self, config: TrainConfig, context: Context):
        found = image_folder.samples(config.data.task)
        _, self.size = image_folder.parse(config.data.task)
        super().__init__(config, len(found["train"]), len(found["test"]))
        self.splits = {split: image_folder.FolderImages([found["test" if split == "test" else "train"][i]
                                                         for i in index.tolist()], self.size)
                       for split, index in self.chosen.items() if len(index) or split != "val"}
        self.mean, self.std = self._statistics(found, self.train_index, context)  # (1, 3, 1, 1) each
        # timm's augmentation, when asked, with this folder's statistics (None: the built-in flip and shift)
        self.augmentation = (TimmAugmentation(config, self.size, self.mean, self.std)
                             if config.data.auto_augment or config.data.random_erasing else None)

    def _statistics(self, found: dict, train_index: torch.Tensor, context: Context) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-channel mean and standard deviation (unbiased, over N x H x W) of pixels / 255 of the training
        subset, from integer sums of the pixels and of their squares (each rank its shard, all-reduced)."""
        cached = image_folder.cache_folder(self.config.data.task, found) / f"statistics-{indices_sha256(train_index)[:16]}.json"
        present = torch.tensor([int(cached.is_file())])
        # every rank reads, or every rank sums: the all-reduce below needs them all
        if all_reduced(present, context, dist.ReduceOp.MIN).item() if context.distributed else present.item():
            sums = torch.tensor(json.loads(cached.read_text())["sums"], dtype=torch.int64)
        else:
            sums = torch.zeros(2, 3, dtype=torch.int64)  # (sum, sum of squares) per channel
            dataset = self.splits["train"]
            for images, _, _ in self._loader(dataset, sampler=RankShard(len(dataset), context), batch_size=64):
                pixels = images.to(torch.int64)  # (b, 3, S, S)
                sums += torch.stack([pixels.sum((0, 2, 3)), pixels.square().sum((0, 2, 3))])
            if context.distributed:
                sums = all_reduced(sums, context)
            if context.is_main:
                cached.parent.mkdir(parents=True, exist_ok=True)
                partial = cached.with_name(f"{cached.name}.{os.getpid()}.partial")
                partial.write_text(json.dumps({"task": self.config.data.task, "sums": sums.tolist()}))
                os.replace(partial, cached)
        count = self.samples * self.size * self.size
        total, squares = sums.to(torch.float64)
        mean = total / (255 * count)
        variance = (squares / 255**2 - count * mean.square()) / (count - 1)
        return mean.float().view(1, 3, 1, 1), variance.sqrt().float().view(1, 3, 1, 1)

    def normalise(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 (b, 3, S, S) -> float (b, 3, S, S), standardised with the training subset's statistics."""
        return (images.float().div(255) - self.mean) / self.std

    def model_inputs(self, images: torch.Tensor) -> torch.Tensor:
        return self.normalise(images)

    def train_batch(self, chosen: torch.Tensor, step: int, context: Context) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's rows of the global batch ``chosen`` at ``step``: normalised (b / world, 3, S, S) images
        and (b / world,) labels, decoded by the loader; with ``self.augmentation``, augmented by timm's transform
        in the loader's workers."""
        augmenting = self.augmentation is not None
        dataset = AugmentedImages(self.splits["train"], self.augmentation) if augmenting else self.splits["train"]
        images, labels = self._rank_batch(dataset, chosen, step, context, seeded=augmenting)
        return (images if augmenting else self.normalise(images)), labels


class StreamedTexts(StreamedSplits):
    """The splits of a streamed text task (``text:DIR?...&stream=1``, data/text_stream.py): rows of its
    memory-mapped (N, width) token ids, read in the loader's workers; only labels and row numbers are held."""

    def __init__(self, config: TrainConfig, context: Context):
        folder = text_stream.prepare(config.data.task)  # each rank alike: the first to finish writes it
        verified_by_main(folder, config.data.task, context)
        small, tokens = text_stream.open_cache(folder, config.data.task)  # rank 0 verified: sizes and mtimes compared
        super().__init__(config, tokens["train"].shape[0], tokens["test"].shape[0])
        stored = {"train": "train", "val": "train", "test": "test"}
        self.splits = {split: text_stream.TokenRows(folder / f"{stored[split]}_tokens.npy", index,
                                                    small[f"{stored[split]}_labels"])
                       for split, index in self.chosen.items() if len(index) or split != "val"}

    def train_batch(self, chosen: torch.Tensor, step: int, context: Context) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's rows of the global batch ``chosen`` at ``step``: int64 (b / world, width) ids and
        (b / world,) labels, the rows the in-memory task's ``train_x[chosen]`` sharded holds."""
        return self._rank_batch(self.splits["train"], chosen, step, context)


def verified_by_main(folder: Path, name: str, context: Context) -> None:
    """The streamed text cache verified (text_stream.verify: its SHA-256 read only when a file's size or mtime
    changed) by rank 0 alone while the other ranks wait, so theirs (in open_cache) finds it stamped; a refusal
    raised on every rank. One process: nothing here, open_cache verifies."""
    if not context.distributed:
        return  # open_cache verifies
    refusal = None
    if context.is_main:
        try:
            text_stream.verify(folder, name)
        except ValueError as error:
            refusal = error
    if not all_reduced(torch.tensor([int(refusal is None)]), context, dist.ReduceOp.MIN).item():
        raise refusal or ValueError(f"rank 0 refused the cached arrays of {name!r} in {folder} (its error says why); "
                                    "run again to prepare them anew")


def streamed_task(config: TrainConfig, context: Context) -> StreamedSplits | None:
    """The streamed splits of ``config.data.task`` (an image folder or text files with ``stream=1``); None: in memory."""
    if image_folder.is_image_folder(config.data.task) and image_folder.streams(config.data.task):
        return StreamedImages(config, context)
    if text_files.is_text_files(config.data.task) and text_files.streams(config.data.task):
        return StreamedTexts(config, context)
    return None


def two_class_figures(config: TrainConfig) -> bool:
    """Whether an evaluation of ``config``'s task gives "mcc" and "f1" too: when its task declares either
    (registry.Task.metrics: glue-cola, glue-mrpc, lra-retrieval); every other task's rows are as before."""
    from speccond.harness.tasks.registry import task

    return bool({"mcc", "f1"} & set(task(config.data.task).metrics))


class Tally:
    """The sums of one evaluation: cross-entropy, correct predictions, their count, how many targets each class
    has and, when asked, the two-class confusion matrix [target, predicted] that "mcc" and "f1" are read from."""

    def __init__(self, confusion: bool):
        self.loss, self.correct, self.count = 0.0, 0, 0
        self.classes: torch.Tensor | None = None  # (C,) targets per class, on the CPU
        self.confusion = torch.zeros(2, 2, dtype=torch.int64) if confusion else None

    def add(self, logits: torch.Tensor, target: torch.Tensor) -> None:
        """logits (n, classes), target (n,) int64."""
        self.loss += float(F.cross_entropy(logits, target, reduction="sum"))
        predicted = logits.argmax(-1)  # (n,)
        self.correct += int((predicted == target).sum())
        self.count += target.shape[0]
        found = torch.bincount(target.detach().cpu(), minlength=logits.shape[-1])  # (C,)
        self.classes = found if self.classes is None else self.classes + found
        if self.confusion is not None:
            if logits.shape[-1] != 2:
                raise ValueError(f"MCC and F1 score two classes; this model scores {logits.shape[-1]}")
            self.confusion += torch.bincount((2 * target + predicted).cpu(), minlength=4).view(2, 2)

    def figures(self, context: Context) -> dict:
        return reduced(self.loss, self.correct, self.count, context, self.classes, self.confusion)


def reduced(loss: float, correct: int, count: int, context: Context, classes: torch.Tensor,
            confusion: torch.Tensor | None = None) -> dict:
    """{"accuracy", "loss", "majority", "examples"} of the sums over every rank's shard (this rank's alone when
    not distributed). ``classes``: (C,) how many targets of the split each class has; "majority" is the share
    of the most common one, the accuracy of always answering it (the report's floor for "nothing learnt"), and
    "examples" the number of targets scored. With a two-class ``confusion`` (int64 (2, 2), [target, predicted])
    also "mcc" and "f1" (binary_figures)."""
    if context.distributed:
        sums = all_reduced(torch.tensor([loss, correct, count], dtype=torch.float64), context)
        loss, correct, count = float(sums[0]), int(sums[1]), int(sums[2])
        classes = all_reduced(classes, context)
        if confusion is not None:
            confusion = all_reduced(confusion.to(torch.float64), context).round().to(torch.int64)
    figures = {"accuracy": correct / count, "loss": loss / count, "majority": int(classes.max()) / count,
               "examples": count}
    return figures if confusion is None else {**figures, **binary_figures(confusion)}


def binary_figures(confusion: torch.Tensor) -> dict[str, float]:
    """Matthews correlation ("mcc") and the F1 of class 1 ("f1") of a two-class confusion matrix
    [target, predicted], as scikit-learn computes them (0 where a denominator is 0)."""
    (tn, fp), (fn, tp) = confusion.tolist()
    denominator = ((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)) ** 0.5
    mcc = (tp * tn - fp * fn) / denominator if denominator else 0.0
    f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    return {"mcc": mcc, "f1": f1}



def all_reduced(values: torch.Tensor, context: Context, op=dist.ReduceOp.SUM) -> torch.Tensor:
    """``values`` reduced over the ranks, on the CPU (sent from the rank's device: NCCL reduces CUDA tensors only)."""
    on_device = values.to(context.device)
    dist.all_reduce(on_device, op=op)
    return on_device.cpu()
