"""Handwritten digits (UCI, bundled with scikit-learn as ``load_digits``): 1797 images, 1 x 8 x 8.

A tiny real dataset for fast tests and demos. The bundled values are 0..16; they are stored as uint8
``round(v * 255 / 16)`` (0..255, like the other image datasets). Split fixed and stratified
(``speccond.data.split`` with salt ``SPLIT_SALT`` = "digits:0" and test fraction 0.2): per class the
``round(0.2 * n_c)`` images with the lowest SHA-256("digits:0:<i>") are the test split, giving
1438 train / 359 test.

    classes: 0 "0", 1 "1", ..., 9 "9"

Stored: images uint8 (N, 1, 8, 8); labels int64 (N,). Needs scikit-learn (the ``dev`` extra).
"""
from __future__ import annotations

from pathlib import Path

import torch

from speccond.data.split import split_images
from speccond.data.store import DatasetSpec

CLASSES = tuple(str(digit) for digit in range(10))
SPLIT_SALT = "digits:0"
TEST_FRACTION = 0.2


def parse(files: dict[str, Path]) -> dict[str, torch.Tensor]:
    """images uint8 (N, 1, 8, 8), labels int64 (N,), for the train and test splits."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:  # a ModuleNotFoundError naming sklearn: the command line prints it in one line
        raise ModuleNotFoundError("the digits dataset needs scikit-learn: pip install scikit-learn",
                                  name="sklearn") from None
    bunch = load_digits()
    values = torch.as_tensor(bunch.images, dtype=torch.float64)  # (1797, 8, 8), 0..16
    if values.shape != (1797, 8, 8) or values.min() < 0 or values.max() > 16:
        raise ValueError(f"expected 1797 8 x 8 images with values 0..16 from load_digits, found {tuple(values.shape)}")
    images = (values * 255 / 16).round().to(torch.uint8).unsqueeze(1)  # (1797, 1, 8, 8)
    labels = torch.as_tensor(bunch.target, dtype=torch.long)
    arrays = split_images(images, labels, TEST_FRACTION, SPLIT_SALT)
    return arrays


SPEC = DatasetSpec(
    name="digits",
    files={},
    sources=(),
    parse=parse,
    hint="pip install scikit-learn (it ships the digits)",
    image_shape=(1, 8, 8),
    classes=CLASSES,
)
