"""speccond data pack / unpack (speccond/data/pack.py): a prepared dataset carried to a machine that cannot
obtain it arrives bit for bit, and a damaged pack is refused before anything is written."""
from __future__ import annotations

import json

import pytest

from speccond.data import pack
from speccond.harness.cli import main


@pytest.fixture
def prepared(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "here"))
    from speccond import data

    return data.prepare("digits")


def test_a_packed_dataset_unpacks_bit_for_bit_on_another_machine(prepared, tmp_path, monkeypatch):
    assert main(["data", "pack", "digits", "--to", str(tmp_path / "pack")]) == 0
    entry = json.loads((tmp_path / "pack" / "manifest.json").read_text())["digits"]
    assert entry["size"] < entry["arrays_size"]  # compressed
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "there"))
    assert main(["data", "unpack", str(tmp_path / "pack")]) == 0
    arrived = tmp_path / "there" / "digits" / "arrays.safetensors"
    assert arrived.read_bytes() == prepared.read_bytes()
    from speccond import data

    assert data.load("digits")["train_images"].shape[1:] == (1, 8, 8)  # the loader's own checksum passes


def test_a_damaged_pack_is_refused_and_writes_nothing(prepared, tmp_path, monkeypatch, capsys):
    pack.pack(["digits"], tmp_path / "pack")
    packed = tmp_path / "pack" / "digits.safetensors.xz"
    packed.write_bytes(packed.read_bytes()[:-10])
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "there"))
    assert main(["data", "unpack", str(tmp_path / "pack")]) == 2
    assert "does not match its SHA-256" in capsys.readouterr().err
    assert not (tmp_path / "there").exists()


def test_unpack_of_a_folder_without_a_manifest_and_pack_of_an_unknown_name_are_one_line_errors(tmp_path, capsys):
    assert main(["data", "unpack", str(tmp_path)]) == 2
    assert "holds no manifest.json" in capsys.readouterr().err
    assert main(["data", "pack", "no-such-set", "--to", str(tmp_path / "pack")]) == 2
    assert "unknown dataset 'no-such-set'" in capsys.readouterr().err and not (tmp_path / "pack").exists()


def test_a_dataset_a_task_generates_packs_and_unpacks_like_any_other(tmp_path, monkeypatch):
    """associative-recall is generated and brought by its task (not one of speccond.data's): packed, it arrives
    bit for bit and loads on a machine that has not generated it."""
    from speccond.data import store
    from speccond.harness.tasks.registry import own_datasets

    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "here"))
    assert main(["data", "pack", "digits", "associative-recall", "--to", str(tmp_path / "pack")]) == 0
    assert set(json.loads((tmp_path / "pack" / "manifest.json").read_text())) == {"digits", "associative-recall"}
    generated = (tmp_path / "here" / "associative-recall" / "arrays.safetensors").read_bytes()
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "there"))
    assert main(["data", "unpack", str(tmp_path / "pack")]) == 0
    assert (tmp_path / "there" / "associative-recall" / "arrays.safetensors").read_bytes() == generated
    assert store.load(own_datasets()["associative-recall"])["train_tokens"].shape == (8_000, 64)  # checksum passes


@pytest.mark.parametrize("names, expected", [
    (["digits", "associative-recal"], "unknown dataset 'associative-recal'; nearest: associative-recall;"),
    (["fashion-mnst"], "nearest: fashion-mnist"),
    (["imagefolder:/some/dir"], "is your own data, which `speccond data pack` does not carry"),
])
def test_a_name_pack_cannot_carry_is_a_one_line_error_before_anything_is_written(names, expected, tmp_path,
                                                                                  monkeypatch, capsys):
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "here"))
    assert main(["data", "pack", *names, "--to", str(tmp_path / "pack")]) == 2
    error = capsys.readouterr().err
    assert expected in error and len(error.strip().splitlines()) == 1
    assert not (tmp_path / "pack").exists() and not (tmp_path / "here").exists()
