"""The vocabulary a prepared text cache stores, read and hashed, so that another text task can share it.

    text:/data/reviews?text=sentence&label=label&vocab_from=/cache/text/KEY/arrays.safetensors
    sha256(path) == sha256(other)       # the two caches give the same word the same token id

A prepared text cache (text_files.py, text_stream.py, language.py) stores the tokenizer it encoded with: the bytes
of its ``tokenizer.json`` (``tokenizer``, uint8) and, for a tokenizer read from a local folder, its id -> stored id
map (``tokenizer_ids``, int64). Those tensors are the vocabulary: ``vocab_from=PATH`` tokenises a text task with
them (text_files.given_tokenizer), its cache key holds their :func:`sha256`, and init_from compares a pre-training
run's with a fine-tune's by it (harness/training/pretrained.py). PATH is what ``speccond data prepare TASK``
prints: the cache's ``arrays.safetensors``, or the folder holding it (a streamed cache's folder).
"""
from __future__ import annotations

from pathlib import Path

import torch

KEYS = ("tokenizer", "tokenizer_ids")  # the tensors that make a cache's vocabulary


def _arrays(path: Path) -> Path:
    from speccond.data.store import ARRAYS

    return path / ARRAYS if path.is_dir() else path  # a cache's folder, or the file itself


def cache_file(name: str, value: str) -> Path:
    """The arrays file ``vocab_from=value`` names in task ``name`` (the file, or the folder holding it); a one-line
    ValueError when it is no prepared cache holding a tokenizer."""
    from safetensors import SafetensorError, safe_open

    path = _arrays(Path(value).expanduser().resolve())
    try:
        with safe_open(str(path), "pt") as handle:
            found = "tokenizer" in handle.keys()
    except (SafetensorError, OSError):
        found = False
    if not found:
        raise ValueError(f"{name!r}: vocab_from={value} is no prepared text cache (an arrays.safetensors holding a "
                         "tokenizer); give vocab_from=PATH, the path `speccond data prepare \"text:DIR?text=COLUMN&mlm=1\"` "
                         "prints for the texts whose vocabulary this task shares")
    return path


def stored(path: Path) -> dict[str, torch.Tensor]:
    """The vocabulary the arrays file (or the folder holding it) ``path`` stores: {"tokenizer": uint8 tokenizer.json
    bytes, and "tokenizer_ids": int64 (V,) for a local tokenizer}; {} when it stores none (an image dataset's)."""
    from safetensors import safe_open

    with safe_open(str(_arrays(Path(path))), "pt") as handle:
        return {key: handle.get_tensor(key) for key in KEYS if key in handle.keys()}


def sha256(path: Path) -> str:
    """SHA-256 of the vocabulary ``path`` stores (:func:`stored`; "" for none): two caches whose hashes agree
    tokenise alike (the same tokenizer.json bytes and id map)."""
    from speccond.checksum import tensors_sha256

    found = stored(path)
    return tensors_sha256(found) if found else ""
