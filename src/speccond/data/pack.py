"""Prepared datasets packed for another machine: one xz file per dataset plus a manifest.

    speccond data pack fashion-mnist cifar10 --to DIR    # on a machine that has prepared them
    speccond data unpack DIR                            # on the other one, into $SPECCOND_DATA

A machine with no network and no Debian package (a rented GPU, a cluster node) cannot obtain the raw
files, but it can take the cache itself: ``DIR/NAME.safetensors.xz`` is the prepared arrays file
compressed (fashion-mnist 55 MB -> 26 MB, cifar10 31 MB -> 23 MB), and ``DIR/manifest.json`` records
each file's size and SHA-256 before and after compression. ``unpack`` checks both, writes through a
partial file and a rename, and the loader then verifies the arrays against the checksum the cache
records (``speccond.data.store``), so a damaged pack is refused, never trained on.
"""
from __future__ import annotations

import json
import lzma
import os
from pathlib import Path

from speccond.checksum import file_sha256
from speccond.data.store import ARRAYS, data_dir

MANIFEST = "manifest.json"
CHUNK = 1 << 20


def pack(names: list[str], to: Path) -> Path:
    """Compress each prepared dataset's arrays into ``to`` and write the manifest; returns its path."""
    from speccond.data import prepare

    to.mkdir(parents=True, exist_ok=True)
    entries = {}
    for name in names:
        arrays = prepare(name)  # verified (or rebuilt) before it is packed
        packed = to / f"{name}.safetensors.xz"
        partial = packed.with_name(packed.name + ".partial")
        with arrays.open("rb") as source, lzma.open(partial, "wb", preset=6) as target:
            while chunk := source.read(CHUNK):
                target.write(chunk)
        os.replace(partial, packed)
        entries[name] = {"file": packed.name, "size": packed.stat().st_size, "sha256": file_sha256(packed),
                         "arrays_size": arrays.stat().st_size, "arrays_sha256": file_sha256(arrays)}
    manifest = to / MANIFEST
    manifest.write_text(json.dumps(entries, indent=2) + "\n")
    return manifest


def unpack(source: Path) -> list[Path]:
    """Every dataset of the pack in ``source`` into the data dir, each checked against the manifest before and
    after decompression; the arrays files written. Raises ValueError naming a missing or damaged file."""
    manifest = source / MANIFEST
    if not manifest.is_file():
        raise ValueError(f"{source} holds no {MANIFEST}; pass the folder `speccond data pack ... --to` wrote")
    written = []
    for name, entry in json.loads(manifest.read_text()).items():
        packed = source / entry["file"]
        if not packed.is_file() or file_sha256(packed) != entry["sha256"]:
            raise ValueError(f"{packed} is missing or does not match its SHA-256 in {manifest}; pack it again")
        arrays = data_dir() / name / ARRAYS
        arrays.parent.mkdir(parents=True, exist_ok=True)
        partial = arrays.with_name(f"{arrays.name}.{os.getpid()}.partial")
        with lzma.open(packed, "rb") as compressed, partial.open("wb") as target:
            while chunk := compressed.read(CHUNK):
                target.write(chunk)
        if file_sha256(partial) != entry["arrays_sha256"]:
            partial.unlink()
            raise ValueError(f"{packed} decompresses to other arrays than the manifest records; pack it again")
        os.replace(partial, arrays)
        written.append(arrays)
    return written

