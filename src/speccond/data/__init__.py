"""Datasets for the experiments: obtained from offline sources first, verified, cached.

    speccond data prepare fashion-mnist
    arrays = speccond.data.load("fashion-mnist")   # train_images (60000, 1, 28, 28) uint8, train_labels, ...

Every image dataset stores train_images / test_images as uint8 (N, C, H, W) and train_labels /
test_labels as int64 (N,): fashion-mnist (1, 28, 28), cifar10 (3, 32, 32; CIFAR-10's test set split
8000 / 2000), digits (1, 8, 8; scikit-learn's, split 1438 / 359), pathfinder and pathfinder-small
(1, 32, 32; generated, with val_images / val_labels too).
fashion-scenes (detection: images, instance maps, boxes, labels per split) is described in fashion_scenes.py.
Token datasets (listops, text-bytes, pairs-bytes) store {split}_tokens int16, PAD 0, with
{split}_lengths and {split}_labels, for split in train, val, test (text-bytes and pairs-bytes: train and
test, GLUE's train and dev). ``language`` (language.py) holds the language experiment's data: a WordPiece
tokenizer, MLM corpus blocks and four GLUE tasks (glue.py: SST-2, CoLA, MRPC, RTE). ``speccond data list``
says where each dataset comes from (listing.py); the shared data folder is found by shared.py.
Your own data: ``imagefolder:DIR`` (image_folder.py) and ``text:DIR?text=COLUMN&label=COLUMN`` (text_files.py).
"""
from __future__ import annotations

from pathlib import Path

import torch

from speccond.data import cifar10, digits, fashion_mnist
from speccond.data import listops  # two specs: listops (LRA's sizes) and listops-small
from speccond.data import byte_text  # two specs: text-bytes and pairs-bytes (LRA Text and Retrieval from GLUE, as bytes)
from speccond.data import pathfinder  # two specs: pathfinder (LRA's sizes) and pathfinder-small
from speccond.data import fashion_scenes  # generated detection scenes (speccond.harness.tasks.detection), not an image task
from speccond.data import language  # the language experiment: tokenizer, MLM corpus, four GLUE tasks
from speccond.data import image_folder  # your own images: imagefolder:DIR (not registered: any folder)
from speccond.data import text_files  # your own texts: text:DIR?text=COLUMN&label=COLUMN (not registered)
from speccond.data.store import DatasetSpec, data_dir

DATASETS: dict[str, DatasetSpec] = {module.SPEC.name: module.SPEC for module in (fashion_mnist, cifar10, digits)}
DATASETS.update({generated.name: generated for generated in listops.SPECS})
DATASETS.update({byte_spec.name: byte_spec for byte_spec in byte_text.SPECS})
DATASETS.update({generated.name: generated for generated in pathfinder.SPECS})
DATASETS[fashion_scenes.SPEC.name] = fashion_scenes.SPEC
DATASETS[language.SPEC.name] = language.SPEC


def spec(name: str) -> DatasetSpec:
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(sorted(DATASETS))}, or your own images as "
                         "imagefolder:DIR (torchvision's ImageFolder layout: DIR/train/<class>/..., DIR/test/<class>/...), or "
                         "your texts as text:DIR?text=COLUMN&label=COLUMN (parquet, CSV or a saved datasets DatasetDict)")
    return DATASETS[name]


def prepare(name: str) -> Path:
    """The cached arrays file of dataset ``name`` (a registered name, or imagefolder:DIR), made if needed."""
    if image_folder.is_image_folder(name):
        return image_folder.prepare(name)
    if text_files.is_text_files(name) and text_files.streams(name):  # token ids on disk, prepared chunk by chunk
        from speccond.data import text_stream

        return text_stream.prepare(name)
    if text_files.is_text_files(name):
        return text_files.prepare(name)
    from speccond.data.store import prepare as _prepare

    return _prepare(spec(name))


def load(name: str) -> dict[str, torch.Tensor]:
    if image_folder.is_image_folder(name):
        return image_folder.load(name)
    if text_files.is_text_files(name):
        return text_files.load(name)
    from speccond.data.store import load as _load

    return _load(spec(name))


__all__ = ["DATASETS", "data_dir", "load", "prepare", "spec"]
