"""A cached dataset carries the SHA-256 of its arrays and is verified on load: flipped or truncated bytes
are refused with one line naming the file and the command that repairs it, which rebuilds the cache."""
from __future__ import annotations

import logging

import pytest
import torch

from speccond.data import digits
from speccond.data.store import ARRAYS, arrays_sha256, load, prepare

pytest.importorskip("sklearn")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """digits prepared in a fresh data dir: (its arrays file, the arrays as prepared)."""
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "data"))
    path = prepare(digits.SPEC)
    return path, {key: tensor.clone() for key, tensor in load(digits.SPEC).items()}  # not views of the file


def _flip_bytes_in_images(path, count: int = 200) -> None:
    """Flip ``count`` bytes near the end of the file: the last tensors' data, never the header."""
    raw = bytearray(path.read_bytes())
    for offset in range(len(raw) - 1 - count, len(raw) - 1):
        raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))


def test_the_cache_records_the_sha256_of_its_arrays(cache):
    from safetensors import safe_open

    path, arrays = cache
    with safe_open(str(path), framework="pt") as handle:
        assert handle.metadata()["sha256"] == arrays_sha256(arrays)


@pytest.mark.parametrize("damage", ["flipped", "truncated"])
def test_a_damaged_cache_is_refused_naming_the_file_and_the_command(cache, damage):
    path, _ = cache
    if damage == "flipped":
        _flip_bytes_in_images(path)
    else:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError) as error:
        load(digits.SPEC)
    message = str(error.value)
    assert "\n" not in message
    assert str(path) in message and "damaged" in message
    assert "`speccond data prepare digits`" in message


@pytest.mark.parametrize("damage", ["flipped", "truncated"])
def test_prepare_repairs_a_damaged_cache(cache, damage, caplog):
    path, prepared = cache
    if damage == "flipped":
        _flip_bytes_in_images(path)
    else:
        path.write_bytes(path.read_bytes()[:100])
    with caplog.at_level(logging.WARNING, logger="speccond.data.store"):
        assert prepare(digits.SPEC) == path
    assert any("damaged" in record.getMessage() and str(path) in record.getMessage() for record in caplog.records)
    repaired = load(digits.SPEC)
    assert all(torch.equal(repaired[key], prepared[key]) for key in prepared)


def test_the_cli_turns_a_damaged_cache_into_one_line(cache, capsys, monkeypatch):
    """`speccond data prepare` repairs; a command that only loads names the repair."""
    from speccond.harness.cli import main

    path, _ = cache
    path.write_bytes(path.read_bytes()[:100])
    assert main(["data", "prepare", "digits"]) == 0
    assert str(path) in capsys.readouterr().out
    assert load(digits.SPEC)["train_images"].shape == (1438, 1, 8, 8)


def test_a_cache_written_before_checksums_loads_with_a_note_and_prepare_adds_one(cache, caplog):
    from safetensors import safe_open
    from safetensors.torch import save_file

    path, arrays = cache
    save_file(arrays, str(path), metadata={"dataset": "digits", "format": "1"})  # as written before checksums
    with caplog.at_level(logging.INFO, logger="speccond.data.store"):
        loaded = load(digits.SPEC)
    assert all(torch.equal(loaded[key], arrays[key]) for key in arrays)
    assert any("unverified" in record.getMessage() for record in caplog.records)
    prepare(digits.SPEC)
    with safe_open(str(path), framework="pt") as handle:
        assert handle.metadata()["sha256"] == arrays_sha256(arrays)
    assert path.name == ARRAYS
