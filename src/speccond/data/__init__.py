"""Datasets for the experiments: obtained from offline sources first, verified, cached.

    speccond data prepare fashion-mnist
    arrays = speccond.data.load("fashion-mnist")   # train_images (60000, 28, 28) uint8, train_labels, ...
"""
from __future__ import annotations

from pathlib import Path

import torch

from speccond.data import fashion_mnist
from speccond.data.store import DatasetSpec, data_dir

DATASETS: dict[str, DatasetSpec] = {fashion_mnist.SPEC.name: fashion_mnist.SPEC}


def spec(name: str) -> DatasetSpec:
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(sorted(DATASETS))}")
    return DATASETS[name]


def prepare(name: str) -> Path:
    from speccond.data.store import prepare as _prepare

    return _prepare(spec(name))


def load(name: str) -> dict[str, torch.Tensor]:
    from speccond.data.store import load as _load

    return _load(spec(name))


__all__ = ["DATASETS", "data_dir", "load", "prepare", "spec"]
