"""Obtaining, verifying and caching datasets: ``speccond data prepare NAME``.

A dataset names its raw files with their SHA-256 and the places to get them, in order (a local folder,
such as a Debian package's, or one named by an environment variable, then an official URL). ``prepare``
copies or downloads each file into ``<data dir>/<name>/raw``, refuses any whose checksum differs, parses
them, and writes the arrays to ``<data dir>/<name>/arrays.safetensors`` atomically (a temporary file,
then a rename), so an interrupted run never leaves a half-written cache. The data dir is ``$SPECCOND_DATA`` or
``~/.cache/speccond/data``.

The arrays file records the dataset's ``format`` (``DatasetSpec.format_version``, bumped whenever its
parse changes what is stored) and the SHA-256 of its arrays (``arrays_sha256``: keys, dtypes, shapes and
bytes). ``load`` refuses a cache of another format, and a damaged one (truncated, unreadable, or arrays
whose SHA-256 differs from the recorded one), naming the file and the command that rebuilds it;
``prepare`` verifies a cache the same way and rebuilds a stale or damaged one (or one written before
checksums were recorded) from the raw files it already holds.
"""
from __future__ import annotations

import logging
import os
import shutil
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from speccond.checksum import file_sha256, tensors_sha256
from speccond.data.shared import shared_data_dir

log = logging.getLogger(__name__)
ARRAYS = "arrays.safetensors"


@dataclass(frozen=True)
class Source:
    """Where raw files can be had: a local folder, a URL prefix (``<prefix>/<file name>`` is fetched),
    ``$VAR``: the folder named by the environment variable VAR, or ``shared:PATH``: PATH inside the shared
    data folder (data/shared.py), each read when a file is fetched."""

    description: str
    location: str

    def resolve(self) -> str | None:
        """The folder or URL prefix; None for a ``$VAR`` source whose variable is unset or empty, or a
        ``shared:`` one when there is no shared data folder."""
        if self.location.startswith("$"):
            return os.environ.get(self.location[1:]) or None
        if self.location.startswith("shared:"):
            folder = shared_data_dir()
            return str(folder / self.location[len("shared:"):]) if folder is not None else None
        return self.location

    def is_local(self) -> bool:
        """Whether this source names a folder here (set, or the shared folder present): then its files are read
        from it or refused, never replaced by a dataset's online path. A URL is not local."""
        location = self.resolve()
        return location is not None and "://" not in location


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    files: dict[str, tuple[str, str]]  # key -> (file name, sha256)
    sources: tuple[Source, ...]
    parse: Callable[[dict[str, Path]], dict[str, torch.Tensor]]
    hint: str  # how to make a source available, shown when none is
    format_version: int = 1  # of the stored arrays; bump when parse changes them (stale caches are rebuilt)
    image_shape: tuple[int, int, int] | None = None  # (C, H, W) of every image; None if not images
    classes: tuple[str, ...] = ()  # class names, in label order
    sequence_shape: tuple[int, int] | None = None  # token datasets: (tokens per example, vocabulary size)
    # For a generated dataset (no files: ``parse({})`` generates it from a fixed seed), or one whose parse
    # learns something from its files (language.py's tokenizer): the SHA-256 of the arrays it must produce
    # (see arrays_sha256), so a generator or a library that drifts is caught, not cached.
    generated_sha256: str | None = None
    # The arrays built another way when there is no shared data folder (data/shared.py), such as through
    # ``datasets.load_dataset`` online; never used when the folder is there but lacks or damages a file (that
    # is refused, naming it). Its arrays are not checked against generated_sha256 (another copy of the data).
    # ``online_description`` says what it reads (``speccond data list``).
    online: Callable[[], dict[str, torch.Tensor]] | None = None
    online_description: str = ""


def data_dir() -> Path:
    """$SPECCOND_DATA, or ~/.cache/speccond/data."""
    return Path(os.environ.get("SPECCOND_DATA") or Path.home() / ".cache" / "speccond" / "data")


sha256 = file_sha256  # of a raw file
arrays_sha256 = tensors_sha256  # of a dataset's arrays: each key, dtype, shape and raw bytes, in key order


def prepare(spec: DatasetSpec, sources: tuple[Source, ...] | None = None) -> Path:
    """Obtain, verify, parse and cache ``spec``; return the arrays file. Idempotent."""
    target = data_dir() / spec.name
    arrays = target / ARRAYS
    if arrays.is_file():
        try:
            found = _format(arrays)
            if found == spec.format_version and _verified(spec, arrays) is not None:
                return arrays
            if found == spec.format_version:
                log.info("rebuilding %s: written before caches recorded a checksum", arrays)
            else:
                log.info("rebuilding %s: the cache has format %s, this version writes %s", arrays, found, spec.format_version)
        except DamagedCache as damage:
            log.warning("rebuilding %s: %s", arrays, damage.reason)
        arrays.unlink()
    raw = target / "raw"
    sources = sources or spec.sources
    online = spec.online is not None and not any(source.is_local() for source in sources)
    if online:
        log.info("%s: no local source here (no shared data folder); reading %s", spec.name, spec.online_description)
        try:
            tensors = {k: v.contiguous() for k, v in spec.online().items()}
        except (ImportError, OSError, ConnectionError) as error:
            raise FileNotFoundError(f"could not obtain dataset {spec.name!r}: there is no shared data folder, and "
                                    f"{spec.online_description} failed: {error}\nTo fix: {spec.hint}") from None
        target.mkdir(parents=True, exist_ok=True)
    else:
        raw.mkdir(parents=True, exist_ok=True)
        files = {key: _obtain(spec, name, digest, raw, sources) for key, (name, digest) in spec.files.items()}
        tensors = {k: v.contiguous() for k, v in spec.parse(files).items()}
    if spec.generated_sha256 is not None and not online and arrays_sha256(tensors) != spec.generated_sha256:
        raise ValueError(
            f"the generator of dataset {spec.name!r} produced arrays with SHA-256 {arrays_sha256(tensors)}, expected "
            f"{spec.generated_sha256}: this speccond or its libraries generate different data; nothing was cached"
        )
    if spec.image_shape is not None:
        for key in ("train_images", "test_images"):
            assert tensors[key].shape[1:] == spec.image_shape, (key, tensors[key].shape, spec.image_shape)
    from safetensors.torch import save_file

    partial = arrays.with_name(f"{arrays.name}.{os.getpid()}.partial")  # this process's own, as in _obtain
    metadata = {"dataset": spec.name, "format": str(spec.format_version), "sha256": arrays_sha256(tensors),
                "source": "online" if online else "files"}
    save_file(tensors, str(partial), metadata=metadata)
    os.replace(partial, arrays)
    log.info("prepared %s: %s", spec.name, {k: tuple(v.shape) for k, v in tensors.items()})
    return arrays


def source_of(spec: DatasetSpec) -> str:
    """How the cached arrays of ``spec`` were made: "files" (checked raw files), "online" (``spec.online``), or ""
    for caches written before they said."""
    return _metadata(data_dir() / spec.name / ARRAYS).get("source", "")


def load(spec: DatasetSpec) -> dict[str, torch.Tensor]:
    """The cached arrays of a prepared dataset; a clear error naming the command when it is missing."""
    arrays = data_dir() / spec.name / ARRAYS
    if not arrays.is_file():
        raise FileNotFoundError(
            f"dataset {spec.name!r} is not prepared in {data_dir()}; run `speccond data prepare {spec.name}` "
            f"(set SPECCOND_DATA to use another folder)"
        )
    try:
        found = _format(arrays)
        if found != spec.format_version:
            raise ValueError(
                f"the cached dataset {spec.name!r} in {arrays} has format {found}, but this version of speccond reads "
                f"format {spec.format_version} (the cache was written by another version); run "
                f"`speccond data prepare {spec.name}` to rebuild it"
            )
        tensors = _verified(spec, arrays)
    except DamagedCache as damage:
        raise ValueError(
            f"the cached dataset {spec.name!r} in {arrays} is damaged ({damage.reason}); run "
            f"`speccond data prepare {spec.name}`, which deletes and rebuilds it"
        ) from None
    if tensors is None:
        log.warning(
            "the cached dataset %r in %s was written before caches recorded a checksum, so it is unverified; "
            "`speccond data prepare %s` rebuilds it with one", spec.name, arrays, spec.name,
        )
        from safetensors.torch import load_file

        tensors = load_file(str(arrays))
    return tensors


class DamagedCache(Exception):
    """An arrays file that cannot be read, or whose arrays differ from the checksum it records."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _verified(spec: DatasetSpec, arrays: Path) -> dict[str, torch.Tensor] | None:
    """The arrays of a cache whose recorded SHA-256 they match; None for a cache that records none (written
    before checksums). Raises DamagedCache when the file cannot be read or its arrays differ."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        recorded = _metadata(arrays).get("sha256")
        if recorded is None:
            return None
        tensors = load_file(str(arrays))
    except (SafetensorError, OSError) as error:
        raise DamagedCache(f"unreadable: {error}") from None
    actual = arrays_sha256(tensors)
    if actual != recorded:
        raise DamagedCache(f"its arrays have SHA-256 {actual[:12]}..., the cache recorded {recorded[:12]}...")
    return tensors


def _format(arrays: Path) -> int:
    """The format recorded in an arrays file; 1 for caches written before formats were recorded."""
    return int(_metadata(arrays).get("format", 1))


def _metadata(arrays: Path) -> dict[str, str]:
    """The metadata of an arrays file; raises DamagedCache when its header cannot be read."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(arrays), framework="pt") as handle:
            return dict(handle.metadata() or {})
    except (SafetensorError, OSError) as error:
        raise DamagedCache(f"unreadable: {error}") from None


def _obtain(spec: DatasetSpec, name: str, digest: str, raw: Path, sources: tuple[Source, ...]) -> Path:
    destination = raw / name  # a name may hold a folder ("sst2/train.tsv"), kept under raw
    if destination.is_file() and sha256(destination) == digest:
        return destination
    destination.parent.mkdir(parents=True, exist_ok=True)
    problems = []
    for source in sources:
        location = source.resolve()
        if location is None:
            problems.append(f"{source.description}: {source.location} is not set")
            continue
        # this process's own partial file: two processes preparing the same dataset at once (the language
        # protocol's two pre-training chains) each download to their own and replace the destination atomically
        partial = destination.with_name(f"{destination.name}.{os.getpid()}.partial")
        try:
            if location.startswith(("http://", "https://")):
                with urllib.request.urlopen(f"{location}/{name}", timeout=60) as response, partial.open("wb") as out:
                    shutil.copyfileobj(response, out)
            else:
                local = Path(location) / name
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
            problems.append(f"{source.description}: {Path(location) / name if '://' not in location else name} has "
                            f"SHA-256 {actual}, expected {digest} (corrupt or a different release)")
            continue
        os.replace(partial, destination)
        return destination
    raise FileNotFoundError(
        f"could not obtain {name} for dataset {spec.name!r}:\n  " + "\n  ".join(problems) + f"\nTo fix: {spec.hint}"
    )
