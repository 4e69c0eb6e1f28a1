"""Classification tasks for the training harness: ``load_task(config)`` and ``task_shape(name)``.

A task (harness/tasks/registry.py: one file each in tasks/catalogue/) reads a prepared dataset
(``speccond data prepare NAME``) in one of these ways, its ``reading``:

- "image": the dataset's uint8 (N, C, H, W) images, standardised per channel with the training subset's
  statistics: x = (pixels / 255 - mean_c) / std_c, mean_c and std_c over (N, H, W) of that subset;
- "pixels": the same images as sequences of H * W grey-level tokens (LRA's Image and Pathfinder
  tasks): grey = round(0.299 R + 0.587 G + 0.114 B) for colour images, token = grey + 1, so 0 stays
  PAD and the vocabulary is 257;
- "tokens": a token dataset (ListOps; text-bytes, the analogue of LRA's Text) with its own vocabulary, PAD = 0;
- "pairs": a token dataset of two texts per example, (N, 2, L) (pairs-bytes, the analogue of LRA's
  Retrieval), read by a model with one shared encoder (sequence.PairClassifier);
- "text": one GLUE task of the ``language`` dataset (data/language.py), or your own texts
  (``text:DIR?text=COLUMN&label=COLUMN``, data/text_files.py), WordPiece ids ``[CLS] a [SEP] (b [SEP])`` then
  PAD, (N, width), read by BERT (models/bert.py);
- "scenes": the fashion-scenes detection dataset (data/fashion_scenes.py), read by Mask R-CNN
  (harness/tasks/detection/task.py: boxes, labels and masks per scene);
- "mlm": the ``language`` dataset's 128-token corpus blocks for masked-language-model pre-training (or your
  own texts, ``text:DIR?text=COLUMN&mlm=1``, one ``[CLS] text [SEP]`` block of ``width`` tokens each). The
  training blocks are masked at each step (harness/tasks/mlm.py), so ``train_y`` is the blocks themselves;
  the test blocks are masked once (``mlm.EVAL_MASK_SEED``): ``test_x`` (M, 2, 128) ids and prediction
  flags, ``test_y`` (M, 128) the original tokens where a prediction is asked, IGNORE elsewhere.

Sequences for the Nystromformer are padded with PAD up to a multiple of ``config.model.landmarks``
(models/sequence.py); the language tasks keep their stored width.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from speccond import data
from speccond.data import image_folder, language, store, text_files, text_stream, text_vocabulary
from speccond.data.store import DatasetSpec
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.tasks import mlm, registry
from speccond.harness.tasks.registry import Task

PAD = 0  # token id of padding in every sequence task
PIXEL_VOCAB = 257  # PAD and 256 grey levels


def padded_length(length: int, landmarks: int) -> int:
    """The smallest multiple of ``landmarks`` that holds ``length`` tokens."""
    if landmarks < 1:
        raise ValueError(f"landmarks must be >= 1, got {landmarks}")
    return math.ceil(length / landmarks) * landmarks


@dataclass(frozen=True)
class TaskShape:
    """What a model needs to know about a task's inputs: images, token sequences or WordPiece text."""

    kind: str  # "image", "sequence" (Nystromformer), "text" (BERT) or "scenes" (Mask R-CNN)
    classes: int  # for "mlm", the vocabulary (each prediction is one of vocab tokens)
    image_size: int = 0  # images and scenes: the side of the square image
    channels: int = 0  # images
    length: int = 0  # sequences: tokens per example before padding to the landmarks
    vocab: int = 0  # sequences: token ids are 0 (PAD) .. vocab - 1
    pairs: bool = False  # sequences: each example is two texts of ``length`` tokens, (2, length)
    mlm: bool = False  # text: masked-language-model pre-training instead of classification


def task(name: str) -> Task:
    """Task ``name`` of the registry (harness/tasks/registry.py); a one-line ValueError for an unknown name."""
    return registry.task(name)


def dataset_spec(chosen: Task) -> DatasetSpec:
    """The spec of the dataset task ``chosen`` reads: its own (checked against every other name), or
    speccond.data's of that name."""
    return registry.own_datasets()[chosen.dataset] if chosen.data is not None else data.spec(chosen.dataset)


def prepare_data(name: str) -> Path:
    """The cached arrays file of task ``name``'s dataset, made if needed."""
    chosen = task(name)
    return store.prepare(dataset_spec(chosen)) if chosen.data is not None else data.prepare(chosen.dataset)


def vocabulary(name: str) -> tuple[Path, str]:
    """(the prepared cache of task ``name``'s dataset, made if needed; the SHA-256 of the vocabulary it stores, ""
    for none): two tasks whose hashes agree give the same word the same token id (data/text_vocabulary.py)."""
    path = prepare_data(name)
    return path, text_vocabulary.sha256(path)


def task_shape(name: str) -> TaskShape:
    """The input shape and class count of task ``name``, from its dataset's spec (nothing is loaded)."""
    chosen = task(name)
    if image_folder.is_image_folder(chosen.dataset):
        _, size = image_folder.parse(chosen.dataset)
        return TaskShape("image", len(image_folder.classes(chosen.dataset)), image_size=size, channels=3)
    if text_files.is_text_files(chosen.dataset):  # read and tokenised once, then from its cache
        found = (text_stream if text_files.streams(chosen.dataset) else text_files).metadata(chosen.dataset)
        if found.get("mlm") == "1":
            return TaskShape("text", int(found["vocab"]), length=int(found["width"]), vocab=int(found["vocab"]), mlm=True)
        return TaskShape("text", len(json.loads(found["classes"])), length=int(found["width"]),
                         vocab=int(found["vocab"]), pairs=found["pairs"] == "1")
    spec = dataset_spec(chosen)
    if chosen.reading == "scenes":
        from speccond.data.fashion_scenes import SceneConfig

        return TaskShape("scenes", len(spec.classes), image_size=SceneConfig().canvas)  # the stored scenes' canvas
    if chosen.reading in ("image", "pixels"):
        channels, height, width = spec.image_shape
        assert height == width, (name, spec.image_shape)  # the models here take square images
        if chosen.reading == "image":
            return TaskShape("image", len(spec.classes), image_size=height, channels=channels)
        return TaskShape("sequence", len(spec.classes), length=height * width, vocab=PIXEL_VOCAB)
    length, vocab = spec.sequence_shape
    if chosen.reading == "mlm":
        return TaskShape("text", vocab, length=length, vocab=vocab, mlm=True)
    if chosen.reading == "text":
        subset = language.SUBSETS[chosen.subset]
        return TaskShape("text", len(subset.classes), length=subset.width, vocab=vocab, pairs=subset.pairs)
    return TaskShape("sequence", len(spec.classes), length=length, vocab=vocab, pairs=chosen.reading == "pairs")


def image_tasks() -> list[str]:
    """Names of the tasks that read images as images."""
    return sorted(name for name, t in registry.tasks().items() if t.reading == "image")


VALIDATION_SEED = 20261201  # one validation split per task, the same for every run, seed and method


def split_indices(available: int, config: TrainConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """(training, validation) indices into a task's stored training examples.

    Without ``val_size``, training is the first ``train_size`` (0 = all) of a permutation seeded by
    ``config.run.seed``, as every published run used. With it, the first ``val_size`` of a permutation seeded
    by VALIDATION_SEED are held out (the same examples for every run) and training is the first
    ``train_size`` of the rest, in an order seeded by ``config.run.seed``."""
    if config.data.val_size + config.data.train_size > available:
        raise ValueError(f"TrainConfig.val_size={config.data.val_size} and train_size={config.data.train_size} ask for more "
                         f"than the {available} training examples of task {config.data.task!r}")
    if not config.data.val_size:
        order = torch.randperm(available, generator=torch.Generator().manual_seed(config.run.seed))
        return order[: config.data.train_size or None], order[:0]
    held = torch.randperm(available, generator=torch.Generator().manual_seed(VALIDATION_SEED))
    validation, pool = held[: config.data.val_size], held[config.data.val_size :]
    order = pool[torch.randperm(pool.shape[0], generator=torch.Generator().manual_seed(config.run.seed))]
    return order[: config.data.train_size or None], validation


def indices_sha256(index: torch.Tensor) -> str:
    """SHA-256 of int64 indices, for config.json: pins which examples a split holds."""
    return hashlib.sha256(index.to(torch.int64).numpy().tobytes()).hexdigest()


def load_task(config: TrainConfig) -> dict[str, torch.Tensor]:
    """train_x, test_x (float (N, C, H, W) images, int64 (N, L) tokens or (N, 2, L) pairs), int64 train_y,
    test_y; with ``config.data.val_size``, val_x and val_y too, and val_index (the held-out training indices);
    for images, pixel_mean and pixel_std (1, C, 1, 1), the statistics they were standardised with.

    Training and validation examples: :func:`split_indices`; the test subset is the first
    ``config.data.test_size`` (0 = all) test examples, in stored order.
    """
    chosen = task(config.data.task)
    arrays, stored = _stored_arrays(config)
    train_images, test_images = arrays[f"train_{stored}"], arrays[f"test_{stored}"]
    check_sizes(config, train_images.shape[0], test_images.shape[0])
    train_index, val_index = split_indices(train_images.shape[0], config)
    test_count = config.data.test_size or test_images.shape[0]
    splits = {"train": train_images[train_index], "test": test_images[:test_count]}
    if config.data.val_size:
        splits["val"] = train_images[val_index]
    if chosen.reading == "mlm":
        vocab = task_shape(config.data.task).vocab
        tensors = masked_lm_task(splits["train"], test_images, test_count, vocab)
        if config.data.val_size:  # masked once, as the test blocks are
            inputs, labels = mlm.mask_tokens(splits["val"], torch.Generator().manual_seed(mlm.EVAL_MASK_SEED), vocab)
            tensors.update(val_x=inputs, val_y=labels, val_index=val_index)
        return tensors
    labels = {"train": arrays["train_labels"][train_index], "test": arrays["test_labels"][:test_count],
              "val": arrays["train_labels"][val_index]}
    if chosen.reading == "text":
        inputs = {split: images.long() for split, images in splits.items()}
    elif chosen.reading in ("tokens", "pairs"):
        inputs = {split: pad_tokens(images, config.model.landmarks) for split, images in splits.items()}
    elif chosen.reading == "pixels":
        inputs = {split: pixel_tokens(images, config.model.landmarks) for split, images in splits.items()}
    else:
        scaled = {split: images.float().div(255) for split, images in splits.items()}  # (N, C, H, W)
        mean = scaled["train"].mean(dim=(0, 2, 3), keepdim=True)  # (1, C, 1, 1), of the training subset
        std = scaled["train"].std(dim=(0, 2, 3), keepdim=True)  # (1, C, 1, 1)
        inputs = {split: (images - mean) / std for split, images in scaled.items()}
    tensors = {}
    if chosen.reading == "image":  # (1, C, 1, 1) each, what timm's augmentation undoes (image_transforms.py)
        tensors.update(pixel_mean=mean, pixel_std=std)
    for split in inputs:
        tensors.update({f"{split}_x": inputs[split], f"{split}_y": labels[split]})
    if config.data.val_size:
        tensors["val_index"] = val_index
    return tensors


def stored_counts(config: TrainConfig) -> tuple[int, int]:
    """(training, test) examples stored for ``config.data.task``: what its sizes are checked against."""
    if image_folder.is_image_folder(config.data.task) and image_folder.streams(config.data.task):  # counted, not read
        found = image_folder.samples(config.data.task)
        return len(found["train"]), len(found["test"])
    if text_files.is_text_files(config.data.task) and text_files.streams(config.data.task):  # counted from the labels
        return text_stream.counts(text_stream.prepare(config.data.task))
    arrays, stored = _stored_arrays(config)
    return arrays[f"train_{stored}"].shape[0], arrays[f"test_{stored}"].shape[0]


def check_task_settings(config: TrainConfig) -> None:
    """ValueError for a setting the task would not use: mixup, cutmix, label smoothing and timm's augmentation act
    on image classification (held in memory or streamed), channels_last on images, and worker processes decode a
    streamed image folder only."""
    mixing = [name for name in ("mixup", "cutmix", "label_smoothing") if config.value(name)]
    streamed = ((image_folder.is_image_folder(config.data.task) and image_folder.streams(config.data.task))
                or (text_files.is_text_files(config.data.task) and text_files.streams(config.data.task)))
    if mixing and task(config.data.task).reading != "image":
        raise ValueError(f"TrainConfig.{', '.join(mixing)} mix image classification batches (timm.data.Mixup); "
                         f"task {config.data.task!r} is not one: leave {' and '.join(mixing)} at 0")
    imaging = [name for name in ("auto_augment", "random_erasing", "channels_last") if config.value(name)]
    if imaging and task(config.data.task).reading != "image":
        raise ValueError(f"TrainConfig.{', '.join(imaging)} act on image batches; task {config.data.task!r} has none: "
                         f"leave {' and '.join(imaging)} unset")
    if config.data.num_workers and not streamed:
        raise ValueError(f"TrainConfig.num_workers={config.data.num_workers} sets the processes that decode a streamed image "
                         f"folder or read streamed texts (imagefolder:DIR?stream=1, text:DIR?...&stream=1); task "
                         f"{config.data.task!r} is held in memory: leave num_workers at 0")


def check_sizes(config: TrainConfig, train_count: int, test_count: int) -> None:
    """ValueError unless ``config``'s train_size, val_size and test_size fit the task's stored examples and
    leave at least one training example."""
    if config.data.test_size > test_count:
        raise ValueError(f"TrainConfig.test_size={config.data.test_size} but task {config.data.task!r} has {test_count} "
                         f"test examples; use at most {test_count}, or 0 for all")
    if config.data.train_size > train_count:
        raise ValueError(f"TrainConfig.train_size={config.data.train_size} but task {config.data.task!r} has {train_count} "
                         f"train examples; use at most {train_count}, or 0 for all")
    if config.data.val_size >= train_count:
        raise ValueError(f"TrainConfig.val_size={config.data.val_size} leaves no training examples of the {train_count} "
                         f"of task {config.data.task!r}; use val_size < {train_count}")
    if config.data.val_size + config.data.train_size > train_count:
        raise ValueError(f"TrainConfig.val_size={config.data.val_size} and train_size={config.data.train_size} ask for more "
                         f"than the {train_count} training examples of task {config.data.task!r}")


def _stored_arrays(config: TrainConfig) -> tuple[dict[str, torch.Tensor], str]:
    """The task's arrays (a language task's own, prefix removed) and the name of its inputs ("images" or "tokens")."""
    chosen = task(config.data.task)
    arrays = store.load(dataset_spec(chosen)) if chosen.data is not None else data.load(chosen.dataset)
    if chosen.dataset == "language":  # the language dataset: the task's own arrays
        prefix = "mlm_" if chosen.reading == "mlm" else f"{chosen.subset}_"
        arrays = {key[len(prefix):]: value for key, value in arrays.items() if key.startswith(prefix)}
    return arrays, "tokens" if chosen.reading in ("tokens", "pairs", "text", "mlm") else "images"


def masked_lm_task(train: torch.Tensor, test: torch.Tensor, test_count: int, vocab: int) -> dict[str, torch.Tensor]:
    """The mlm task's tensors: training blocks (N, L) as inputs and targets (masked at each step), and the
    first ``test_count`` test blocks masked once, the masks drawn for all test blocks so a prefix keeps them."""
    inputs, labels = mlm.mask_tokens(test, torch.Generator().manual_seed(mlm.EVAL_MASK_SEED), vocab)  # (M, 2, L), (M, L)
    blocks = train.long()  # (N, L)
    return {"train_x": blocks, "train_y": blocks, "test_x": inputs[:test_count], "test_y": labels[:test_count]}


def pixel_tokens(images: torch.Tensor, landmarks: int) -> torch.Tensor:
    """uint8 (N, C, H, W) -> int64 (N, L) grey-level tokens + 1, PAD-padded to a multiple of ``landmarks``."""
    if images.shape[1] == 3:
        weights = torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)
        grey = (images.float() * weights).sum(1).round().clamp(0, 255).long()  # (N, H, W)
    else:
        grey = images[:, 0].long()  # (N, H, W)
    return pad_tokens(grey.flatten(1) + 1, landmarks)  # (N, L)


def pad_tokens(tokens: torch.Tensor, landmarks: int) -> torch.Tensor:
    """(..., L0) token ids -> int64 (..., L), PAD appended up to L, the next multiple of ``landmarks``."""
    length = padded_length(tokens.shape[-1], landmarks)
    return torch.nn.functional.pad(tokens.long(), (0, length - tokens.shape[-1]), value=PAD)
