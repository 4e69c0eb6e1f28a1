"""What a checkpoint on disk holds, read without loading it: its safetensors files (a folder, sharded or
not, or a Hub id in the local cache), its keys, the speccond markers and the weights the weight
backend moved; and the guard speccond.apply runs against transformers' from_pretrained of a conditioned
save (:func:`refuse_partly_loaded`). speccond.checkpoint loads checkpoints; this module only reads them,
and imports nothing of the conditioning itself, so speccond.apply can call it.
"""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Mapping, Optional

import torch
from torch import nn

from speccond.checksum import file_sha256, tensors_sha256
from speccond.core.backends import CHILD_NAME
from speccond.core.correction import MARKER

log = logging.getLogger(__name__)

WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
LOADED = "_speccond_loaded"  # True on a model whose every weight load_conditioned loaded: the guard passes it
WEIGHT_MARKER = re.compile(rf"^(?:(.*)\.)?parametrizations\.([^.]+)\.\d+\.{MARKER}$")
ACTIVATION_MARKER = re.compile(rf"^(?:(.*)\.)?{CHILD_NAME}\.{MARKER}$")
MOVED_WEIGHT = re.compile(r"^(?:(.*)\.)?parametrizations\.([^.]+)\.original$")
TENSORS_SHA256 = "speccond_sha256"  # a .safetensors file's metadata key: checksum.tensors_sha256 of its tensors
RESTORE = "restore it from a copy or save the model again"  # what to do with a damaged checkpoint file


def refuse_partly_loaded(model: nn.Module) -> None:
    """Raise ValueError when ``model`` holds the weights of a conditioned checkpoint that transformers'
    ``from_pretrained`` loaded into a plain model: with the weight backend its q, k, v were saved as
    ``<proj>.parametrizations.weight.original`` and initialised at random; with the activation backend the
    saved corrections (and the markers) were dropped. For ``speccond.apply`` to call before it conditions.

    It reads ``model.config._name_or_path`` (a local folder, or a Hub id in the local Hugging Face cache),
    the checkpoint's key names, and one weight matrix the checkpoint and the model share, to tell a model
    loaded from it from one only built from its config.json (the documented reload route, which passes).
    A model loaded by :func:`load_conditioned` passes; so does anything that is not a transformers model.
    """
    source = getattr(getattr(model, "config", None), "_name_or_path", None)
    if not isinstance(source, str) or not source or getattr(model, LOADED, False):
        return
    files = checkpoint_files(source)
    if not files:
        return
    keys = keys_of(files)
    own = model.state_dict(keep_vars=True)
    rename = aligner(keys, own)
    moved = [own_key for own_key in (rename(moved_to(k)) for k in keys if MOVED_WEIGHT.match(k)) if own_key in own]
    markers = [k for k in keys if marker_site(k) is not None]
    if not moved and not markers:
        return
    if not holds_weights_of(model, own, files, keys, rename):
        return  # built from the config only: its weights are its own
    if moved:
        what = (
            f"its q/k/v weights ({', '.join(moved[:3])}{', ...' if len(moved) > 3 else ''}) were saved as "
            "<proj>.parametrizations.weight.original, so transformers initialised them at random"
        )
    else:
        what = "transformers dropped its saved corrections (the speccond markers and SVD / lam='auto' buffers)"
    raise ValueError(
        f"{type(model).__name__} was loaded with transformers' from_pretrained from {source}, a checkpoint of a "
        f"spectrally conditioned model: {what}. Load it with speccond.from_pretrained({type(model).__name__}, "
        f"{source!r}), which conditions the model as it was saved and loads every weight exactly (or "
        f"speccond.load_conditioned(model, {source!r}) into this model)"
    )


def marker_site(key: str) -> Optional[tuple[str, str]]:
    """(qualified parameter name, backend) of a marker key, or None when ``key`` is not one."""
    match = WEIGHT_MARKER.match(key)
    if match:
        module, param = match.group(1), match.group(2)
        return (f"{module}.{param}" if module else param), "weight"
    match = ACTIVATION_MARKER.match(key)
    if match:
        return (f"{match.group(1)}.weight" if match.group(1) else "weight"), "activation"
    return None


def holds_conditioned_keys(keys) -> bool:
    """Whether any of ``keys`` exists only in a conditioned state dict (a marker, or W moved by parametrize)."""
    return any(marker_site(k) or MOVED_WEIGHT.match(k) for k in keys)


def moved_to(key: str) -> str:
    """Where the plain model keeps what the weight backend saved under ``...parametrizations.P.original``."""
    module, param = MOVED_WEIGHT.match(key).groups()
    return f"{module}.{param}" if module else param


def checkpoint_files(source: str) -> list[Path]:
    """The safetensors files of a checkpoint folder, or of a Hub id found in the local cache ([] if none)."""
    folder = Path(source)
    if folder.is_dir():
        index = folder / WEIGHTS_INDEX
        if index.is_file():
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            return [folder / shard for shard in shards]
        return [folder / WEIGHTS] if (folder / WEIGHTS).is_file() else []
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return []
    try:
        single = try_to_load_from_cache(source, WEIGHTS)
        if isinstance(single, str):
            return [Path(single)]
        index = try_to_load_from_cache(source, WEIGHTS_INDEX)
        if isinstance(index, str):
            shards = sorted(set(json.loads(Path(index).read_text())["weight_map"].values()))
            paths = [try_to_load_from_cache(source, shard) for shard in shards]
            return [Path(p) for p in paths if isinstance(p, str)]
    except (ValueError, OSError):  # not a valid repo id
        return []
    return []


def keys_of(files: list[Path]) -> list[str]:
    from safetensors import safe_open

    keys = []
    for file in files:
        with safe_open(str(file), "pt") as handle:
            keys.extend(handle.keys())
    return keys


def aligner(keys: list[str], own: Mapping[str, torch.Tensor]):
    """Checkpoint key -> model key: as is, or with the base model prefix added or removed (a task model's
    checkpoint loaded into its base model, or the other way round), whichever shares the most keys."""
    prefixes = {k.split(".", 1)[0] + "." for k in list(keys) + list(own) if "." in k}
    candidates = [lambda k: k]
    for prefix in prefixes:
        candidates.append(lambda k, p=prefix: k[len(p):] if k.startswith(p) else k)
        candidates.append(lambda k, p=prefix: p + k)
    return max(candidates, key=lambda rename: sum(rename(k) in own for k in keys))


def holds_weights_of(model, own, files: list[Path], keys: list[str], rename) -> bool:
    """Whether ``model`` holds the checkpoint's weights: a shared floating matrix of at least two rows
    (initialised at random, so equal only if loaded from it) is equal. Constant tensors prove nothing."""
    from safetensors import safe_open

    for file in files:
        with safe_open(str(file), "pt") as handle:
            for key in handle.keys():
                mine = own.get(rename(key))
                if mine is None or marker_site(key) or MOVED_WEIGHT.match(key) or CHILD_NAME in key:
                    continue
                if mine.dim() != 2 or not mine.is_floating_point() or mine.shape[0] < 2:
                    continue
                saved = handle.get_tensor(key)
                if saved.shape != mine.shape:
                    return False
                return torch.equal(saved.to(mine.dtype), mine.detach().cpu())
    return False


# -- checksums ------------------------------------------------------------------------------------------
def read_verified(path: Path, checked: bool = False) -> dict[str, torch.Tensor]:
    """The tensors of one .safetensors file, checked against the SHA-256 its metadata records
    (:data:`TENSORS_SHA256`, written by speccond.save_conditioned). A file without one (written before, or
    by another saver) is read with a logged note that it is unverified, unless ``checked``: its folder's
    speccond.json compared its bytes already, or said it could not (:func:`check_files`). Raises ValueError, naming
    the file and what to do, when it cannot be read or its tensors differ from the recorded checksum."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file

    try:
        with safe_open(str(path), framework="pt") as handle:
            recorded = (handle.metadata() or {}).get(TENSORS_SHA256)
        tensors = load_file(str(path))
    except (SafetensorError, OSError) as error:
        raise ValueError(f"{path} is damaged: unreadable as safetensors ({error}); {RESTORE}") from None
    if recorded is None:
        if not checked:
            log.warning("%s records no checksum (written before speccond saved one, or by another saver): loaded "
                        "unverified", path)
        return tensors
    actual = tensors_sha256(tensors)
    if actual != recorded:
        raise ValueError(
            f"{path} is damaged: its tensors' SHA-256 is {actual[:16]}..., the file recorded {recorded[:16]}... "
            f"when it was saved; {RESTORE}"
        )
    return tensors


def files_sha256(files: list[Path]) -> dict[str, str]:
    """SHA-256 of each weight file of a checkpoint folder, by file name: what speccond.json records."""
    return {file.name: file_sha256(file) for file in files}


def check_files(files: list[Path], recorded: Optional[Mapping[str, str]], record: Path) -> None:
    """Compare each weight file with the SHA-256 ``record`` (a speccond.json) holds for it; None: the folder
    was saved without checksums, and is read with a logged note. Raises ValueError naming a file that differs."""
    if recorded is None:
        log.warning("%s records no checksums of the weight files (saved before speccond did): loaded unverified", record)
        return
    for file in files:
        expected = recorded.get(file.name)
        if expected is None:
            raise ValueError(f"{file} is not among the weight files {record} lists; {RESTORE}")
        actual = file_sha256(file)
        if actual != expected:
            raise ValueError(
                f"{file} is damaged: its SHA-256 is {actual[:16]}..., {record.name} recorded {expected[:16]}... "
                f"when it was saved; {RESTORE}"
            )
