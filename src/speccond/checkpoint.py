"""Saving and loading conditioned models: a checkpoint says that it is conditioned, and how.

Every SpectralCorrection saves a marker in the state dict (``<proj>.parametrizations.weight.0.speccond`` or
``<proj>.spectral_correction.speccond``: its description as JSON, ``speccond.core.correction``), so whatever
wrote the state dict (``model.save_pretrained``, ``Trainer.save_model``, safetensors' ``save_file``), the
checkpoint names every conditioned parameter, its backend and its correction. From that this module
rebuilds the conditioning and loads every tensor exactly:

    speccond.save_pretrained(model, directory)                  # model.save_pretrained + speccond.json
    model = speccond.from_pretrained(BertForSequenceClassification, directory)
    speccond.save_conditioned(model, "model.safetensors")        # any nn.Module: one file, checksummed
    speccond.load_conditioned(plain_model, "model.safetensors")  # any nn.Module: condition as saved, load

Loading conditions the plain model with a SpectralConfig (given, or speccond.json's, or inferred from the
markers), then checks the checkpoint against the model before it copies anything: the same conditioned
parameters with the same corrections, the same keys (tied weights, which transformers saves once,
excepted) and shapes. So a conditioned checkpoint is never loaded into a plain model, nor a plain one
into a conditioned model, without an error that names what differs.

transformers' own ``from_pretrained`` cannot load such a checkpoint: the stored W of the weight backend
sits under ``<proj>.parametrizations.weight.original``, which the plain model does not have, so it
initialises q, k, v at random (and drops the markers and saved corrections as unexpected keys).
:func:`speccond.checkpoint_files.refuse_partly_loaded` detects a model loaded that way, for ``speccond.apply``
to refuse it.

Imports only torch (and speccond's core); safetensors and transformers are imported where they are read.
"""
from __future__ import annotations

import json
import logging
import os
import re
import warnings
from pathlib import Path
from typing import Mapping, Optional, Union

import torch
from torch import nn

from speccond.adapters import attention_modules, find_projections, unrecognised_attention
from speccond.api import apply, is_conditioned, remove
from speccond.core.backends import attachments
from speccond.core.config import OLD_DEFAULT_READ, SpectralConfig
from speccond.core.correction import decode_marker, describe_marker, essentials
from speccond.checkpoint_files import (
    LOADED, TENSORS_SHA256, WEIGHTS, WEIGHTS_INDEX, check_files, checkpoint_files, files_sha256,
    holds_conditioned_keys, marker_site, read_verified,
)
from speccond.checks import received, require_module
from speccond.checksum import tensors_sha256
from speccond.core.layout import ProjectionLayout
from speccond.core.sharded import is_sharded

log = logging.getLogger(__name__)

CONFIG_FILE = "speccond.json"  # beside a transformers checkpoint: the SpectralConfig it was saved with
FORMAT = 1  # of speccond.json




Source = Union[str, os.PathLike, Mapping[str, torch.Tensor]]


# -- the public verbs -----------------------------------------------------------------------------------
def save_pretrained(model: nn.Module, directory: Union[str, os.PathLike], **kwargs) -> Path:
    """Save a conditioned transformers model with ``model.save_pretrained(directory, **kwargs)`` and write
    ``speccond.json`` beside it: the SpectralConfig that reproduces its conditioning. Returns the directory.

    ``model.save_pretrained`` alone (or ``Trainer.save_model``) writes the same weights, markers included;
    :func:`from_pretrained` loads those too. speccond.json records the config for people and tools.
    """
    if not callable(getattr(model, "save_pretrained", None)):
        raise TypeError(
            f"speccond.save_pretrained expects a transformers model (with save_pretrained), got "
            f"{type(model).__name__}; save any nn.Module's state_dict (e.g. safetensors' save_file) and load it "
            "with speccond.load_conditioned(model, path)"
        )
    if not is_conditioned(model):
        raise ValueError("this model is not spectrally conditioned; save it with model.save_pretrained(directory)")
    config = inferred_config(model, _attached(model))
    model.save_pretrained(directory, **kwargs)
    directory = Path(directory)
    if kwargs.get("is_main_process", True):
        record = {"format": FORMAT, "speccond_version": _version(), "config": config.to_dict()}
        record["sha256"] = files_sha256(checkpoint_files(str(directory)))  # verified by load_conditioned
        partial = directory / f".{CONFIG_FILE}.partial"
        partial.write_text(json.dumps(record, indent=2) + "\n")
        os.replace(partial, directory / CONFIG_FILE)
    return directory


def save_conditioned(model: nn.Module, path: Union[str, os.PathLike]) -> Path:
    """Save any conditioned nn.Module's state dict to one ``.safetensors`` file, atomically (a temporary
    file, then a rename), with the SHA-256 of its tensors in the file's metadata; returns the path.
    :func:`load_conditioned` verifies that checksum, so a damaged file is refused, not loaded.

    Every tensor is written with its own storage (a tied weight is saved under each of its names).
    Raises TypeError / ValueError, before anything is written, for a path that is not a .safetensors file in
    an existing folder, a model that is not conditioned, or a sharded (FSDP2) one.
    """
    from safetensors.torch import save_file

    require_module(model, "speccond.save_conditioned")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"speccond.save_conditioned: path must be a path (str or os.PathLike) to a .safetensors file, got "
            f"{type(path).__name__} {path!r}"
        )
    path = Path(path)
    if path.suffix != ".safetensors":
        raise ValueError(
            f"speccond.save_conditioned: {str(path)!r} must end in .safetensors, the file load_conditioned reads; "
            f"e.g. {str(path.with_suffix('.safetensors'))!r}"
        )
    if not path.parent.is_dir():
        raise ValueError(f"speccond.save_conditioned: the folder {str(path.parent)!r} does not exist; create it first")
    if not is_conditioned(model):
        raise ValueError(
            "speccond.save_conditioned: this model is not spectrally conditioned; save a plain model with "
            "safetensors' save_file(model.state_dict(), path)"
        )
    own = model.state_dict()
    sharded = [key for key, tensor in own.items() if is_sharded(tensor)]
    if sharded:
        raise ValueError(
            f"speccond.save_conditioned: {sharded[0]} is sharded (FSDP2); gather a full state dict "
            "(get_model_state_dict with StateDictOptions(full_state_dict=True)) and save that"
        )
    state = {key: tensor.detach().cpu().clone() for key, tensor in own.items()}  # (safetensors refuses shared storage)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        save_file(state, str(partial), metadata={TENSORS_SHA256: tensors_sha256(state)})
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def from_pretrained(
    model_class, directory: Union[str, os.PathLike], *, config: Optional[SpectralConfig] = None, **kwargs
) -> nn.Module:
    """Build ``model_class`` from the transformers checkpoint in ``directory`` (a local folder written by
    ``save_pretrained``, :func:`save_pretrained` or ``Trainer.save_model``), condition it as it was saved
    and load every weight exactly; returns the model in eval mode, like transformers' from_pretrained.

    The model is built from ``directory``'s config.json (``model_class(config, **kwargs)``, or
    ``model_class.from_config(config, **kwargs)`` for an Auto class) in the dtype it was saved in; the
    conditioning comes from ``config``, else speccond.json, else the checkpoint's markers
    (:func:`load_conditioned`).
    """
    from transformers import AutoConfig

    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(f"speccond.from_pretrained reads a local checkpoint folder; {str(directory)!r} is not one")
    hf_config = AutoConfig.from_pretrained(directory)
    build = getattr(model_class, "from_config", None)
    model = build(hf_config, **kwargs) if build is not None else model_class(hf_config, **kwargs)
    dtype = getattr(hf_config, "dtype", None)
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
        model.to(dtype)
    load_conditioned(model, directory, config=config)
    return model.eval()


def load_conditioned(model: nn.Module, source: Source, *, config: Optional[SpectralConfig] = None) -> nn.Module:
    """Load a conditioned checkpoint into ``model`` exactly, conditioning ``model`` first if it is plain.

    ``source``: a checkpoint folder (``model.safetensors`` or a sharded index), a ``.safetensors`` file, or a
    state dict. A plain ``model`` is conditioned with ``config`` if given, else with the SpectralConfig of
    the folder's speccond.json, else with the one inferred from the checkpoint's markers; a conditioned
    ``model`` must already carry the checkpoint's corrections. Before any tensor is copied the checkpoint
    must match: the same conditioned parameters, backend and corrections, the same keys (a tied weight
    saved once excepted) and shapes. Returns ``model``.

    A checkpoint written before speccond saved markers has none: pass the ``config`` it was trained with.

    Raises:
        ValueError: the checkpoint holds no marker and no ``config`` is given (a plain checkpoint: load it
            with ``model.load_state_dict``); it does not match ``model``; no SpectralConfig reproduces its
            conditioning (pass ``config``). A plain ``model`` conditioned here is plain again afterwards.
    """
    require_module(model, "speccond.load_conditioned")
    if config is not None and not isinstance(config, SpectralConfig):
        raise TypeError(f"speccond.load_conditioned: config must be a speccond.SpectralConfig or None, got {received(config)}")
    state, folder = _read(source)
    recorded = conditioning(state)
    where = _name(source)
    if not recorded and config is None:
        raise ValueError(
            f"{where} holds no speccond marker, so it is not a conditioned checkpoint: load a plain checkpoint with "
            "model.load_state_dict before speccond.apply; for a conditioned checkpoint written before speccond "
            "saved markers, pass the config it was trained with: speccond.load_conditioned(model, source, config=...)"
        )
    applied, flagged = False, getattr(model, LOADED, False)
    setattr(model, LOADED, True)  # every weight is about to be replaced: refuse_partly_loaded (in apply) passes it
    try:
        if not is_conditioned(model):
            if config is None:
                config = _saved_config(folder) or inferred_config(model, recorded)
            apply(model, config)
            applied = True
        problem = _mismatch(model, state, recorded)
        if problem:
            raise ValueError(f"{where} does not match this model: {problem}")
        result = model.load_state_dict(state, strict=False)
        assert not result.unexpected_keys, result.unexpected_keys  # checked by _mismatch
    except Exception:
        if applied:
            remove(model, merge=False)
        setattr(model, LOADED, flagged)
        raise
    log.info("loaded %d tensors (%d conditioned parameters) from %s", len(state), len(recorded), where)
    return model


# -- what a checkpoint holds ----------------------------------------------------------------------------
def conditioning(state: Mapping[str, torch.Tensor]) -> dict[str, dict]:
    """The conditioned parameters a state dict's markers name: qualified parameter name -> its correction's
    description plus ``"backend"`` ("weight" or "activation"), in key order. Empty for a plain state dict
    (or one written before markers)."""
    found = {}
    for key in state:
        parsed = marker_site(key)
        if parsed is None:
            continue
        name, backend = parsed
        try:
            described = decode_marker(state[key])
        except ValueError as error:
            raise ValueError(f"{key}: {error}") from None
        found[name] = {**described, "backend": backend}
    return found


def inferred_config(model: nn.Module, recorded: Mapping[str, dict]) -> SpectralConfig:
    """A SpectralConfig that conditions exactly the parameters ``recorded`` names, with their corrections,
    when applied to ``model`` (plain, or already conditioned so: it is read, not changed).

    ``recorded``: :func:`conditioning`'s result. lam per role, the correction, granularity, target_kappa,
    key_basis and backend come from the descriptions; projections no adapter finds with the recorded layout become
    declared ``layouts``; ``targets`` and ``exclude`` stay None when the default selection is the recorded
    one, else they name the conditioned modules exactly. Raises ValueError when one config cannot do it
    (corrections of different kinds or lams, mixed backends).
    """
    if not recorded:
        raise ValueError("no conditioned parameter recorded: nothing to infer a SpectralConfig from")
    fields = {}
    for field in ("backend", "kind", "granularity", "target_kappa", "key_basis"):
        values = {json.dumps(r.get(field)) for r in recorded.values() if field in r}
        if len(values) > 1:
            raise ValueError(
                f"the recorded corrections differ in {field} ({', '.join(sorted(values))}): no single SpectralConfig "
                "conditions them all; pass config=..."
            )
        if values:
            fields[field] = json.loads(values.pop())
    lams = {}
    for name, described in recorded.items():
        for role, lam in described.get("scales", {}).items():
            if lams.setdefault(role, lam) != lam:
                raise ValueError(
                    f"lam_{role} is {lams[role]} on one recorded projection and {lam} on {name}: no single "
                    "SpectralConfig conditions them all; pass config=..."
                )
    base = dict(
        lam=0.0, **{f"lam_{role}": lams.get(role, 0.0) for role in "qkv"},
        correction=fields["kind"], backend=fields["backend"],
        granularity=fields.get("granularity", "head"), target_kappa=fields.get("target_kappa", 2.0),
        key_basis=fields.get("key_basis", "identity"),
    )
    with warnings.catch_warnings():  # apply warned about a lam in (0, 2] when it was applied
        warnings.simplefilter("ignore", UserWarning)
        found = _default_sites(model, SpectralConfig(**base))
        layouts = {
            f"^{re.escape(name)}$": ProjectionLayout.from_dict(described["layout"])
            for name, described in recorded.items()
            if name not in found or found[name].layout.to_dict() != described["layout"]
        }
        simple = SpectralConfig(**base, layouts=layouts)
        if _selection(model, simple) == set(recorded):
            return simple
        owners = {name.rpartition(".")[0] for name in recorded}
        unused = [n for n, _, _ in attention_modules(model) if not any(_within(o, n) for o in owners)]
        return SpectralConfig(
            **base, layouts=layouts, targets=[f"^{re.escape(o)}$" for o in sorted(owners)],
            exclude=[f"^{re.escape(n)}$" for n in unused] or None,
        )


def missing_and_unexpected(model: nn.Module, keys) -> tuple[list[str], list[str]]:
    """(missing, unexpected) keys of a checkpoint holding ``keys`` against ``model``'s state dict, where a
    checkpoint without any marker (written before speccond saved them) is not missing the markers."""
    keys = set(keys)
    expected = set(model.state_dict())
    if not any(marker_site(k) for k in keys):
        expected = {k for k in expected if marker_site(k) is None}
    return sorted(expected - keys), sorted(keys - expected)


def mismatch_advice(missing: list[str], unexpected: list[str]) -> str:
    """What to do when a checkpoint's keys differ from a model's by conditioning ('' when they do not)."""
    if holds_conditioned_keys(unexpected) and not holds_conditioned_keys(missing):
        return (
            "the checkpoint is of a spectrally conditioned model and this model is plain (or conditioned "
            "elsewhere): load it with speccond.load_conditioned(model, checkpoint), which conditions the model "
            "as it was saved"
        )
    if holds_conditioned_keys(missing) and not holds_conditioned_keys(unexpected):
        return (
            "this model is spectrally conditioned and the checkpoint is not (or conditions other parameters): "
            "load a plain checkpoint before speccond.apply, or a conditioned one with speccond.load_conditioned"
        )
    return ""


# -- internals ------------------------------------------------------------------------------------------
def _attached(model: nn.Module) -> dict[str, dict]:
    """What :func:`conditioning` reads back from ``model``'s own state dict, without building it."""
    return {f.qualified_name: {**f.correction.description(), "backend": f.backend} for f in attachments(model)}


def _mismatch(model: nn.Module, state: Mapping[str, torch.Tensor], recorded: Mapping[str, dict]) -> str:
    """'' when ``state`` can be loaded into ``model`` exactly, else what differs (the first few of each)."""
    if recorded:
        attached = _attached(model)
        only_saved = [n for n in recorded if n not in attached]
        only_here = [n for n in attached if n not in recorded]
        if only_saved or only_here:
            parts = [f"the checkpoint conditions {only_saved[:3]} and this model does not"] if only_saved else []
            parts += [f"this model conditions {only_here[:3]} and the checkpoint does not"] if only_here else []
            return "; ".join(parts)
        for name, saved in recorded.items():
            here = attached[name]
            if saved["backend"] != here["backend"]:
                return f"{name}: saved with the {saved['backend']} backend, conditioned here with the {here['backend']} backend"
            if essentials(saved) != essentials(here):
                return f"{name}: the checkpoint's correction is {describe_marker(saved)}, this model's is {describe_marker(here)}"
    missing, unexpected = missing_and_unexpected(model, state)
    tensors = model.state_dict(keep_vars=True)
    loaded = {id(tensors[k]) for k in state if k in tensors}
    missing = [k for k in missing if id(tensors[k]) not in loaded]  # a tied weight, saved once under another name
    if missing or unexpected:
        advice = mismatch_advice(missing, unexpected)
        return f"missing keys {missing[:5]}, unexpected keys {unexpected[:5]}" + (f"; {advice}" if advice else "")
    shapes = [(k, tuple(v.shape), tuple(tensors[k].shape)) for k, v in state.items() if v.shape != tensors[k].shape]
    if shapes:
        return f"shapes differ (name, checkpoint, model): {shapes[:3]}"
    return ""


def _default_sites(model: nn.Module, config: SpectralConfig) -> dict:
    """The sites the adapters find on ``model`` (qualified name -> site), refused families left out."""
    from dataclasses import replace

    try:
        return {site.qualified_name: site for site in find_projections(model, config)}
    except ValueError:  # a family an adapter refuses (timm_refused.py): one module at a time, the rest excluded
        names = [n for n, _, _ in attention_modules(model)]
        found = {}
        for name in names:
            alone = replace(config, exclude=[f"^{re.escape(n)}$" for n in names if n != name] or None)
            try:
                found.update({s.qualified_name: s for s in find_projections(model, alone)})
            except ValueError:
                continue
        return found


def _selection(model: nn.Module, config: SpectralConfig) -> set[str]:
    """The parameters ``apply(model, config)`` would condition; none when apply would refuse."""
    try:
        sites = find_projections(model, config)
        if unrecognised_attention(model, config, sites):
            return set()
    except ValueError:
        return set()
    return {s.qualified_name for s in sites if any(config.scale(r) != 0 for r in s.layout.roles)}


def _within(name: str, ancestor: str) -> bool:
    return ancestor == "" or name == ancestor or name.startswith(ancestor + ".")


def _read(source: Source) -> tuple[dict[str, torch.Tensor], Optional[Path]]:
    """(state dict, the checkpoint folder or None) of a folder, a .safetensors file or a state dict."""
    if isinstance(source, Mapping):
        return dict(source), None
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(
            f"expected a checkpoint folder, a .safetensors file (str or os.PathLike) or a state dict, got "
            f"{type(source).__name__} {source!r:.60}"
        )
    path = Path(source)
    if path.is_dir():
        files = checkpoint_files(str(path))
        if not files:
            raise ValueError(f"{path}: no {WEIGHTS} or {WEIGHTS_INDEX}; expected a folder written by save_pretrained")
        check_files(files, _recorded_checksums(path), path / CONFIG_FILE)
        state = {}
        for file in files:  # checked by the folder's record above (or noted unverified there): no second note
            state.update(read_verified(file, checked=True))
        return state, path
    if path.is_file() and path.suffix == ".safetensors":
        return read_verified(path), None
    raise ValueError(f"{str(path)!r}: expected a checkpoint folder, a .safetensors file or a state dict")


def _recorded_checksums(folder: Path) -> Optional[dict]:
    """The SHA-256 per weight file that ``folder``'s speccond.json records; None when it records none."""
    path = folder / CONFIG_FILE
    if not path.is_file():
        return None
    try:
        recorded = json.loads(path.read_text()).get("sha256")
    except (OSError, json.JSONDecodeError, AttributeError) as error:
        raise ValueError(f"{path}: unreadable ({error}); expected the JSON speccond.save_pretrained writes") from None
    return recorded if isinstance(recorded, dict) else None


def _saved_config(folder: Optional[Path]) -> Optional[SpectralConfig]:
    """The SpectralConfig of ``folder``'s speccond.json, or None when there is none."""
    if folder is None or not (folder / CONFIG_FILE).is_file():
        return None
    path = folder / CONFIG_FILE
    try:
        record = json.loads(path.read_text())
        fields = dict(record["config"])
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: unreadable ({error}); expected the JSON speccond.save_pretrained writes") from None
    if record.get("format", 0) > FORMAT:
        raise ValueError(f"{path}: format {record['format']} was written by a newer speccond; upgrade to load it")
    with warnings.catch_warnings(record=True) as caught:  # apply warned about a lam in (0, 2] when it was applied
        warnings.simplefilter("always", UserWarning)
        try:
            config = SpectralConfig.from_dict(fields)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path}: its config is not a SpectralConfig ({error}); expected the JSON "
                             "speccond.save_pretrained writes") from None
    if any(str(w.message) == OLD_DEFAULT_READ for w in caught):  # read as the old default: said, naming the file
        warnings.warn(f"{path}: {OLD_DEFAULT_READ}", UserWarning, stacklevel=4)
    return config


def _name(source: Source) -> str:
    return "the state dict" if isinstance(source, Mapping) else str(source)


def _version() -> str:
    from speccond.version import __version__

    return __version__
