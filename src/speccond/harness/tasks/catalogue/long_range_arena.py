"""The Long Range Arena tasks (Tay et al. 2021) and their analogues, read by a Nystromformer
(models/sequence.py): CIFAR-10 and Pathfinder as grey-level pixel tokens, ListOps as tokens, and the byte
analogues of LRA's Text and Retrieval (speccond.data.byte_text). One preset shape for all of them."""
from __future__ import annotations

import functools

from speccond.harness.tasks.registry import Task

NYSTROMFORMER = ["model=nystromformer", "embed_dim=64", "depth=2", "num_heads=2", "landmarks=64", "batch_size=32"]


def long_range_arena(full: bool, epochs: int = 5, track_every: int = 100, test_size: int = 500) -> list[str]:
    """A Long Range Arena task with a 2-layer Nystromformer (64 landmarks), batch 32.

    ``speccond compare --task lra-listops --preset full``: 5 epochs. quick: 2,048 training and 500 test
    examples (all 408 for lra-retrieval) for one epoch (64 steps). Per task: lra-image is CIFAR-10 as 1,024 grey-level tokens,
    lra-pathfinder Pathfinder-32 as 1,024 pixel tokens, lra-listops ListOps at 100 to 256 tokens,
    lra-text SST-2's sentences as 256 bytes (all 67,349 for 2 epochs, 4,210 steps), lra-retrieval MRPC's
    sentence pairs, 256 bytes each, through one shared encoder (all 3,667 pairs for 10 epochs, 1,150 steps).
    """
    if full:
        return [*NYSTROMFORMER, f"epochs={epochs}", "warmup_steps=100", f"track_every={track_every}"]
    return [*NYSTROMFORMER, "train_size=2048", f"test_size={test_size}", "epochs=1", "warmup_steps=10", "track_every=16"]


_LRA = {"presets": long_range_arena, "model": "nystromformer"}
TASKS = (
    Task("lra-image", "cifar10", "pixels", "LRA Image: CIFAR-10 as 1,024 grey-level tokens", **_LRA),
    Task("lra-pathfinder", "pathfinder-small", "pixels", "LRA Pathfinder-32, 8k / 2k", **_LRA),
    Task("lra-pathfinder-full", "pathfinder", "pixels", "LRA Pathfinder-32, LRA's sizes", model="nystromformer"),
    Task("lra-listops", "listops-small", "tokens", "LRA ListOps at 100 to 256 tokens", **_LRA),
    Task("lra-listops-full", "listops", "tokens", "LRA ListOps at LRA's settings", model="nystromformer"),
    Task("lra-text", "text-bytes", "tokens",
         "analogue of LRA Text: GLUE SST-2's sentences as 256 bytes, negative / positive, scored on dev",
         presets=functools.partial(long_range_arena, epochs=2, track_every=200), model="nystromformer"),
    Task("lra-retrieval", "pairs-bytes", "pairs",
         "analogue of LRA Retrieval: GLUE MRPC's sentence pairs, 256 bytes each, paraphrase or not, scored on dev",
         presets=functools.partial(long_range_arena, epochs=10, track_every=100, test_size=0), model="nystromformer",
         metrics=("accuracy", "f1")),
)
