"""Image classification tasks for the training harness: ``load_task(config)`` and ``task_shape(name)``.

A task is a prepared dataset (``speccond data prepare NAME``; every image dataset stores uint8
(N, C, H, W)) cut to the config's sizes and standardised per channel with the training subset's
statistics: x = (pixels / 255 - mean_c) / std_c, mean_c and std_c over (N, H, W) of the training subset.
"""
from __future__ import annotations

import torch

from speccond import data
from speccond.experiments.config import TrainConfig


def task_shape(name: str) -> tuple[int, int, int]:
    """(image_size, channels, classes) of image dataset ``name``, from its spec (nothing is loaded)."""
    spec = data.spec(name)
    if spec.image_shape is None:
        raise ValueError(f"dataset {name!r} is not an image dataset; image tasks: {', '.join(image_tasks())}")
    channels, height, width = spec.image_shape
    assert height == width, (name, spec.image_shape)  # the ViT here takes square images
    return height, channels, len(spec.classes)


def image_tasks() -> list[str]:
    """Names of the registered image datasets."""
    return sorted(name for name, spec in data.DATASETS.items() if spec.image_shape is not None)


def load_task(config: TrainConfig) -> dict[str, torch.Tensor]:
    """train_x, test_x float32 (N, C, H, W) standardised per channel with the training subset; int64 labels.

    The training subset is the first ``config.train_size`` (0 = all) of a permutation seeded by
    ``config.seed``; the test subset is the first ``config.test_size`` (0 = all) test images, in stored order.
    """
    task_shape(config.task)  # a clear error for a dataset that is not images
    arrays = data.load(config.task)
    available = {"train_size": arrays["train_images"].shape[0], "test_size": arrays["test_images"].shape[0]}
    for field, count in available.items():
        if getattr(config, field) > count:
            raise ValueError(
                f"TrainConfig.{field}={getattr(config, field)} but dataset {config.task!r} has {count} "
                f"{field.split('_')[0]} images; use at most {count}, or 0 for all"
            )
    order = torch.randperm(available["train_size"], generator=torch.Generator().manual_seed(config.seed))
    train_index = order[: config.train_size or None]
    test_count = config.test_size or available["test_size"]
    train = arrays["train_images"][train_index].float().div(255)  # (N, C, H, W)
    test = arrays["test_images"][:test_count].float().div(255)  # (M, C, H, W)
    mean = train.mean(dim=(0, 2, 3), keepdim=True)  # (1, C, 1, 1)
    std = train.std(dim=(0, 2, 3), keepdim=True)  # (1, C, 1, 1)
    return {
        "train_x": (train - mean) / std,
        "train_y": arrays["train_labels"][train_index],
        "test_x": (test - mean) / std,
        "test_y": arrays["test_labels"][:test_count],
    }
