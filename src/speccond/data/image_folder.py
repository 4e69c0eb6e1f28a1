"""Your own images as a dataset: a folder in torchvision's ``ImageFolder`` layout.

    speccond compare --task imagefolder:/data/pets --model timm:vit_small_patch16_224
    speccond compare --task "imagefolder:/data/pets?size=64" ...

The folder holds ``train/<class>/<image>`` and ``test/<class>/<image>`` (or ``val/`` where there is no
``test/``), as torchvision's ``ImageFolder`` reads them (the same extensions, classes sorted by name).
Each image is converted to RGB and resized to ``size`` x ``size`` (default 32; ``Resize`` of the shorter
side, then ``CenterCrop``), stored as uint8 (N, 3, size, size) with int64 labels: the layout of every
image dataset here, so the harness's split rule (``--val-size`` carves a seeded validation split out of
train/), normalisation and augmentation apply unchanged.

The arrays are cached in ``$SPECCOND_DATA/imagefolder/<key>/arrays.safetensors``, with the SHA-256 of the
arrays recorded and checked on load. The key is a digest of the folder's absolute path, the size, and
every image's relative path, byte size and modification time, so a changed folder is read again, never
served stale. The whole dataset is held in memory while training: a folder larger than memory is not
supported yet.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from urllib.parse import parse_qs

import torch

PREFIX = "imagefolder:"
DEFAULT_SIZE = 32
TEST_SPLITS = ("test", "val")  # the folder's held-out split: test/, else val/


def is_image_folder(name: str) -> bool:
    return name.startswith(PREFIX)


def parse(name: str) -> tuple[Path, int]:
    """("imagefolder:DIR?size=N") -> (DIR, N); ValueError naming what was expected."""
    location, _, query = name[len(PREFIX):].partition("?")
    options = parse_qs(query, strict_parsing=bool(query)) if query else {}
    unknown = sorted(set(options) - {"size"})
    if not location or unknown:
        raise ValueError(f"an image-folder task looks like imagefolder:DIR or imagefolder:DIR?size=64, got {name!r}")
    try:
        size = int(options.get("size", [DEFAULT_SIZE])[-1])
    except ValueError:
        raise ValueError(f"{name!r}: size must be a whole number of pixels, e.g. imagefolder:DIR?size=64") from None
    if size < 1:
        raise ValueError(f"{name!r}: size must be >= 1")
    folder = Path(location).expanduser()
    if not (folder / "train").is_dir() or not any((folder / split).is_dir() for split in TEST_SPLITS):
        raise ValueError(f"{folder} is not an image folder: expected {folder}/train/<class>/<image> and "
                         f"{folder}/test/<class>/<image> (or val/), torchvision's ImageFolder layout")
    return folder.resolve(), size


def classes(name: str) -> list[str]:
    """The class names, from train/'s subfolders (sorted, as ImageFolder orders them)."""
    from torchvision.datasets.folder import find_classes

    folder, _ = parse(name)
    return find_classes(str(folder / "train"))[0]


def _splits(folder: Path) -> dict[str, list[tuple[str, int]]]:
    """{"train": [(image path, label)], "test": [...]}: ImageFolder's samples; test/ and train/ must name the
    same classes."""
    from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

    names, index = find_classes(str(folder / "train"))
    held_out = next(folder / split for split in TEST_SPLITS if (folder / split).is_dir())
    other = find_classes(str(held_out))[0]
    if other != names:
        raise ValueError(f"{held_out} has classes {other}, {folder / 'train'} has {names}: the splits must name "
                         "the same classes")
    return {"train": make_dataset(str(folder / "train"), index, IMG_EXTENSIONS),
            "test": make_dataset(str(held_out), index, IMG_EXTENSIONS)}


def _key(folder: Path, size: int, splits: dict[str, list[tuple[str, int]]]) -> str:
    digest = hashlib.sha256(f"{folder}\n{size}\n".encode())
    for split, samples in splits.items():
        for path, label in samples:
            stat = os.stat(path)
            digest.update(f"{split}\t{os.path.relpath(path, folder)}\t{label}\t{stat.st_size}\t{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def _read(samples: list[tuple[str, int]], size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 (N, 3, size, size) images and int64 (N,) labels."""
    from PIL import Image
    from torchvision.transforms import v2

    resize = v2.Compose([v2.Resize(size, antialias=True), v2.CenterCrop(size)])
    images = torch.empty((len(samples), 3, size, size), dtype=torch.uint8)
    for i, (path, _) in enumerate(samples):
        with Image.open(path) as image:
            pixels = torch.frombuffer(bytearray(image.convert("RGB").tobytes()), dtype=torch.uint8)
            width, height = image.size
        images[i] = resize(pixels.reshape(height, width, 3).permute(2, 0, 1))  # (3, H, W) -> (3, size, size)
    return images, torch.tensor([label for _, label in samples], dtype=torch.int64)


def prepare(name: str) -> Path:
    """Read the folder (unless its cache is current) and return the cached arrays file."""
    from safetensors.torch import save_file

    from speccond.checksum import tensors_sha256
    from speccond.data.store import ARRAYS, data_dir

    folder, size = parse(name)
    splits = _splits(folder)
    empty = [split for split, samples in splits.items() if not samples]
    if empty:
        raise ValueError(f"{folder}: no images in its {' and '.join(empty)} split(s) (extensions ImageFolder reads: "
                         ".jpg, .jpeg, .png, .ppm, .bmp, .pgm, .tif, .tiff, .webp)")
    target = data_dir() / "imagefolder" / _key(folder, size, splits)
    arrays = target / ARRAYS
    if arrays.is_file():
        return arrays
    tensors = {}
    for split, samples in splits.items():
        tensors[f"{split}_images"], tensors[f"{split}_labels"] = _read(samples, size)
    target.mkdir(parents=True, exist_ok=True)
    partial = arrays.with_name(f"{arrays.name}.{os.getpid()}.partial")
    metadata = {"dataset": name, "format": "1", "sha256": tensors_sha256(tensors),
                "classes": json.dumps(classes(name)), "folder": str(folder)}
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(partial), metadata=metadata)
    os.replace(partial, arrays)
    return arrays


def load(name: str) -> dict[str, torch.Tensor]:
    """The arrays of the folder (prepared first when its cache is missing or stale), checksum verified."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    from speccond.checksum import tensors_sha256

    arrays = prepare(name)
    tensors = load_file(str(arrays))
    with safe_open(str(arrays), "pt") as handle:
        recorded = handle.metadata().get("sha256")
    if recorded != tensors_sha256(tensors):
        arrays.unlink()
        raise ValueError(f"the cached arrays of {name!r} in {arrays} are damaged and were removed; run again to "
                         "read the folder anew")
    return tensors
