"""Fashion-MNIST as images (speccond.data.fashion_mnist): the main job's task and TrainConfig's default."""
from __future__ import annotations

from speccond.harness.tasks.registry import Task


def presets(full: bool) -> list[str]:
    """Fashion-MNIST, a ViT of width 64 on 7 x 7 patches (16 tokens).

    quick (the main job, ``./run main``): one epoch over 51,200 training images (400 steps), 2,000 test
    images; compare's 4 default methods x 3 seeds took 379 s with one thread (as ./run main sets) on the
    2-core machine at a load of about 3, 2429 s at a load of 10 to 14 (docs/RESULTS.md, the main job;
    ``./run main --dry-run`` estimates it on the machine at hand).
    full (``speccond compare --preset full``): all 60,000 images for 3 epochs (1,407 steps), all 10,000
    test images; about 3 minutes per run on one core (an hour for 7 methods x 3 seeds).
    """
    if full:
        return ["embed_dim=64", "patch_size=7", "epochs=3", "warmup_steps=100", "track_every=100"]
    return ["embed_dim=64", "patch_size=7", "train_size=51200", "epochs=1", "test_size=2000", "warmup_steps=20",
            "track_every=50"]


TASKS = (Task("fashion-mnist", "fashion-mnist", "image", presets=presets),)
