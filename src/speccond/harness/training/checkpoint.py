"""Checkpoints that survive a crash at any moment and refuse to load when damaged.

Layout inside a run directory::

    checkpoints/step-000300/model.safetensors   model state_dict (weights and buffers)
    checkpoints/step-000300/state.pt            optimiser state (data order and augmentation derive from the step): torch.save of plain
                                                containers, loadable with torch.load(weights_only=True)
    checkpoints/step-000300/manifest.json       step, epoch and the SHA-256 of both files
    checkpoints/LATEST                          the name of the newest complete checkpoint

A checkpoint is written into a temporary folder, renamed into place, and only then named in LATEST
(itself replaced atomically), so a kill leaves either the previous checkpoint or the new one. A second
save of a step whose folder is complete writes nothing (the step's weights are the same: data order
derives from the step); a folder of that name that is incomplete is moved aside, replaced, and only then
deleted, so no moment leaves a step without a complete copy on disk (docs/RELIABILITY.md).

Reading back, :func:`latest` is the folder LATEST names when it is complete (its manifest readable),
else the newest complete one, with a warning; :func:`load` raises :class:`DamagedCheckpoint` when a
checksum differs, and run_dir.resume then falls back to the newest checkpoint that loads.
"""
from __future__ import annotations

import json
import logging
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
log = logging.getLogger(__name__)


class DamagedCheckpoint(ValueError):
    """A checkpoint whose manifest is unreadable or whose files differ from their recorded SHA-256."""


def save(run_dir: Path, step: int, epoch: int, model: nn.Module, state: dict[str, Any]) -> Path:
    """Write checkpoint ``step`` atomically and point LATEST at it; return its folder. A step already saved
    complete is not written again (a Ctrl-C on a step that was also due for a checkpoint saves it twice)."""
    from safetensors.torch import save_file

    root = Path(run_dir) / FOLDER
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:06d}"
    final = root / name
    if _intact(final, step):
        _write_atomically(root / "LATEST", name)
        return final
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
    if final.exists():  # damaged (an intact one returned above): moved aside, deleted once replaced
        aside = root / f".{name}.old"
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(final, aside)
        os.replace(staging, final)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(staging, final)
    _write_atomically(root / "LATEST", name)
    older = sorted(p for p in root.glob("step-*") if p.name != name)
    for stale in older[: max(0, len(older) - (KEEP - 1))]:
        shutil.rmtree(stale, ignore_errors=True)
    return final


def latest(run_dir: Path) -> Path | None:
    """The newest complete checkpoint folder of a run, or None when it has none.

    That is the folder LATEST names; when LATEST is missing or unreadable (deleted, or a kill between a
    first checkpoint's rename and LATEST's) or names a folder that is missing or whose manifest is
    unreadable, the newest complete ``step-*`` folder instead, with a warning naming both."""
    pointer = Path(run_dir) / FOLDER / "LATEST"
    try:
        named = pointer.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        named, problem = "", f"{pointer} is missing"
    except (OSError, UnicodeDecodeError) as error:
        named, problem = "", f"{pointer} is unreadable ({type(error).__name__}: {error})"
    else:
        problem = f"{pointer} names {named!r}, which is missing or incomplete"
    if named and _complete_step(pointer.parent / named) is not None:
        return pointer.parent / named
    fallback = next(iter(complete(run_dir)), None)
    if fallback is None and not pointer.is_file():  # no checkpoint yet, and none named
        return None
    log.warning("%s; %s", problem, f"using {fallback.name}, the newest complete checkpoint" if fallback is not None
                else "no complete checkpoint is left, so the run starts again from step 0")
    return fallback


def complete(run_dir: Path) -> list[Path]:
    """The run's complete checkpoint folders (manifest readable), newest first."""
    folders = sorted(Path(run_dir, FOLDER).glob("step-*"), reverse=True)
    return [folder for folder in folders if _complete_step(folder) is not None]


def _intact(folder: Path, step: int) -> bool:
    """Whether ``folder`` holds checkpoint ``step`` with both files matching their manifest's SHA-256."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        return manifest["step"] == step and all(
            (folder / file).is_file() and sha256(folder / file) == manifest[key]
            for key, file in (("model_sha256", "model.safetensors"), ("state_sha256", "state.pt")))
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _complete_step(folder: Path) -> int | None:
    """The step of the checkpoint in ``folder`` when its manifest is readable (written last), else None."""
    try:
        return manifest_step(folder)
    except ValueError:
        return None


def manifest_step(folder: Path) -> int:
    """The step of the checkpoint in ``folder``, from its manifest."""
    path = Path(folder) / "manifest.json"
    try:
        return int(json.loads(path.read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise DamagedCheckpoint(f"{path}: unreadable checkpoint manifest ({error}); expected JSON with a \"step\"") from None


def load(folder: Path, model: nn.Module) -> tuple[dict, dict[str, Any]]:
    """Verify a checkpoint's checksums, load its weights into ``model`` (strict) and return
    (manifest, state). A damaged checkpoint raises DamagedCheckpoint, a mismatched one ValueError; either
    changes nothing."""
    from safetensors.torch import load_file

    manifest_path = Path(folder) / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DamagedCheckpoint(f"{manifest_path}: unreadable checkpoint manifest ({error})") from None
    if not isinstance(manifest, dict):
        raise DamagedCheckpoint(f"{manifest_path}: not a checkpoint manifest (a JSON object with step and SHA-256s)")
    for key, file in (("model_sha256", "model.safetensors"), ("state_sha256", "state.pt")):
        path = Path(folder) / file
        if not path.is_file() or sha256(path) != manifest.get(key):
            raise DamagedCheckpoint(f"{path}: missing or corrupt (SHA-256 differs from {manifest_path}); refusing to resume")
    weights = load_file(str(Path(folder) / "model.safetensors"))
    # A checkpoint written before speccond saved its markers (speccond.core.correction.MARKER) has none: accepted.
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


def load_weights_file(model: nn.Module, path: str | Path) -> None:
    """Load one weight file into ``model`` (strict), checked first: a run's checkpoint file against the SHA-256
    its manifest.json beside it records, any other against the one its metadata records
    (speccond.save_conditioned; a file without one loads with a logged note that it is unverified). A damaged,
    truncated or mismatched file is a ValueError naming it and what to do; ``model`` is then left as it was."""
    from speccond.checkpoint_files import RESTORE, read_verified

    path = Path(path)
    manifest = path.parent / "manifest.json"
    if path.name == "model.safetensors" and manifest.is_file():  # a run's checkpoint (save, above)
        try:
            recorded = json.loads(manifest.read_text())["model_sha256"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{manifest}: unreadable checkpoint manifest ({error}); expected JSON with a "
                             "\"model_sha256\"") from None
        if not path.is_file() or sha256(path) != recorded:
            raise ValueError(f"{path} is damaged: its SHA-256 differs from the one {manifest} records; {RESTORE}")
    weights = read_verified(path)
    missing, extra = missing_and_unexpected(model, weights)
    expected = model.state_dict()
    shapes = [f"{key} {tuple(value.shape)} (the model's {tuple(expected[key].shape)})" for key, value in weights.items()
              if key in expected and value.shape != expected[key].shape]
    if missing or extra or shapes:
        advice = mismatch_advice(missing, extra) or "build the model with the settings it was saved with"
        raise ValueError(f"{path} does not fit this model (missing {missing[:3]}, unexpected {extra[:3]}, other shapes "
                         f"{shapes[:3]}); {advice}")
    model.load_state_dict(weights, strict=False)  # every key matched above, a file without markers aside
