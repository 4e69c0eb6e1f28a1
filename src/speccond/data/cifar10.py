"""CIFAR-10 (Krizhevsky 2009), the full standard split: 50,000 training and 10,000 test images, 3 x 32 x 32.

    speccond data prepare cifar10

Sources, tried in order (each file checked against its SHA-256 before it is read; a file that differs is
refused, named, and the next source tried):

1. the folder named by ``$SPECCOND_CIFAR10``, holding ``cifar10-jpeg.tar.gz``;
2. the shared data folder (``$SPECCOND_SHARED_DATA``, else the checkout's ``../shared/data``:
   ``speccond.data.shared``), holding the same archive;
3. with neither folder here, ``torchvision.datasets.CIFAR10(download=True)`` into the cache's
   ``raw/torchvision`` (internet needed): the original binary batches, whose pixels are the published ones.
   A folder that is here but lacks the archive or holds a damaged one is refused, naming it, not replaced
   by the download.

The archive (``cifar10/{train,test}/<class>/NNNN.jpg``, 5,000 and 1,000 per class, torchvision's ImageFolder
layout) holds the images re-encoded as JPEG (quality about 75) by the public copy they come from, so its
pixels differ slightly from the original batches: results made from it say "CIFAR-10 (JPEG)". The cache
records which way it was made (``source`` in its metadata: "files" for the archive, "online" for torchvision).

Each split is ordered by SHA-256("cifar10:<split>/<class>/<file>") (torchvision's: "cifar10:<split>:<i>"), so
classes are mixed and any prefix (``test_size``) is close to balanced; the harness carves its validation
split out of train (``val_size``). Stored: images uint8 (N, 3, 32, 32), RGB, channels first; labels int64 (N,).

    classes: 0 airplane, 1 automobile, 2 bird, 3 cat, 4 deer, 5 dog, 6 frog, 7 horse, 8 ship, 9 truck
"""
from __future__ import annotations

import hashlib
import io
import logging
import tarfile
from pathlib import Path

import torch

from speccond.data.store import DatasetSpec, Source, data_dir

log = logging.getLogger(__name__)

ARCHIVE = "cifar10-jpeg.tar.gz"
SHA256 = "cb6c50520509605d4bd1856cb7eaba797dabcec3c19d93ce945b0ec1aee34a5f"
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
SPLITS = {"train": 5000, "test": 1000}  # images per class
SOURCE_KEY = "source"  # the cache metadata's record of where the arrays came from


def decode_jpeg(data: bytes, name: str) -> torch.Tensor:
    """One archive member as uint8 (3, 32, 32); a ValueError naming the member when it is not a 32 x 32 RGB JPEG."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            if image.format != "JPEG" or image.mode != "RGB" or image.size != (32, 32):
                raise ValueError(f"{name}: expected a 32 x 32 RGB JPEG, found {image.format} {image.mode} {image.size}")
            pixels = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8).reshape(32, 32, 3)
    except OSError as error:
        raise ValueError(f"{name}: not a readable image ({error}); the archive is damaged") from None
    return pixels.permute(2, 0, 1)  # (3, 32, 32)


def _ordered(split: str, keyed: list[tuple[str, torch.Tensor, int]]) -> dict[str, torch.Tensor]:
    """{split}_images (N, 3, 32, 32) and {split}_labels (N,) ordered by the SHA-256 of each example's key."""
    keyed.sort(key=lambda item: hashlib.sha256(f"cifar10:{split}{item[0]}".encode()).digest())
    return {f"{split}_images": torch.stack([image for _, image, _ in keyed]),
            f"{split}_labels": torch.tensor([label for _, _, label in keyed], dtype=torch.long)}


def _check_counts(arrays: dict[str, torch.Tensor], origin: str, expected: dict[str, int] = SPLITS) -> None:
    for split, per_class in expected.items():
        counts = torch.bincount(arrays[f"{split}_labels"], minlength=len(CLASSES))
        if not torch.equal(counts, torch.full((len(CLASSES),), per_class)):
            raise ValueError(f"{origin}: expected {per_class} {split} images per class, found "
                             f"{dict(zip(CLASSES, counts.tolist()))}")


def parse(files: dict[str, Path]) -> dict[str, torch.Tensor]:
    """The archive's images, in one pass over its stream: train 50,000 and test 10,000."""
    found: dict[str, list[tuple[str, torch.Tensor, int]]] = {split: [] for split in SPLITS}
    archive = files["archive"]
    with tarfile.open(archive, "r|gz") as tar:
        for entry in tar:
            if not entry.isfile():
                continue
            parts = Path(entry.name).parts  # ("cifar10", split, class, file)
            if len(parts) != 4 or parts[0] != "cifar10" or parts[1] not in SPLITS or parts[2] not in CLASSES:
                raise ValueError(f"{archive}: unexpected member {entry.name}; expected cifar10/<train|test>/<class>/NNNN.jpg")
            handle = tar.extractfile(entry)
            assert handle is not None, entry
            found[parts[1]].append((f"/{parts[2]}/{parts[3]}", decode_jpeg(handle.read(), entry.name),
                                    CLASSES.index(parts[2])))
    arrays = {key: value for split, keyed in found.items() for key, value in _ordered(split, keyed).items()}
    _check_counts(arrays, str(archive))
    log.info("cifar10: %d train and %d test images from %s", len(found["train"]), len(found["test"]), archive.name)
    return arrays


def from_torchvision(root: Path, download: bool = True, expected: dict[str, int] = SPLITS) -> dict[str, torch.Tensor]:
    """The original batches through ``torchvision.datasets.CIFAR10`` (downloaded into ``root`` when ``download``;
    torchvision checks each batch's MD5), ``expected`` images per class and split."""
    from torchvision.datasets import CIFAR10

    arrays = {}
    for split in SPLITS:
        dataset = CIFAR10(str(root), train=split == "train", download=download)
        images = torch.from_numpy(dataset.data).permute(0, 3, 1, 2)  # (N, 32, 32, 3) -> (N, 3, 32, 32)
        keyed = [(f":{i}", image, int(label)) for i, (image, label) in enumerate(zip(images, dataset.targets))]
        arrays.update(_ordered(split, keyed))
    _check_counts(arrays, f"torchvision CIFAR10 in {root}", expected)
    return arrays


SPEC = DatasetSpec(
    name="cifar10",
    files={"archive": (ARCHIVE, SHA256)},
    sources=(
        Source("folder named by $SPECCOND_CIFAR10", "$SPECCOND_CIFAR10"),
        Source("shared data folder", "shared:"),
    ),
    parse=parse,
    hint=(f"set SPECCOND_SHARED_DATA (or SPECCOND_CIFAR10) to a folder holding {ARCHIVE} (SHA-256 {SHA256[:12]}...), "
          "or give this machine internet access for torchvision.datasets.CIFAR10(download=True)"),
    format_version=2,  # 1: the withdrawn 10,000-image copy, split 8,000 / 2,000
    image_shape=(3, 32, 32),
    classes=CLASSES,
    online=lambda: from_torchvision(data_dir() / "cifar10" / "raw" / "torchvision"),
    online_description="torchvision.datasets.CIFAR10(download=True): the original batches",
)
