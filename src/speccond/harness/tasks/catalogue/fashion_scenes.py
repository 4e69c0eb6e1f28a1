"""Detection and instance segmentation of Fashion-MNIST items pasted on a canvas (speccond.data.fashion_scenes),
trained by Mask R-CNN with its own losses and COCO report: a plugin task (harness/tasks/detection/)."""
from __future__ import annotations

from speccond.harness.tasks.registry import Task


def presets(full: bool) -> list[str]:
    """Detection and instance segmentation: Mask R-CNN on a timm XCiT trunk (width 96, depth 4, 4 heads,
    patch 8, 96 px scenes, batch 8; ``--model vit-maskrcnn`` for the ViT trunk), AdamW lr 3e-4.

    Step times, measured over 25 steps, float32, one thread, while two other training jobs kept this
    2-core machine's load at 3.6 to 3.8: median 1.9 to 2.1 s per training step (baseline and lam = 10
    alike), fastest 1.3 s (about an idle core's speed); evaluation 0.13 s per scene.
    full (``speccond compare --task fashion-scenes --preset full``): 4,000 scenes for 1 epoch (500
    steps), all 1,500 test scenes, about 20 minutes per run on a busy core, 10 to 13 on an idle one.
    quick: 80 steps on 640 scenes, 100 test scenes, about 3 minutes per run on a busy core; the losses
    fall and AP leaves 0, too short to rank methods.
    """
    model = ["model=xcit-maskrcnn", "embed_dim=96", "patch_size=8", "batch_size=8", "lr=3e-4", "eval_batch_size=25"]
    if full:
        return [*model, "train_size=4000", "epochs=1", "val_size=0", "test_size=0", "warmup_steps=50"]
    return [*model, "train_size=640", "epochs=1", "val_size=0", "test_size=100", "warmup_steps=10"]


TASKS = (Task("fashion-scenes", "fashion-scenes", "scenes",
              "detection and instance segmentation of Fashion-MNIST items pasted on a canvas", presets=presets,
              model="xcit-maskrcnn", plugin="speccond.harness.tasks.detection.plugin"),)
