"""Prepared datasets packed for another machine: one xz file per dataset plus a manifest.

    speccond data pack fashion-mnist cifar10 --to DIR    # on a machine that has prepared them
    speccond data unpack DIR                            # on the other one, into $SPECCOND_DATA

A machine with no network and no Debian package (a rented GPU, a cluster node) cannot obtain the raw
files, but it can take the cache itself: ``DIR/NAME.safetensors.xz`` is the prepared arrays file
compressed (fashion-mnist 55 MB -> 26 MB, cifar10 31 MB -> 23 MB), and ``DIR/manifest.json`` records
each file's size and SHA-256 before and after compression. ``unpack`` checks both, writes through a
partial file and a rename, and the loader then verifies the arrays against the checksum the cache
records (``speccond.data.store``), so a damaged pack is refused, never trained on.

Every registered dataset packs the same way, generated ones too (listops, pathfinder, fashion-scenes, and
a dataset a task brings itself, such as associative-recall, passed in ``own``): a generated cache is pinned
by its ``generated_sha256``, so the packed arrays are exactly what the other machine would generate, and it
loads them instead of generating again (listops takes about 2 minutes on one core; fashion-scenes needs
Fashion-MNIST's raw files). Every name is checked before anything is written: an unknown one is a one-line
ValueError naming the nearest known datasets, and your own data (``imagefolder:DIR``, ``text:DIR?...``),
cached under other names, is refused: copy DIR to the other machine and prepare it there.
"""
from __future__ import annotations

import json
import lzma
import os
from pathlib import Path

import difflib
from collections.abc import Mapping

from speccond.checksum import file_sha256
from speccond.data.store import ARRAYS, DatasetSpec, data_dir

MANIFEST = "manifest.json"
CHUNK = 1 << 20


def specs(names: list[str], own: Mapping[str, DatasetSpec] | None = None) -> list[DatasetSpec]:
    """The dataset each name packs: one of ``own`` (the datasets tasks bring themselves), else one of
    speccond.data's; a one-line ValueError for the first name that is neither."""
    from speccond.data import DATASETS, image_folder, text_files

    known = {**DATASETS, **(own or {})}
    found = []
    for name in names:
        if image_folder.is_image_folder(name) or text_files.is_text_files(name):
            raise ValueError(f"{name!r} is your own data, which `speccond data pack` does not carry (its cache is "
                             "not under that name); copy DIR to the other machine and prepare it there")
        if name not in known:
            nearest = difflib.get_close_matches(name, list(known), n=3)
            near = f"nearest: {', '.join(nearest)}; " if nearest else ""
            raise ValueError(f"unknown dataset {name!r}; {near}known: {', '.join(sorted(known))}; pass their names")
        found.append(known[name])
    return found


def pack(names: list[str], to: Path, own: Mapping[str, DatasetSpec] | None = None) -> Path:
    """Compress each named dataset's arrays into ``to``, prepared (or generated) first if need be, and write the
    manifest; returns its path. ``own``: the datasets tasks bring themselves, by name (harness/tasks/registry.py's
    ``own_datasets``). Every name is checked (:func:`specs`) before anything is written."""
    from speccond.data.store import prepare

    chosen = specs(names, own)
    to.mkdir(parents=True, exist_ok=True)
    entries = {}
    for name, spec in zip(names, chosen):
        arrays = prepare(spec)  # verified (or rebuilt) before it is packed
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

