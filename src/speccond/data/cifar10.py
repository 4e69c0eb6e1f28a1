"""CIFAR-10 (Krizhevsky 2009): its 10,000-image test set, split 8,000 train / 2,000 test, 3 x 32 x 32.

The one offline copy is inside the PyPI source archive of ``bigbench==1.0.0`` (358 MB; never install
it), member ``bigbench/benchmark_tasks/cifar10_classification/base64/task.json``: a JSON object whose
``examples`` are ``{"input": <base64 PNG>, "target_scores": {<class name>: 1 or 0, ...}}``, 1000 per
class, sorted by class. The label is the class with score 1; names map to the standard indices:

    classes: 0 airplane, 1 automobile, 2 bird, 3 cat, 4 deer, 5 dog, 6 frog, 7 horse, 8 ship, 9 truck

No CIFAR-10 training set exists offline, so this set is split, fixed and stratified
(``speccond.data.split`` with salt ``SPLIT_SALT`` = "cifar10:0" and test fraction 0.2): per class,
the 200 images whose SHA-256("cifar10:0:<i>") is lowest (``i`` = position in task.json) are the test
split and the other 800 the training split; each split is ordered by that hash, so classes are mixed.

Sources, tried in order: the folder named by ``$SPECCOND_BIGBENCH`` (holding bigbench-1.0.0.tar.gz),
then PyPI's file host. The archive is checked against its SHA-256 before it is read. Note that
``pip download bigbench==1.0.0`` fails (the package declares a direct-URL dependency); fetch the file
itself, as the hint says.

Stored: images uint8 (N, 3, 32, 32), RGB, channels first; labels int64 (N,).
"""
from __future__ import annotations

import base64
import binascii
import io
import json
import logging
import tarfile
from pathlib import Path

import torch

from speccond.data.split import split_images
from speccond.data.store import DatasetSpec, Source

log = logging.getLogger(__name__)

ARCHIVE = "bigbench-1.0.0.tar.gz"
SHA256 = "1bb398a5512c6d798cdebe0dfa0ac03f67f6033fa6b39c6ef71df978c7cbc5c2"
URL_PREFIX = "https://files.pythonhosted.org/packages/95/f8/c019b3579df548a04cac12342cfcb878e50ddf6cfcd7fddba8cfc721c157"
MEMBER = "bigbench-1.0.0/bigbench/benchmark_tasks/cifar10_classification/base64/task.json"
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
PER_CLASS = 1000
SPLIT_SALT = "cifar10:0"
TEST_FRACTION = 0.2


def read_member(archive: Path, member: str) -> dict:
    """The JSON file ``member`` of the bigbench archive, streamed out of it (it need not be unpacked)."""
    return read_members(archive, (member,))[member]


def read_members(archive: Path, members: tuple[str, ...]) -> dict[str, dict]:
    """The JSON files ``members`` of the bigbench archive, by name, in one pass over the stream."""
    found: dict[str, dict] = {}
    with tarfile.open(archive, "r|gz") as tar:
        for entry in tar:
            if entry.name in members and entry.name not in found:
                handle = tar.extractfile(entry)
                assert handle is not None, entry
                found[entry.name] = json.loads(handle.read())
                if len(found) == len(set(members)):
                    return found
    missing = sorted(set(members) - set(found))
    raise ValueError(f"{archive} has no member {', '.join(missing)}; expected the bigbench 1.0.0 source archive")


def read_task(archive: Path) -> dict:
    """The task.json of the CIFAR-10 task."""
    return read_member(archive, MEMBER)


def decode(example: dict, position: int) -> tuple[torch.Tensor, int]:
    """One example as (image uint8 (3, 32, 32), label index)."""
    from PIL import Image

    scores = example["target_scores"]
    if set(scores) != set(CLASSES) or sorted(scores.values()) != [0] * 9 + [1]:
        raise ValueError(f"example {position}: expected one score of 1 over the classes {CLASSES}, found {scores}")
    try:
        png = base64.b64decode(example["input"], validate=True)
    except binascii.Error as error:
        raise ValueError(f"example {position}: the input is not base64 ({error})") from None
    with Image.open(io.BytesIO(png)) as image:
        if image.format != "PNG" or image.mode != "RGB" or image.size != (32, 32):
            found = f"{image.format} {image.mode} {image.size}"
            raise ValueError(f"example {position}: expected a 32 x 32 RGB PNG, found {found}")
        pixels = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8).reshape(32, 32, 3)
    return pixels.permute(2, 0, 1), CLASSES.index(max(scores, key=scores.get))  # (3, 32, 32)


def parse(files: dict[str, Path]) -> dict[str, torch.Tensor]:
    """images uint8 (N, 3, 32, 32), labels int64 (N,): 8000 train / 2000 test, 800 / 200 per class."""
    examples = read_task(files["archive"])["examples"]
    decoded = [decode(example, i) for i, example in enumerate(examples)]
    images = torch.stack([image for image, _ in decoded])  # (10000, 3, 32, 32)
    labels = torch.tensor([label for _, label in decoded], dtype=torch.long)
    counts = torch.bincount(labels, minlength=len(CLASSES))
    if not torch.equal(counts, torch.full((len(CLASSES),), PER_CLASS)):
        raise ValueError(f"expected {PER_CLASS} images per class, found {dict(zip(CLASSES, counts.tolist()))}")
    arrays = split_images(images, labels, TEST_FRACTION, SPLIT_SALT)
    log.info("cifar10: %d images decoded, split %d / %d", len(labels), len(arrays["train_labels"]), len(arrays["test_labels"]))
    return arrays


SPEC = DatasetSpec(
    name="cifar10",
    files={"archive": (ARCHIVE, SHA256)},
    sources=(
        Source("folder named by $SPECCOND_BIGBENCH", "$SPECCOND_BIGBENCH"),
        Source("PyPI file host", URL_PREFIX),
    ),
    parse=parse,
    hint=(
        f"put {ARCHIVE} (the bigbench 1.0.0 source archive, SHA-256 {SHA256[:12]}...) in a folder and set "
        f"SPECCOND_BIGBENCH to it, e.g. `curl -o DIR/{ARCHIVE} {URL_PREFIX}/{ARCHIVE}`; never pip install bigbench"
    ),
    image_shape=(3, 32, 32),
    classes=CLASSES,
)
