"""The shared data folder: the read-only copies of datasets every developer and CI run has beside the checkout.

    folder = shared_data_dir()            # Path, or None when there is none (then a dataset's online path)
    digest = shared_checksum("text/sst2/train.tsv")   # its line in folder/SHA256SUMS

The folder is ``$SPECCOND_SHARED_DATA`` when that is set, else the checkout's ``../shared/data`` (the folder
``shared/data`` beside the directory that holds ``src/speccond``) when it exists, else None. It is read, never
written: datasets are unpacked and cached in the data dir (``speccond.data.store.data_dir``).
``SHA256SUMS`` there lists ``<sha256>  ./<relative path>`` for every file.
"""
from __future__ import annotations

import os
from pathlib import Path

CHECKSUMS = "SHA256SUMS"
VARIABLE = "SPECCOND_SHARED_DATA"


def shared_data_dir() -> Path | None:
    """``$SPECCOND_SHARED_DATA`` if set, else the checkout's ``../shared/data`` if it exists, else None."""
    named = os.environ.get(VARIABLE)
    if named:
        return Path(named)
    beside = Path(__file__).resolve().parents[3].parent / "shared" / "data"  # <checkout>/src/speccond/data/shared.py
    return beside if beside.is_dir() else None


def shared_checksum(relative_path: str) -> str:
    """The SHA-256 that the shared folder's SHA256SUMS lists for ``relative_path`` (as "text/sst2/train.tsv");
    FileNotFoundError when there is no shared folder or no SHA256SUMS, KeyError when it does not list the file."""
    folder = shared_data_dir()
    if folder is None:
        raise FileNotFoundError(f"no shared data folder: set {VARIABLE} or put shared/data beside the checkout")
    sums = folder / CHECKSUMS
    if not sums.is_file():
        raise FileNotFoundError(f"{sums} does not exist; the shared data folder {folder} needs its {CHECKSUMS}")
    wanted = relative_path.removeprefix("./")
    for line in sums.read_text().splitlines():
        digest, _, name = line.strip().partition("  ")
        if name.removeprefix("./") == wanted:
            return digest
    raise KeyError(f"{sums} lists no checksum for {wanted}")
