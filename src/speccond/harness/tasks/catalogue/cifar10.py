"""CIFAR-10 as images (speccond.data.cifar10: its test set split 8,000 / 2,000). As grey-level tokens it is
LRA's Image task, lra-image (long_range_arena.py)."""
from __future__ import annotations

from speccond.harness.tasks.registry import Task


def presets(full: bool) -> list[str]:
    """CIFAR-10, width 64 on 4 x 4 patches (64 tokens), 8,000 training and 2,000 held-out images (cifar10.py).

    ``speccond compare --task cifar10 --model vit --preset full``: 5 epochs (315 steps), about 3 minutes
    per ViT run on one core; Swin wants ``--set patch_size=8``. quick: one epoch, 1,000 test images.
    """
    if full:
        return ["embed_dim=64", "patch_size=4", "epochs=5", "warmup_steps=50", "track_every=50"]
    return ["embed_dim=64", "patch_size=4", "epochs=1", "test_size=1000", "warmup_steps=20", "track_every=20"]


TASKS = (Task("cifar10", "cifar10", "image", presets=presets),)
