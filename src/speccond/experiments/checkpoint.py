"""Checkpoints that survive a crash at any moment and refuse to load when damaged.

Layout inside a run directory::

    checkpoints/step-000300/model.safetensors   model state_dict (weights and buffers)
    checkpoints/step-000300/state.pt            optimiser state (data order and augmentation derive from the step): torch.save of plain
                                                containers, loadable with torch.load(weights_only=True)
    checkpoints/step-000300/manifest.json       step, epoch and the SHA-256 of both files
    checkpoints/LATEST                          the name of the newest complete checkpoint

A checkpoint is written into a temporary folder, renamed into place, and only then named in LATEST
(itself replaced atomically), so a kill leaves either the previous checkpoint or the new one.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from speccond.checkpoint import mismatch_advice, missing_and_unexpected
from speccond.data.store import sha256

FOLDER = "checkpoints"
KEEP = 2  # complete checkpoints kept on disk


def save(run_dir: Path, step: int, epoch: int, model: nn.Module, state: dict[str, Any]) -> Path:
    """Write checkpoint ``step`` atomically and point LATEST at it; return its folder."""
    from safetensors.torch import save_file

    root = Path(run_dir) / FOLDER
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:06d}"
    staging = root / f".{name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    weights = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in model.state_dict().items()}
    save_file(weights, str(staging / "model.safetensors"))
    torch.save(state, staging / "state.pt")
    manifest = {
        "step": step,
        "epoch": epoch,
        "model_sha256": sha256(staging / "model.safetensors"),
        "state_sha256": sha256(staging / "state.pt"),
    }
    (staging / "manifest.json").write_text(json.dumps(manifest, indent=2))
    final = root / name
    shutil.rmtree(final, ignore_errors=True)
    os.replace(staging, final)
    _write_atomically(root / "LATEST", name)
    older = sorted(p for p in root.glob("step-*") if p.name != name)
    for stale in older[: max(0, len(older) - (KEEP - 1))]:
        shutil.rmtree(stale, ignore_errors=True)
    return final


def latest(run_dir: Path) -> Path | None:
    """The newest complete checkpoint folder of a run, or None."""
    pointer = Path(run_dir) / FOLDER / "LATEST"
    if not pointer.is_file():
        return None
    folder = pointer.parent / pointer.read_text().strip()
    if not folder.is_dir():
        raise ValueError(f"{pointer} names {folder.name}, which is missing; the run directory was damaged")
    return folder


def manifest_step(folder: Path) -> int:
    """The step of the checkpoint in ``folder``, from its manifest."""
    path = Path(folder) / "manifest.json"
    try:
        return int(json.loads(path.read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: unreadable checkpoint manifest ({error}); expected JSON with a \"step\"") from None


def load(folder: Path, model: nn.Module) -> tuple[dict, dict[str, Any]]:
    """Verify a checkpoint's checksums, load its weights into ``model`` (strict) and return
    (manifest, state). A damaged or mismatched checkpoint raises ValueError and changes nothing."""
    from safetensors.torch import load_file

    manifest_path = Path(folder) / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{manifest_path}: unreadable checkpoint manifest ({error})") from None
    for key, file in (("model_sha256", "model.safetensors"), ("state_sha256", "state.pt")):
        path = Path(folder) / file
        if not path.is_file() or sha256(path) != manifest.get(key):
            raise ValueError(f"{path}: missing or corrupt (SHA-256 differs from {manifest_path}); refusing to resume")
    weights = load_file(str(Path(folder) / "model.safetensors"))
    # A checkpoint written before speccond saved its markers (speccond.correction.MARKER) has none: accepted.
    missing, extra = missing_and_unexpected(model, weights)
    if missing or extra:
        advice = mismatch_advice(missing, extra) or "was it written with another config?"
        raise ValueError(
            f"{folder}: checkpoint does not match this model (missing {missing[:5]}, unexpected {extra[:5]}); {advice}"
        )
    model.load_state_dict(weights)
    state = torch.load(Path(folder) / "state.pt", weights_only=True, map_location="cpu")
    return manifest, state


def discard_latest(run_dir: Path) -> Path | None:
    """Drop the newest checkpoint (its weights were found bad) and point LATEST at the one before it.

    Returns the checkpoint now named in LATEST, or None when none is left."""
    root = Path(run_dir) / FOLDER
    newest = latest(run_dir)
    if newest is None:
        return None
    older = sorted(p for p in root.glob("step-*") if p.name < newest.name)
    if older:
        _write_atomically(root / "LATEST", older[-1].name)
    else:
        (root / "LATEST").unlink()
    shutil.rmtree(newest, ignore_errors=True)
    return older[-1] if older else None


def _write_atomically(path: Path, text: str) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)
