"""CIFAR-10 as images (speccond.data.cifar10: the standard 50,000 / 10,000 split, from the shared JPEG archive or
torchvision). As grey-level tokens it is LRA's Image task, lra-image (long_range_arena.py)."""
from __future__ import annotations

from speccond.harness.tasks.registry import Task


def presets(full: bool) -> list[str]:
    """CIFAR-10 (JPEG), width 64 on 4 x 4 patches (64 tokens).

    ``speccond compare --task cifar10 --model vit --preset full``: all 50,000 training images, 5 epochs (1,955
    steps), all 10,000 test images, about 15 minutes per ViT run on one core; Swin wants ``--set patch_size=8``.
    quick: the first 8,000 training images for one epoch (63 steps), 1,000 test images: about a minute.
    """
    if full:
        return ["embed_dim=64", "patch_size=4", "epochs=5", "warmup_steps=100", "track_every=391"]
    return ["embed_dim=64", "patch_size=4", "epochs=1", "train_size=8000", "test_size=1000", "warmup_steps=20",
            "track_every=20"]


TASKS = (Task("cifar10", "cifar10", "image", presets=presets),)
