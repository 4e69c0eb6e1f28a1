"""A fixed, stratified train/test split for datasets that ship as one set (CIFAR-10's test set, digits).

Every example ``i`` gets the key ``SHA-256("<salt>:<i>")``. Within each class the examples are ranked
by key; the ``round(n_c * test_fraction)`` lowest go to the test split and the rest to training. Each
split is then ordered by key, which mixes the classes, so any prefix of it (``test_size``) is close to
balanced. Hashes, not a random generator, so the split is the same on every library version and machine.
"""
from __future__ import annotations

import hashlib

import torch


def stratified_split(labels: torch.Tensor, test_fraction: float, salt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices (train, test) into ``labels`` (int64, (N,)): disjoint, covering, stratified per class."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    keys = [hashlib.sha256(f"{salt}:{i}".encode()).digest() for i in range(labels.shape[0])]
    by_key = keys.__getitem__
    train: list[int] = []
    test: list[int] = []
    for label in labels.unique().tolist():
        members = sorted(torch.nonzero(labels == label).flatten().tolist(), key=by_key)
        held_out = round(len(members) * test_fraction)
        test += members[:held_out]
        train += members[held_out:]
    return (
        torch.tensor(sorted(train, key=by_key), dtype=torch.long),
        torch.tensor(sorted(test, key=by_key), dtype=torch.long),
    )


def split_images(images: torch.Tensor, labels: torch.Tensor, test_fraction: float, salt: str) -> dict[str, torch.Tensor]:
    """train_images / train_labels / test_images / test_labels by :func:`stratified_split`."""
    train, test = stratified_split(labels, test_fraction, salt)
    return {"train_images": images[train], "train_labels": labels[train],
            "test_images": images[test], "test_labels": labels[test]}
