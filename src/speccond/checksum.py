"""SHA-256 of files and of named tensors: what dataset caches and saved checkpoints record, and check on load.

safetensors keeps no checksum of its own, so a flipped byte in a tensor's data loads without a word (an
exponent bit turns a weight into -1e37). ``tensors_sha256`` digests each tensor's name, dtype, shape and raw
bytes, in name order, so it does not depend on how a file lays the tensors out. A numpy array among them (a
memory-mapped file too large to hold) is read in blocks of rows and digests as the tensor of its bytes would.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Union

import torch

if TYPE_CHECKING:
    import numpy

CHUNK_BYTES = 1 << 24  # how much of a numpy array tensors_sha256 reads at once


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tensors_sha256(tensors: Mapping[str, Union[torch.Tensor, "numpy.ndarray"]]) -> str:
    """SHA-256 over named tensors in name order: each name, dtype, shape and raw bytes (CPU tensors; a numpy
    array, memory-mapped or not, digests as ``torch.from_numpy`` of it would, read a block of rows at a time)."""
    digest = hashlib.sha256()
    for key in sorted(tensors):
        if not isinstance(tensors[key], torch.Tensor):  # a numpy array
            _digest_array(digest, key, tensors[key])
            continue
        tensor = tensors[key].detach().contiguous()
        digest.update(f"{key}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def _digest_array(digest, key: str, array: "numpy.ndarray") -> None:
    """What tensors_sha256 digests for ``torch.from_numpy(array)``, without reading the whole array at once."""
    import numpy

    dtype = torch.from_numpy(numpy.empty(0, array.dtype)).dtype
    digest.update(f"{key}|{dtype}|{tuple(array.shape)}|".encode())
    rows = max(1, CHUNK_BYTES // max(1, array[:1].nbytes)) if array.ndim else 1
    for start in range(0, array.shape[0] if array.ndim else 1, rows):
        digest.update(numpy.ascontiguousarray(array[start : start + rows] if array.ndim else array).tobytes())
