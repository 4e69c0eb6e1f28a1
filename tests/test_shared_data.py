"""The shared data folder's locator and its checksum list (speccond.data.shared)."""
from __future__ import annotations

import pytest

from speccond.data.shared import shared_checksum, shared_data_dir


def test_the_variable_names_the_folder_and_its_checksums_are_read(tmp_path, monkeypatch):
    (tmp_path / "SHA256SUMS").write_text("ab" * 32 + "  ./text/sst2/train.tsv\n" + "cd" * 32 + "  ./other.tar.gz\n")
    monkeypatch.setenv("SPECCOND_SHARED_DATA", str(tmp_path))
    assert shared_data_dir() == tmp_path
    assert shared_checksum("text/sst2/train.tsv") == "ab" * 32
    assert shared_checksum("./other.tar.gz") == "cd" * 32
    with pytest.raises(KeyError, match="no checksum for text/cola/train.tsv"):
        shared_checksum("text/cola/train.tsv")


def test_without_the_variable_the_folder_is_the_checkouts_sibling_only_if_it_exists(monkeypatch):
    monkeypatch.delenv("SPECCOND_SHARED_DATA", raising=False)
    found = shared_data_dir()
    assert found is None or (found.is_dir() and found.parts[-2:] == ("shared", "data"))
    if found is None:
        with pytest.raises(FileNotFoundError, match="SPECCOND_SHARED_DATA"):
            shared_checksum("text/sst2/train.tsv")
