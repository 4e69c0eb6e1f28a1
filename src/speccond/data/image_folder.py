"""Your own images as a dataset: a folder in torchvision's ``ImageFolder`` layout.

    speccond compare --task imagefolder:/data/pets --model timm:vit_small_patch16_224
    speccond compare --task "imagefolder:/data/pets?size=64" ...
    speccond compare --task "imagefolder:/data/pets?size=64&stream=1" --set num_workers=4 ...

The folder holds ``train/<class>/<image>`` and ``test/<class>/<image>`` (or ``val/`` where there is no
``test/``), as torchvision's ``ImageFolder`` reads them (the same extensions, classes sorted by name).
Each image is converted to RGB and resized to ``size`` x ``size`` (default 32; ``Resize`` of the shorter
side, then ``CenterCrop``), stored as uint8 (N, 3, size, size) with int64 labels: the layout of every
image dataset here, so the harness's split rule (``--val-size`` carves a seeded validation split out of
train/), normalisation and augmentation apply unchanged.

The arrays are cached in ``$SPECCOND_DATA/imagefolder/<key>/arrays.safetensors``, with the SHA-256 of the
arrays recorded and checked on load. The key is a digest of the folder's absolute path, the size, and
every image's relative path, byte size and modification time, so a changed folder is read again, never
served stale. The whole dataset is then held in memory while training.

With ``stream=1`` nothing is cached and nothing is held: :class:`FolderImages` keeps the images' paths and
labels and decodes each image (by the same :func:`decode`) when it is asked for, so a folder larger than
memory trains through a ``DataLoader`` with workers (harness/training/streaming.py).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
import torch.utils.data

from speccond.data.task_options import task_options

PREFIX = "imagefolder:"
DEFAULT_SIZE = 32
TEST_SPLITS = ("test", "val")  # the folder's held-out split: test/, else val/


def is_image_folder(name: str) -> bool:
    return name.startswith(PREFIX)


EXAMPLE = "imagefolder:DIR, imagefolder:DIR?size=64 or imagefolder:DIR?size=64&stream=1"


def parse(name: str) -> tuple[Path, int]:
    """("imagefolder:DIR?size=N") -> (DIR, N); ValueError naming what was expected."""
    location, _, query = name[len(PREFIX):].partition("?")
    options = task_options(name, query, EXAMPLE)
    unknown = sorted(set(options) - {"size", "stream"})
    if not location or unknown:
        raise ValueError(f"an image-folder task looks like {EXAMPLE}, got {name!r}")
    if options.get("stream", "0") not in ("0", "1"):
        raise ValueError(f"{name!r}: stream must be 0 (read into memory) or 1 (decode from disk as batches need them)")
    try:
        size = int(options.get("size", DEFAULT_SIZE))
    except ValueError:
        raise ValueError(f"{name!r}: size must be a whole number of pixels, e.g. imagefolder:DIR?size=64") from None
    if size < 1:
        raise ValueError(f"{name!r}: size must be >= 1")
    folder = Path(location).expanduser()
    if not (folder / "train").is_dir() or not any((folder / split).is_dir() for split in TEST_SPLITS):
        raise ValueError(f"{folder} is not an image folder: expected {folder}/train/<class>/<image> and "
                         f"{folder}/test/<class>/<image> (or val/), torchvision's ImageFolder layout")
    return folder.resolve(), size


def streams(name: str) -> bool:
    """True when ``name`` asks for its images to be decoded from disk as batches need them (``stream=1``)."""
    parse(name)
    query = name[len(PREFIX):].partition("?")[2]
    return task_options(name, query, EXAMPLE).get("stream", "0") == "1"


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


def samples(name: str) -> dict[str, list[tuple[str, int]]]:
    """{"train": [(image path, label)], "test": [...]} of the folder; ValueError when a split has no images."""
    folder, _ = parse(name)
    splits = _splits(folder)
    empty = [split for split, found in splits.items() if not found]
    if empty:
        raise ValueError(f"{folder}: no images in its {' and '.join(empty)} split(s) (extensions ImageFolder reads: "
                         ".jpg, .jpeg, .png, .ppm, .bmp, .pgm, .tif, .tiff, .webp)")
    return splits


def cache_folder(name: str, splits: dict[str, list[tuple[str, int]]]) -> Path:
    """$SPECCOND_DATA/imagefolder/<key>: where the folder's arrays (or, streamed, its statistics) are cached."""
    from speccond.data.store import data_dir

    folder, size = parse(name)
    return data_dir() / "imagefolder" / _key(folder, size, splits)


def _key(folder: Path, size: int, splits: dict[str, list[tuple[str, int]]]) -> str:
    digest = hashlib.sha256(f"{folder}\n{size}\n".encode())
    for split, found in splits.items():
        for path, label in found:
            stat = os.stat(path)
            digest.update(f"{split}\t{os.path.relpath(path, folder)}\t{label}\t{stat.st_size}\t{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def decode(path: str, size: int) -> torch.Tensor:
    """One image as uint8 (3, size, size): RGB, the shorter side resized to ``size``, then centre-cropped. An
    image Pillow cannot read whole (a truncated JPEG) is a ValueError naming its file."""
    from PIL import Image
    from torchvision.transforms import v2

    try:
        with Image.open(path) as image:
            pixels = torch.frombuffer(bytearray(image.convert("RGB").tobytes()), dtype=torch.uint8)
            width, height = image.size
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:  # truncated, not an image, ...
        raise ValueError(f"{path}: unreadable image ({type(error).__name__}: {error}); replace it or remove it from "
                         "the folder") from None
    resize = v2.Compose([v2.Resize(size, antialias=True), v2.CenterCrop(size)])
    return resize(pixels.reshape(height, width, 3).permute(2, 0, 1))  # (3, H, W) -> (3, size, size)


def _read(samples: list[tuple[str, int]], size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 (N, 3, size, size) images and int64 (N,) labels."""
    images = torch.empty((len(samples), 3, size, size), dtype=torch.uint8)
    for i, (path, _) in enumerate(samples):
        images[i] = decode(path, size)
    return images, torch.tensor([label for _, label in samples], dtype=torch.int64)


class FolderImages(torch.utils.data.Dataset):
    """A map-style dataset of images on disk: item ``i`` is (uint8 (3, size, size), label, i), decoded when it
    is asked for. It holds the paths and labels only, never pixels, so its size is not bounded by memory."""

    def __init__(self, samples: list[tuple[str, int]], size: int):
        self.paths = [path for path, _ in samples]
        self.labels = [label for _, label in samples]
        self.size = size

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, int]:
        return decode(self.paths[index], self.size), self.labels[index], index


def prepare(name: str) -> Path:
    """Read the folder (unless its cache is current) and return the cached arrays file; a streamed folder
    (``stream=1``) is only checked (both splits hold images) and returned: it is never read whole."""
    from safetensors.torch import save_file

    from speccond.checksum import tensors_sha256
    from speccond.data.store import ARRAYS

    folder, size = parse(name)
    splits = samples(name)  # both splits hold images
    if streams(name):  # checked, not read: its images are decoded as batches need them
        return folder
    target = cache_folder(name, splits)
    arrays = target / ARRAYS
    if arrays.is_file():
        return arrays
    tensors = {}
    for split, found in splits.items():
        tensors[f"{split}_images"], tensors[f"{split}_labels"] = _read(found, size)
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

    if streams(name):
        raise ValueError(f"{name!r} streams its images from disk (stream=1): it is never read whole into arrays; "
                         "drop stream=1 to cache the folder as arrays")
    arrays = prepare(name)
    tensors = load_file(str(arrays))
    with safe_open(str(arrays), "pt") as handle:
        recorded = handle.metadata().get("sha256")
    if recorded != tensors_sha256(tensors):
        arrays.unlink()
        raise ValueError(f"the cached arrays of {name!r} in {arrays} are damaged and were removed; run again to "
                         "read the folder anew")
    return tensors
