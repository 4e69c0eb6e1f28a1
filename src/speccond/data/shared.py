"""Where the project's shared data lies: the read-only folder of raw files beside a checkout.

    shared_data_dir()                    # $SPECCOND_SHARED_DATA, else <checkout>/../shared/data, else None
    shared_checksum("text/sst2/dev.tsv") # its SHA-256 as the folder's SHA256SUMS lists it

A fresh clone with ``shared/`` beside it (``<parent>/main`` and ``<parent>/shared/data``) finds the folder
without any setting; ``$SPECCOND_SHARED_DATA`` names another. The folder is only read: datasets are unpacked
and parsed into the data cache (``speccond.data.store.data_dir``), never next to it.
"""
from __future__ import annotations

import os
from pathlib import Path

ENV = "SPECCOND_SHARED_DATA"
SUMS = "SHA256SUMS"


def checkout_shared_dir() -> Path:
    """``<checkout>/../shared/data`` for an editable install or a source tree (``src/speccond/data`` -> checkout)."""
    return Path(__file__).resolve().parents[3].parent / "shared" / "data"


def shared_data_dir() -> Path | None:
    """$SPECCOND_SHARED_DATA when set, else the checkout's ``../shared/data`` when it exists, else None."""
    named = os.environ.get(ENV)
    if named:
        return Path(named)
    beside = checkout_shared_dir()
    return beside if beside.is_dir() else None


def shared_checksum(relative: str, folder: Path | None = None) -> str:
    """The SHA-256 that ``folder``'s (default: the shared folder's) SHA256SUMS lists for ``relative``."""
    folder = folder or shared_data_dir()
    if folder is None:
        raise FileNotFoundError(f"no shared data folder: set {ENV} to the folder holding {SUMS}")
    sums = folder / SUMS
    for line in sums.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.strip().partition("  ")
        if name.removeprefix("./") == relative:
            return digest
    raise FileNotFoundError(f"{sums} lists no {relative}; expected a line '<sha256>  ./{relative}'")
