"""Obtaining, verifying and caching datasets: ``speccond data prepare NAME``.

A dataset names its raw files with their SHA-256 and the places to get them, in order (a local folder,
such as a Debian package's, then an official URL). ``prepare`` copies or downloads each file into
``<data dir>/<name>/raw``, refuses any whose checksum differs, parses them, and writes the arrays to
``<data dir>/<name>/arrays.safetensors`` atomically (a temporary file, then a rename), so an
interrupted run never leaves a half-written cache. The data dir is ``$SPECCOND_DATA`` or
``~/.cache/speccond/data``.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

log = logging.getLogger(__name__)
ARRAYS = "arrays.safetensors"


@dataclass(frozen=True)
class Source:
    """Where raw files can be had: a local folder or a URL prefix."""

    description: str
    location: str

    @property
    def is_url(self) -> bool:
        return self.location.startswith(("http://", "https://"))


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    files: dict[str, tuple[str, str]]  # key -> (file name, sha256)
    sources: tuple[Source, ...]
    parse: Callable[[dict[str, Path]], dict[str, torch.Tensor]]
    hint: str  # how to make a source available, shown when none is


def data_dir() -> Path:
    """$SPECCOND_DATA, or ~/.cache/speccond/data."""
    return Path(os.environ.get("SPECCOND_DATA") or Path.home() / ".cache" / "speccond" / "data")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def prepare(spec: DatasetSpec, sources: tuple[Source, ...] | None = None) -> Path:
    """Obtain, verify, parse and cache ``spec``; return the arrays file. Idempotent."""
    target = data_dir() / spec.name
    arrays = target / ARRAYS
    if arrays.is_file():
        return arrays
    raw = target / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    files = {key: _obtain(spec, name, digest, raw, sources or spec.sources) for key, (name, digest) in spec.files.items()}
    tensors = {k: v.contiguous() for k, v in spec.parse(files).items()}
    from safetensors.torch import save_file

    partial = arrays.with_suffix(".partial")
    save_file(tensors, str(partial), metadata={"dataset": spec.name})
    os.replace(partial, arrays)
    log.info("prepared %s: %s", spec.name, {k: tuple(v.shape) for k, v in tensors.items()})
    return arrays


def load(spec: DatasetSpec) -> dict[str, torch.Tensor]:
    """The cached arrays of a prepared dataset; a clear error naming the command when it is missing."""
    arrays = data_dir() / spec.name / ARRAYS
    if not arrays.is_file():
        raise FileNotFoundError(
            f"dataset {spec.name!r} is not prepared in {data_dir()}; run `speccond data prepare {spec.name}` "
            f"(set SPECCOND_DATA to use another folder)"
        )
    from safetensors.torch import load_file

    return load_file(str(arrays))


def _obtain(spec: DatasetSpec, name: str, digest: str, raw: Path, sources: tuple[Source, ...]) -> Path:
    destination = raw / name
    if destination.is_file() and sha256(destination) == digest:
        return destination
    problems = []
    for source in sources:
        partial = destination.with_suffix(destination.suffix + ".partial")
        try:
            if source.is_url:
                with urllib.request.urlopen(f"{source.location}/{name}", timeout=60) as response, partial.open("wb") as out:
                    shutil.copyfileobj(response, out)
            else:
                local = Path(source.location) / name
                if not local.is_file():
                    problems.append(f"{source.description}: no {local}")
                    continue
                shutil.copyfile(local, partial)
        except OSError as error:
            problems.append(f"{source.description}: {error}")
            partial.unlink(missing_ok=True)
            continue
        actual = sha256(partial)
        if actual != digest:
            partial.unlink()
            problems.append(f"{source.description}: {name} has SHA-256 {actual}, expected {digest} (corrupt or a different release)")
            continue
        os.replace(partial, destination)
        return destination
    raise FileNotFoundError(
        f"could not obtain {name} for dataset {spec.name!r}:\n  " + "\n  ".join(problems) + f"\nTo fix: {spec.hint}"
    )
