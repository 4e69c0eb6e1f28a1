"""Fashion scenes: real Fashion-MNIST items pasted on a textured canvas, with exact boxes and instance masks.

The small analogue of COCO for the detection and instance-segmentation comparison (the paper's Mask R-CNN
with an XCiT-S backbone). Each scene is a 96 x 96 grey image holding 2 to 5 Fashion-MNIST items, each
scaled to a square of 20 to 44 pixels (bilinear), randomly flipped left-right, and pasted at a random
position entirely inside the canvas, over a smooth background texture. Items may overlap.

Exact ground truth, by construction:

- An item's *mask* is the set of its scaled pixels with value >= ``mask_threshold`` (32): the pixels
  pasted. A pasted pixel replaces what was there, so a later item covers an earlier one; the canvas
  elsewhere keeps the background. Every pixel therefore belongs to at most one visible instance, and the
  instance map (0 background, k the k-th instance) is the exact set of visible mask pixels.
- An instance whose visible part falls below ``min_visible`` (half) of its own mask is dropped, and the
  scene is painted again without it (dropping one only uncovers the others, so this ends), so no visible
  item pixel is ever unlabelled.
- Its box is the tight box of its visible pixels, (x0, y0, x1, y1) with x1, y1 exclusive (pixel (r, c)
  covers [c, c + 1) x [r, r + 1)), so width x1 - x0 counts pixels; its label is the item's class.

Source items are disjoint between splits: training scenes draw from Fashion-MNIST training items 0 to
49,999, validation scenes from training items 50,000 to 59,999, test scenes from the 10,000 test items;
within a split every item is used at most once (``{split}_sources`` records which).

Determinism: random draws come from CPython's ``random.Random(str)`` (MT19937 drawn through
``randrange``, the same on every platform), one stream per split, named after it; scaling is integer
fixed-point bilinear (weights in 1/256), so the images are bit-identical on any machine and library
version, and ``generated_sha256`` catches drift. Generating all 10,500 scenes takes about 20 s of CPU.

Stored, for split in train, val, test (N scenes, K = ``max_objects`` slots, S = canvas side):

    {split}_images     uint8 (N, 1, S, S)
    {split}_instances  uint8 (N, S, S): 0 background, k >= 1 the pixel shows instance k (slot k - 1)
    {split}_labels     int64 (N, K): the class of each instance, -1 for an empty slot
    {split}_boxes      int64 (N, K, 4): x0, y0, x1, y1 (exclusive), 0 for an empty slot
    {split}_sources    int64 (N, K): the item's index in its Fashion-MNIST split, -1 for an empty slot
    {split}_placements int64 (N, K, 4): top, left, side, flipped (1: mirrored left-right) of the pasted
                       square, 0 for an empty slot: with the source item, the scene can be redrawn exactly

Instances are numbered in paint order (a later one lies on top) after the dropped ones are removed.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from speccond.data import fashion_mnist
from speccond.data.store import DatasetSpec

ITEM = 28  # side of a Fashion-MNIST item
FIXED = 256  # fixed-point unit of the bilinear weights
CLASSES = fashion_mnist.CLASSES


@dataclass(frozen=True)
class SceneConfig:
    """How scenes are drawn; the defaults define the stored dataset (changing one changes every scene)."""

    canvas: int = 96  # side of the square image, pixels
    min_objects: int = 2  # items placed per scene, drawn uniformly from [min_objects, max_objects]
    max_objects: int = 5
    min_side: int = 20  # an item is scaled to a square of side drawn from [min_side, max_side]
    max_side: int = 44
    mask_threshold: int = 32  # a scaled item pixel >= this belongs to its mask (and is pasted)
    min_visible: float = 0.5  # drop an instance with less than this fraction of its mask visible
    texture_cells: int = 7  # the background is a (cells x cells) grid of grey levels, scaled up bilinearly
    texture_max: int = 40  # background grey levels are drawn from [0, texture_max]; 0 = plain black

    def __post_init__(self) -> None:
        if not 1 <= self.min_objects <= self.max_objects <= 255:
            raise ValueError(f"SceneConfig needs 1 <= min_objects <= max_objects <= 255, got "
                             f"{self.min_objects} and {self.max_objects}")
        if not 4 <= self.min_side <= self.max_side <= self.canvas:
            raise ValueError(f"SceneConfig needs 4 <= min_side <= max_side <= canvas ({self.canvas}), got "
                             f"{self.min_side} and {self.max_side}")
        if not 1 <= self.mask_threshold <= 255 or not 0 <= self.min_visible <= 1:
            raise ValueError(f"SceneConfig: mask_threshold in [1, 255] and min_visible in [0, 1], got "
                             f"{self.mask_threshold} and {self.min_visible}")
        if self.texture_cells < 2 or not 0 <= self.texture_max <= 255:
            raise ValueError(f"SceneConfig: texture_cells >= 2 and texture_max in [0, 255], got "
                             f"{self.texture_cells} and {self.texture_max}")


class Scenes(NamedTuple):
    images: torch.Tensor  # uint8 (N, 1, S, S)
    instances: torch.Tensor  # uint8 (N, S, S): 0 background, k = instance k
    labels: torch.Tensor  # int64 (N, K), -1 empty
    boxes: torch.Tensor  # int64 (N, K, 4): x0, y0, x1, y1 exclusive; 0 empty
    sources: torch.Tensor  # int64 (N, K): index into the source items, -1 empty
    placements: torch.Tensor  # int64 (N, K, 4): top, left, side, flipped; 0 empty


def resize(item: np.ndarray, size: int) -> np.ndarray:
    """uint8 (h, w) -> uint8 (size, size) by bilinear interpolation with half-pixel centres (as
    ``F.interpolate(mode="bilinear", align_corners=False)``, to within 2 grey levels: positions and weights
    are rounded to 1/256 pixel), in integer fixed point, so the result is the same on every machine."""
    rows, row_weight = _taps(item.shape[0], size)
    cols, col_weight = _taps(item.shape[1], size)
    source = item.astype(np.int64)
    top = source[rows[0]][:, cols[0]] * (FIXED - col_weight) + source[rows[0]][:, cols[1]] * col_weight  # (size, size)
    bottom = source[rows[1]][:, cols[0]] * (FIXED - col_weight) + source[rows[1]][:, cols[1]] * col_weight
    value = top * (FIXED - row_weight[:, None]) + bottom * row_weight[:, None]  # in units of FIXED^2
    return ((value + FIXED * FIXED // 2) // (FIXED * FIXED)).astype(np.uint8)


def _taps(source: int, size: int) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """For each output index i: the two source indices and the weight (in 1/FIXED) of the second, for the
    source coordinate (i + 1/2) * source / size - 1/2, clamped to the edges."""
    i = np.arange(size, dtype=np.int64)
    position = ((2 * i + 1) * source * FIXED) // (2 * size) - FIXED // 2  # in 1/FIXED pixels, floor
    position = np.clip(position, 0, (source - 1) * FIXED)
    first = position // FIXED
    return (first, np.minimum(first + 1, source - 1)), position - first * FIXED


def generate(items: torch.Tensor, item_labels: torch.Tensor, count: int, seed: str,
             config: SceneConfig = SceneConfig()) -> Scenes:
    """``count`` scenes from ``items`` (uint8 (M, 1, 28, 28) or (M, 28, 28)) and their labels (M,),
    each item used at most once, drawn from the stream ``random.Random(seed)`` (module docstring)."""
    pixels = items.reshape(items.shape[0], ITEM, ITEM).numpy()
    classes = item_labels.numpy()
    rng = random.Random(seed)
    order = list(range(pixels.shape[0]))
    rng.shuffle(order)
    needed = count * config.max_objects
    if needed > len(order):
        raise ValueError(f"{count} scenes of up to {config.max_objects} items need {needed} source items "
                         f"(each is used once), but {len(order)} were given; give more items or fewer scenes")
    size, slots = config.canvas, config.max_objects
    images = np.zeros((count, 1, size, size), dtype=np.uint8)
    instances = np.zeros((count, size, size), dtype=np.uint8)
    labels = np.full((count, slots), -1, dtype=np.int64)
    boxes = np.zeros((count, slots, 4), dtype=np.int64)
    sources = np.full((count, slots), -1, dtype=np.int64)
    placements = np.zeros((count, slots, 4), dtype=np.int64)
    taken = 0
    for n in range(count):
        background = _texture(rng, config)
        placed = []  # (source index, top, left, flipped, scaled item, mask), in paint order
        for _ in range(rng.randrange(config.min_objects, config.max_objects + 1)):
            index = order[taken]
            taken += 1
            side = rng.randrange(config.min_side, config.max_side + 1)
            top, left = rng.randrange(size - side + 1), rng.randrange(size - side + 1)
            scaled = resize(pixels[index], side)
            flipped = rng.randrange(2)
            if flipped:
                scaled = scaled[:, ::-1]
            placed.append((index, top, left, flipped, scaled, scaled >= config.mask_threshold))
        image, owner = _paint(background, placed)
        while True:  # drop the too-occluded instances, then paint again without them
            kept = [k for k, (*_, mask) in enumerate(placed)
                    if (owner == k + 1).sum() >= config.min_visible * mask.sum() and mask.any()]
            if len(kept) == len(placed):
                break
            placed = [placed[k] for k in kept]
            image, owner = _paint(background, placed)
        images[n, 0], instances[n] = image, owner
        for k, (index, top, left, flipped, scaled, _) in enumerate(placed):
            rows, cols = np.nonzero(owner == k + 1)
            labels[n, k], sources[n, k] = classes[index], index
            placements[n, k] = (top, left, scaled.shape[0], flipped)
            boxes[n, k] = (cols.min(), rows.min(), cols.max() + 1, rows.max() + 1)
    return Scenes(*(torch.from_numpy(array) for array in (images, instances, labels, boxes, sources, placements)))


def _texture(rng: random.Random, config: SceneConfig) -> np.ndarray:
    """uint8 (S, S): a (cells x cells) grid of grey levels in [0, texture_max], scaled up bilinearly."""
    cells = np.array([[rng.randrange(config.texture_max + 1) for _ in range(config.texture_cells)]
                      for _ in range(config.texture_cells)], dtype=np.uint8)
    return resize(cells, config.canvas)


def _paint(background: np.ndarray, placed: list) -> tuple[np.ndarray, np.ndarray]:
    """The image (S, S) and the instance map (S, S): items pasted in order, each over its mask."""
    image, owner = background.copy(), np.zeros(background.shape, dtype=np.uint8)
    for k, (_, top, left, _, scaled, mask) in enumerate(placed):
        side = scaled.shape[0]
        window = (slice(top, top + side), slice(left, left + side))
        image[window][mask] = scaled[mask]
        owner[window][mask] = k + 1
    return image, owner


# Scenes per split; each split's random stream is named after the dataset and the split.
SIZES = {"train": 8_000, "val": 1_000, "test": 1_500}
VAL_FROM = 50_000  # validation scenes draw from Fashion-MNIST training items VAL_FROM.. (train ones from ..VAL_FROM)


def parse(files: dict[str, Path]) -> dict[str, torch.Tensor]:
    """Generate every split from the prepared Fashion-MNIST (prepared first when it is not)."""
    from speccond.data import store

    store.prepare(fashion_mnist.SPEC)
    source = store.load(fashion_mnist.SPEC)
    pools = {
        "train": (source["train_images"][:VAL_FROM], source["train_labels"][:VAL_FROM], 0),
        "val": (source["train_images"][VAL_FROM:], source["train_labels"][VAL_FROM:], VAL_FROM),
        "test": (source["test_images"], source["test_labels"], 0),
    }
    arrays = {}
    for split, count in SIZES.items():
        images, labels, offset = pools[split]
        scenes = generate(images, labels, count, f"fashion-scenes:{split}")
        for field, value in scenes._asdict().items():
            arrays[f"{split}_{field}"] = value
        arrays[f"{split}_sources"] = torch.where(scenes.sources >= 0, scenes.sources + offset, scenes.sources)
    return arrays


SPEC = DatasetSpec(
    name="fashion-scenes",
    files={},
    sources=(),
    parse=parse,
    hint="generated from Fashion-MNIST: apt-get install dataset-fashion-mnist (offline on Debian)",
    format_version=1,
    image_shape=None,  # not an image-classification dataset: the detection tasks read it (speccond.harness.tasks.detection)
    classes=CLASSES,
    generated_sha256="6f86e8054aa5f96c3a1f4b9124663c7cf84da2a1404ac238afd9c64c9791ff20",
)
