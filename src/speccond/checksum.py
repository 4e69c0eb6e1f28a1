"""SHA-256 of files and of named tensors: what dataset caches and saved checkpoints record, and check on load.

safetensors keeps no checksum of its own, so a flipped byte in a tensor's data loads without a word (an
exponent bit turns a weight into -1e37). ``tensors_sha256`` digests each tensor's name, dtype, shape and raw
bytes, in name order, so it does not depend on how a file lays the tensors out.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Mapping

import torch


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tensors_sha256(tensors: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 over named tensors in name order: each name, dtype, shape and raw bytes (CPU tensors)."""
    digest = hashlib.sha256()
    for key in sorted(tensors):
        tensor = tensors[key].detach().contiguous()
        digest.update(f"{key}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()
