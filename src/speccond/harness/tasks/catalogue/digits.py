"""scikit-learn's 8 x 8 digits as images (speccond.data.digits): seconds per run, for tests and smoke checks."""
from __future__ import annotations

from speccond.harness.tasks.registry import Task


def presets(full: bool) -> list[str]:
    """scikit-learn's 8 x 8 digits: seconds per run, for tests and smoke checks."""
    epochs, warmup = (40, 50) if full else (15, 20)
    return ["embed_dim=32", "depth=2", "num_heads=2", "patch_size=2", f"epochs={epochs}", "batch_size=64",
            f"warmup_steps={warmup}"]


TASKS = (Task("digits", "digits", "image", presets=presets),)
