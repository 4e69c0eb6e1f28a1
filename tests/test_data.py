"""Datasets: prepared from the offline source, checksummed, cached atomically; clear errors otherwise."""
from __future__ import annotations

import base64
import dataclasses
import gzip
import json
import shutil
from pathlib import Path

import pytest
import torch

from speccond import data
from speccond.data import cifar10, digits, fashion_mnist
from speccond.data.split import stratified_split
from speccond.data.store import Source, load, prepare, source_of
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.tasks.datasets import image_tasks, load_task, task_shape

needs_fashion_mnist = pytest.mark.skipif(
    not Path("/usr/share/datasets/fashion-mnist").is_dir(),
    reason="needs the Debian package: apt-get install dataset-fashion-mnist (./run installs it as root)",
)


@pytest.fixture
def data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "data"))
    return tmp_path / "data"


@needs_fashion_mnist
def test_fashion_mnist_prepares_from_the_debian_package(data_home):
    path = data.prepare("fashion-mnist")
    assert path == data_home / "fashion-mnist" / "arrays.safetensors"
    arrays = data.load("fashion-mnist")
    assert arrays["train_images"].shape == (60000, 1, 28, 28) and arrays["train_images"].dtype == torch.uint8
    assert arrays["test_images"].shape == (10000, 1, 28, 28)
    assert torch.equal(torch.bincount(arrays["train_labels"]), torch.full((10,), 6000))
    assert torch.equal(torch.bincount(arrays["test_labels"]), torch.full((10,), 1000))
    assert int(arrays["train_images"].max()) == 255 and float(arrays["train_images"].float().mean()) > 50
    assert data.prepare("fashion-mnist") == path  # idempotent: the cache is reused


@needs_fashion_mnist
def test_a_corrupt_source_file_is_refused_and_the_next_source_tried(data_home, tmp_path):
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    for name, _ in fashion_mnist.FILES.values():
        shutil.copyfile(f"/usr/share/datasets/fashion-mnist/{name}", corrupt / name)
    with gzip.open(corrupt / "t10k-labels-idx1-ubyte.gz", "wb") as handle:
        handle.write(b"\x00\x00\x08\x01" + b"\x00\x00\x00\x01" + b"\x07")
    only_corrupt = (Source("a corrupt mirror", str(corrupt)),)
    with pytest.raises(FileNotFoundError, match=r"(?s)t10k-labels.*SHA-256 .* expected 8d3605d1.*dataset-fashion-mnist"):
        prepare(fashion_mnist.SPEC, only_corrupt)
    assert not (data_home / "fashion-mnist" / "arrays.safetensors").exists()  # nothing half-written
    prepare(fashion_mnist.SPEC, only_corrupt + fashion_mnist.SPEC.sources[:1])  # falls through to the package
    assert data.load("fashion-mnist")["test_labels"].shape == (10000,)


def test_obtaining_a_file_leaves_another_process_partial_download_alone(tmp_path):
    """Two processes preparing one dataset at once (the language protocol's two pre-training chains) once
    shared a single NAME.partial: one renamed it away under the other, which then failed. Each process
    now writes its own partial file, so another's is neither read, overwritten nor moved."""
    import os

    from speccond.data.store import _obtain, sha256

    source, raw = tmp_path / "mirror", tmp_path / "raw"
    source.mkdir()
    raw.mkdir()
    (source / "file.bin").write_bytes(b"the real bytes")
    others = raw / f"file.bin.{os.getpid() + 1}.partial"  # another process, half-way through its download
    others.write_bytes(b"the real by")
    spec = fashion_mnist.SPEC
    obtained = _obtain(spec, "file.bin", sha256(source / "file.bin"), raw, (Source("a mirror", str(source)),))
    assert obtained.read_bytes() == b"the real bytes"
    assert others.read_bytes() == b"the real by"
    assert sorted(path.name for path in raw.iterdir()) == sorted(["file.bin", others.name])


def test_missing_dataset_names_the_command(data_home):
    with pytest.raises(FileNotFoundError, match="speccond data prepare fashion-mnist"):
        data.load("fashion-mnist")
    with pytest.raises(ValueError, match="unknown dataset 'cifar'"):
        data.load("cifar")


def test_read_idx_rejects_a_truncated_file(tmp_path):
    path = tmp_path / "bad.gz"
    with gzip.open(path, "wb") as handle:
        handle.write(b"\x00\x00\x08\x03" + (2).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2 + b"\x00" * 10)
    with pytest.raises(ValueError, match="header says"):
        fashion_mnist.read_idx(path)


@needs_fashion_mnist
def test_cli_prepares_and_reports_errors(data_home, capsys):
    from speccond.harness.cli import main

    assert main(["data", "prepare", "fashion-mnist"]) == 0
    assert "arrays.safetensors" in capsys.readouterr().out
    assert main(["data", "prepare", "imagenet"]) == 2
    assert "unknown dataset 'imagenet'" in capsys.readouterr().err


# --- the stratified split ---------------------------------------------------------------------------------


@pytest.mark.parametrize("counts", [(10, 10, 10), (178, 182, 177, 183), (1000,) * 10, (7, 1, 30)])
def test_stratified_split_is_disjoint_covering_and_stratified(counts):
    labels = torch.cat([torch.full((n,), c) for c, n in enumerate(counts)])  # sorted by class, as the sources are
    train, test = stratified_split(labels, 0.2, "salt")
    assert sorted(train.tolist() + test.tolist()) == list(range(len(labels)))  # disjoint and covering
    for c, n in enumerate(counts):
        assert int((labels[test] == c).sum()) == round(0.2 * n) and int((labels[train] == c).sum()) == n - round(0.2 * n)
    if len(counts) > 1:
        assert not torch.equal(labels[train], labels[train].sort().values)  # ordered by hash: classes mixed
    again = stratified_split(labels, 0.2, "salt")
    assert torch.equal(again[0], train) and torch.equal(again[1], test)  # a fixed split
    assert not torch.equal(stratified_split(labels, 0.2, "another salt")[1], test)
    with pytest.raises(ValueError, match=r"test_fraction must be in \(0, 1\), got 1.5"):
        stratified_split(labels, 1.5, "salt")


# --- digits (scikit-learn) --------------------------------------------------------------------------------


def test_digits_prepare_gives_a_stratified_split_of_all_1797_images(data_home):
    load_digits = pytest.importorskip("sklearn.datasets").load_digits
    data.prepare("digits")
    arrays = data.load("digits")
    assert {k: (tuple(v.shape), v.dtype) for k, v in arrays.items()} == {
        "train_images": ((1438, 1, 8, 8), torch.uint8), "train_labels": ((1438,), torch.int64),
        "test_images": ((359, 1, 8, 8), torch.uint8), "test_labels": ((359,), torch.int64),
    }
    original = load_digits()
    per_class = torch.bincount(torch.as_tensor(original.target))
    assert torch.equal(torch.bincount(arrays["test_labels"]), (per_class * 0.2).round().long())
    assert torch.equal(torch.bincount(arrays["train_labels"]) + torch.bincount(arrays["test_labels"]), per_class)

    def rows(images, labels):  # sorted (64 pixels, label) rows
        return sorted(map(tuple, torch.cat([images.reshape(-1, 64), labels[:, None].to(torch.uint8)], 1).tolist()))

    # every (image, label) of the source exactly once across the two splits: disjoint and covering
    scaled = (torch.as_tensor(original.images) * 255 / 16).round().to(torch.uint8)  # 0..16 -> 0..255
    stored = rows(torch.cat([arrays["train_images"], arrays["test_images"]]),
                  torch.cat([arrays["train_labels"], arrays["test_labels"]]))
    assert stored == rows(scaled, torch.as_tensor(original.target))
    assert len(set(stored)) == 1797  # the 1797 digits are distinct images, so disjoint means disjoint indices
    assert int(arrays["train_images"].max()) == 255 and int(arrays["train_images"].min()) == 0


def test_digits_split_is_the_same_in_every_data_dir(tmp_path, monkeypatch):
    pytest.importorskip("sklearn")
    prepared = []
    for folder in ("one", "two"):
        monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / folder))
        data.prepare("digits")
        prepared.append(data.load("digits"))
    assert all(torch.equal(prepared[0][key], prepared[1][key]) for key in prepared[0])


def test_a_cache_of_another_format_is_refused_by_load_and_rebuilt_by_prepare(data_home):
    pytest.importorskip("sklearn")
    prepare(digits.SPEC)  # format 1
    newer = dataclasses.replace(digits.SPEC, format_version=2)  # as if parse had changed since
    with pytest.raises(ValueError, match=r"has format 1, but this version of speccond reads format 2.*speccond data prepare digits"):
        load(newer)
    prepare(newer)
    assert load(newer)["train_images"].shape == (1438, 1, 8, 8)
    with pytest.raises(ValueError, match="has format 2"):
        load(digits.SPEC)


# --- CIFAR-10 (JPEG): the full standard split, from the shared archive ------------------------------------

# Published statistics of the CIFAR-10 training set (channel means 0.4914, 0.4822, 0.4465; stds 0.2470,
# 0.2435, 0.2616 of 255), and the standard class order.
CIFAR10_TRAIN_MEAN = (125.3, 123.0, 113.9)
CIFAR10_TRAIN_STD = (63.0, 62.1, 66.7)
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


@pytest.fixture
def cifar10_arrays(cifar10_home, monkeypatch):
    monkeypatch.setenv("SPECCOND_DATA", str(cifar10_home))
    return data.load("cifar10")


def test_cifar10_is_the_full_standard_split_with_classes_mixed(cifar10_arrays, cifar10_home, monkeypatch):
    arrays = cifar10_arrays
    assert {k: (tuple(v.shape), v.dtype) for k, v in arrays.items()} == {
        "train_images": ((50000, 3, 32, 32), torch.uint8), "train_labels": ((50000,), torch.int64),
        "test_images": ((10000, 3, 32, 32), torch.uint8), "test_labels": ((10000,), torch.int64),
    }
    assert torch.equal(torch.bincount(arrays["train_labels"]), torch.full((10,), 5000))
    assert torch.equal(torch.bincount(arrays["test_labels"]), torch.full((10,), 1000))
    assert 80 <= torch.bincount(arrays["test_labels"][:1000]).min()  # any prefix is near balanced (classes mixed)
    assert cifar10.CLASSES == CIFAR10_CLASSES == data.spec("cifar10").classes
    monkeypatch.setenv("SPECCOND_DATA", str(cifar10_home))
    assert source_of(cifar10.SPEC) == "files"  # the cache says it came from the archive, not torchvision


def test_cifar10_pixel_statistics_are_those_of_the_real_training_set(cifar10_arrays):
    pixels = cifar10_arrays["train_images"][::5].float()  # (10000, 3, 32, 32): every fifth image
    torch.testing.assert_close(pixels.mean((0, 2, 3)), torch.tensor(CIFAR10_TRAIN_MEAN), atol=1.0, rtol=0)  # RGB
    torch.testing.assert_close(pixels.std((0, 2, 3)), torch.tensor(CIFAR10_TRAIN_STD), atol=1.0, rtol=0)


@pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities of TorchVision:DeprecationWarning")
def test_cifar10_images_and_labels_are_the_archives_members(cifar10_arrays, cifar10_home):
    import tarfile

    decode_jpeg = pytest.importorskip("torchvision.io").decode_jpeg  # torchvision's libjpeg, not PIL
    members = {"cifar10/train/cat/0007.jpg": 3, "cifar10/test/ship/0999.jpg": 8, "cifar10/train/airplane/4999.jpg": 0}
    with tarfile.open(cifar10_home / "cifar10" / "raw" / cifar10.ARCHIVE, "r:gz") as tar:
        for name, label in members.items():
            split = name.split("/")[1]
            raw = torch.frombuffer(bytearray(tar.extractfile(name).read()), dtype=torch.uint8)
            expected = decode_jpeg(raw).int()  # (3, 32, 32)
            images = cifar10_arrays[f"{split}_images"].int()
            close = ((images - expected).abs().flatten(1).max(1).values <= 2).nonzero().flatten()  # IDCTs may round apart
            assert close.numel() == 1, name
            assert int(cifar10_arrays[f"{split}_labels"][close]) == label, name


def test_a_damaged_cifar10_archive_is_refused_naming_it(cifar10_home, data_home, tmp_path, monkeypatch):
    folder = tmp_path / "named"
    folder.mkdir()
    damaged = bytearray((cifar10_home / "cifar10" / "raw" / cifar10.ARCHIVE).read_bytes())
    damaged[1000] ^= 0xFF
    (folder / cifar10.ARCHIVE).write_bytes(bytes(damaged))
    monkeypatch.setenv("SPECCOND_CIFAR10", str(folder))
    only_named = cifar10.SPEC.sources[:1]
    with pytest.raises(FileNotFoundError, match=rf"(?s){folder / cifar10.ARCHIVE} has SHA-256 [0-9a-f]{{64}}, expected {cifar10.SHA256}"):
        prepare(cifar10.SPEC, only_named)
    assert not (data_home / "cifar10" / "arrays.safetensors").exists()
    assert not list((data_home / "cifar10" / "raw").iterdir())  # the bad copy is not kept


def test_cifar10_through_torchvision_reads_the_original_batches(tmp_path, monkeypatch):
    """The online path on a small folder made here in the batches' own format: torchvision reads it (its MD5
    list pointed at these files, so nothing is downloaded) and the arrays are its images, channels first."""
    import hashlib
    import pickle

    from torchvision.datasets import CIFAR10

    batches = tmp_path / CIFAR10.base_folder
    batches.mkdir()
    generator = torch.Generator().manual_seed(0)
    made = {}
    for name in [row[0] for row in CIFAR10.train_list + CIFAR10.test_list]:
        test = name == "test_batch"
        labels = list(range(10)) * (1 if test or name == "data_batch_1" else 0) + list(range(10)) * (name == "data_batch_2")
        pixels = torch.randint(0, 256, (len(labels), 3072), dtype=torch.uint8, generator=generator).numpy()
        (batches / name).write_bytes(pickle.dumps({"data": pixels, "labels": labels}))
        made[name] = (pixels, labels)
    (batches / CIFAR10.meta["filename"]).write_bytes(pickle.dumps({"label_names": list(CIFAR10_CLASSES)}))
    md5 = lambda name: hashlib.md5((batches / name).read_bytes()).hexdigest()  # noqa: E731
    monkeypatch.setattr(CIFAR10, "train_list", [[n, md5(n)] for n, _ in CIFAR10.train_list])
    monkeypatch.setattr(CIFAR10, "test_list", [[n, md5(n)] for n, _ in CIFAR10.test_list])
    monkeypatch.setattr(CIFAR10, "meta", {**CIFAR10.meta, "md5": md5(CIFAR10.meta["filename"])})
    arrays = cifar10.from_torchvision(tmp_path, download=True, expected={"train": 2, "test": 1})
    assert arrays["train_images"].shape == (20, 3, 32, 32) and arrays["test_images"].shape == (10, 3, 32, 32)
    pixels, labels = made["test_batch"]
    originals = torch.from_numpy(pixels).reshape(10, 3, 32, 32)  # the batches store channels first, row-major
    for image, label in zip(arrays["test_images"], arrays["test_labels"]):
        assert torch.equal(image, originals[labels.index(int(label))])


# --- tasks: load_task and task_shape ----------------------------------------------------------------------


def _prepared(name, request, monkeypatch):
    """Point SPECCOND_DATA at a data dir where ``name`` is prepared (cifar10: the session's)."""
    if name == "cifar10":
        monkeypatch.setenv("SPECCOND_DATA", str(request.getfixturevalue("cifar10_home")))
        return data.load(name)
    if name == "fashion-mnist" and not Path("/usr/share/datasets/fashion-mnist").is_dir():
        pytest.skip("needs the Debian package: apt-get install dataset-fashion-mnist")
    if name == "digits":
        pytest.importorskip("sklearn")
    request.getfixturevalue("data_home")
    data.prepare(name)
    return data.load(name)


@pytest.mark.parametrize("name", ["digits", "cifar10"])
def test_load_task_standardises_per_channel_with_the_training_statistics(name, request, monkeypatch):
    arrays = _prepared(name, request, monkeypatch)
    task = load_task(TrainConfig().replaced(task=name, train_size=0, test_size=300, seed=1))
    channels = arrays["train_images"].shape[1]
    assert task["train_x"].dtype == torch.float32 and task["train_y"].dtype == torch.int64
    assert task["train_x"].shape == arrays["train_images"].shape and task["test_x"].shape == (300, *arrays["test_images"].shape[1:])
    torch.testing.assert_close(task["train_x"].mean((0, 2, 3)), torch.zeros(channels), atol=1e-4, rtol=0)
    torch.testing.assert_close(task["train_x"].std((0, 2, 3)), torch.ones(channels), atol=1e-4, rtol=0)
    raw = arrays["train_images"].double() / 255  # all of it: the statistics do not depend on the order
    mean, std = raw.mean((0, 2, 3), keepdim=True), raw.std((0, 2, 3), keepdim=True)  # (1, C, 1, 1)
    expected_test = (arrays["test_images"][:300].double() / 255 - mean) / std
    torch.testing.assert_close(task["test_x"].double(), expected_test, atol=1e-5, rtol=0)
    assert torch.equal(task["test_y"], arrays["test_labels"][:300])


def test_load_task_subset_is_a_seeded_permutation(data_home):
    pytest.importorskip("sklearn")
    data.prepare("digits")
    arrays = data.load("digits")
    first, same, other = (load_task(TrainConfig().replaced(task="digits", train_size=200, test_size=50, seed=s)) for s in (3, 3, 4))
    assert all(torch.equal(first[key], same[key]) for key in first)
    assert not torch.equal(first["train_y"], other["train_y"])
    assert torch.equal(first["test_y"], other["test_y"]) and torch.equal(first["test_y"], arrays["test_labels"][:50])  # no seed
    index = torch.randperm(1438, generator=torch.Generator().manual_seed(3))[:200]
    assert torch.equal(first["train_y"], arrays["train_labels"][index])
    raw = arrays["train_images"][index].float() / 255
    torch.testing.assert_close(first["train_x"], (raw - raw.mean((0, 2, 3), keepdim=True)) / raw.std((0, 2, 3), keepdim=True))


def test_load_task_refuses_sizes_beyond_the_dataset(data_home):
    pytest.importorskip("sklearn")
    data.prepare("digits")
    with pytest.raises(ValueError, match=r"TrainConfig.train_size=5000 but task 'digits' has 1438 train examples"):
        load_task(TrainConfig().replaced(task="digits", train_size=5000))
    with pytest.raises(ValueError, match=r"TrainConfig.test_size=400 but task 'digits' has 359 test examples"):
        load_task(TrainConfig().replaced(task="digits", test_size=400))
    with pytest.raises(ValueError, match="unknown task 'mnist'"):
        load_task(TrainConfig().replaced(task="mnist"))


def test_task_shape_needs_no_prepared_data(data_home):
    assert image_tasks() == ["cifar10", "digits", "fashion-mnist", "pathfinder", "pathfinder-small"]
    shapes = {name: task_shape(name) for name in image_tasks()}
    assert {name: (s.image_size, s.channels, s.classes) for name, s in shapes.items()} == {
        "cifar10": (32, 3, 10), "digits": (8, 1, 10), "fashion-mnist": (28, 1, 10),
        "pathfinder": (32, 1, 2), "pathfinder-small": (32, 1, 2),
    }
    assert {s.kind for s in shapes.values()} == {"image"}
    lra_image = task_shape("lra-image")
    assert (lra_image.kind, lra_image.length, lra_image.vocab, lra_image.classes) == ("sequence", 1024, 257, 10)
    assert not data_home.exists()
    with pytest.raises(ValueError, match="unknown task 'imagenet'"):
        task_shape("imagenet")


@pytest.mark.parametrize("name", ["fashion-mnist", "cifar10", "digits"])
def test_task_shape_matches_the_loaded_task(name, request, monkeypatch):
    arrays = _prepared(name, request, monkeypatch)
    task = load_task(TrainConfig().replaced(task=name, train_size=64, test_size=16))
    shape = task_shape(name)
    image_size, channels, classes = shape.image_size, shape.channels, shape.classes
    assert task["train_x"].shape[1:] == task["test_x"].shape[1:] == (channels, image_size, image_size)
    assert int(torch.cat([arrays["train_labels"], arrays["test_labels"]]).max()) + 1 == classes == len(data.spec(name).classes)
