"""Fashion-MNIST (Xiao, Rasul and Vollgraf 2017, MIT licence): 60k train / 10k test, 28 x 28 grey.

Sources, tried in order: the Debian package ``dataset-fashion-mnist`` (files in
/usr/share/datasets/fashion-mnist, installed offline by ``apt-get install dataset-fashion-mnist``),
then the official download. Every file is checked against its SHA-256 before it is parsed.

Stored: images uint8 (N, 1, 28, 28), channels first like every image dataset here; labels int64 (N,).
Format 2 added the channel axis (format 1 stored (N, 28, 28)); a format-1 cache is rebuilt by
``speccond data prepare fashion-mnist``.
"""
from __future__ import annotations

import gzip
import struct
from pathlib import Path

import torch

from speccond.data.store import DatasetSpec, Source

FILES = {
    "train_images": ("train-images-idx3-ubyte.gz", "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7"),
    "train_labels": ("train-labels-idx1-ubyte.gz", "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056"),
    "test_images": ("t10k-images-idx3-ubyte.gz", "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa"),
    "test_labels": ("t10k-labels-idx1-ubyte.gz", "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05"),
}
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")


def read_idx(path: Path) -> torch.Tensor:
    """An idx file (gzip'd) as a uint8 tensor of its stated shape."""
    with gzip.open(path, "rb") as handle:
        data = handle.read()
    zero, dtype, dims = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte idx file (header {data[:4].hex()})")
    shape = struct.unpack(f">{dims}I", data[4 : 4 + 4 * dims])
    body = data[4 + 4 * dims :]
    if len(body) != int(torch.tensor(shape).prod()):
        raise ValueError(f"{path}: header says {shape} but the file holds {len(body)} bytes of data")
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).reshape(shape)


def parse(files: dict[str, Path]) -> dict[str, torch.Tensor]:
    """images uint8 (N, 1, 28, 28), labels int64 (N,), for the train and test splits."""
    arrays = {key: read_idx(path) for key, path in files.items()}
    return {
        "train_images": arrays["train_images"].unsqueeze(1),  # (60000, 1, 28, 28)
        "train_labels": arrays["train_labels"].long(),
        "test_images": arrays["test_images"].unsqueeze(1),  # (10000, 1, 28, 28)
        "test_labels": arrays["test_labels"].long(),
    }


SPEC = DatasetSpec(
    name="fashion-mnist",
    files=FILES,
    sources=(
        Source("Debian package dataset-fashion-mnist", "/usr/share/datasets/fashion-mnist"),
        Source("official download", "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com"),
    ),
    parse=parse,
    hint="apt-get install dataset-fashion-mnist (offline on Debian), or internet access for the official files",
    format_version=2,
    image_shape=(1, 28, 28),
    classes=CLASSES,
)
