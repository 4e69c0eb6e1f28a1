"""PEFT adapters that know their base: what conditioning the base had when the adapter was trained.

A LoRA adapter is trained on a function of its base: with a conditioned base it learns B A on top of
W + C, and loaded onto a plain base (or one conditioned otherwise) it silently computes something else
(max logit difference 0.87 on the BERT of tests/test_peft.py). PEFT's adapter files hold only the
adapter's tensors and its LoraConfig, so:

    speccond.save_adapter(peft_model, directory)   # peft_model.save_pretrained(directory) + speccond_base.json
    peft_model = speccond.load_adapter(base, directory)   # checks the base, then PeftModel.from_pretrained

``speccond_base.json`` (beside PEFT's adapter_config.json; PEFT ignores it, so the folder stays a PEFT
adapter that ``PeftModel.from_pretrained`` loads as before) records whether the base was conditioned,
and for every conditioned projection (named as in the plain base model: ``bert.encoder.layer.0.
attention.self.query.weight``) its correction as the checkpoint markers describe it
(``speccond.core.correction.essentials``) and the Frobenius norm of C, which tells apart corrections that
follow the weights (svd, lam="auto") computed from different weights. ``load_adapter`` refuses, with what
to do, a base conditioned differently or not at all, and a conditioned base for an adapter folder that
has no record (saved with PEFT's own save_pretrained: nothing says what it was trained on). The backend
(weight or activation) is not compared: both compute the same function.

peft is imported only in ``load_adapter``.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Union

import torch
from torch import nn

from speccond.core.backends import attachments
from speccond.core.correction import describe_marker, essentials

BASE_FILE = "speccond_base.json"
FORMAT = 1  # of speccond_base.json
NORM_RTOL = 1e-5  # float32 weights: C recomputed from the same W agrees far closer than this


def base_record(model: nn.Module) -> dict:
    """What ``speccond_base.json`` holds for ``model`` (a PEFT model or a plain one): {"format", "conditioned",
    "sites": {plain parameter name: {**essentials of its correction, "c_norm": ||C||_F}}}."""
    sites = {}
    for found in attachments(model):
        c = found.correction.dense_out_in(torch.float64)  # (out, in)
        sites[plain_name(found.qualified_name)] = {**essentials(found.correction.description()),
                                                   "c_norm": float(c.norm())}
    return {"format": FORMAT, "conditioned": bool(sites), "sites": sites}


def plain_name(name: str) -> str:
    """A parameter's name in the base model without PEFT's wrappers: no leading ``base_model.model.``, no
    ``.base_layer`` (``base_model.model.bert...query.base_layer.weight`` -> ``bert...query.weight``)."""
    name = name.removeprefix("base_model.model.")
    return ".".join(part for part in name.split(".") if part != "base_layer")


def save_adapter(peft_model: nn.Module, directory: Union[str, os.PathLike], **kwargs) -> Path:
    """``peft_model.save_pretrained(directory, **kwargs)`` and ``speccond_base.json`` beside the adapter
    (module docstring), written atomically after PEFT's files; returns the directory."""
    if not (callable(getattr(peft_model, "save_pretrained", None)) and hasattr(peft_model, "peft_config")):
        raise TypeError(
            f"speccond.save_adapter expects a PEFT model (peft.get_peft_model's PeftModel), got "
            f"{type(peft_model).__name__}; save a whole conditioned model with speccond.save_pretrained"
        )
    record = base_record(peft_model)  # before anything is written
    peft_model.save_pretrained(directory, **kwargs)
    directory = Path(directory)
    if kwargs.get("is_main_process", True):
        partial = directory / f".{BASE_FILE}.partial"
        partial.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        os.replace(partial, directory / BASE_FILE)
    return directory


def load_adapter(base: nn.Module, directory: Union[str, os.PathLike], **kwargs) -> nn.Module:
    """``peft.PeftModel.from_pretrained(base, directory, **kwargs)`` once ``base`` is checked against the
    adapter's ``speccond_base.json``: conditioned as recorded (same projections, same corrections). Raises
    ValueError, before anything is loaded, naming what differs and what to do."""
    import peft

    problem = base_mismatch(base, directory)
    if problem:
        raise ValueError(problem)
    return peft.PeftModel.from_pretrained(base, str(directory), **kwargs)


def base_mismatch(base: nn.Module, directory: Union[str, os.PathLike]) -> str:
    """'' when ``base`` is conditioned as the adapter in ``directory`` records, else why not and what to do."""
    if not isinstance(base, nn.Module):
        raise TypeError(f"speccond.load_adapter expects the base model (a torch.nn.Module), got {type(base).__name__}")
    if hasattr(base, "peft_config"):
        raise ValueError(
            f"speccond.load_adapter expects the base model, and {type(base).__name__} is already a PEFT model; pass "
            "peft_model.get_base_model(), or load a further adapter with peft_model.load_adapter after checking it"
        )
    path = Path(directory) / BASE_FILE
    found = base_record(base)
    if not path.is_file():
        if not found["conditioned"]:
            return ""
        return (
            f"{directory} has no {BASE_FILE}, so nothing says which base this adapter was trained on, and this base "
            f"is spectrally conditioned ({len(found['sites'])} projections): an adapter trained on a plain base "
            "computes something else here. Save adapters with speccond.save_adapter(peft_model, directory), which "
            "records the base; if you know this adapter was trained on this very conditioning, "
            "peft.PeftModel.from_pretrained(base, directory) loads it without the check"
        )
    recorded = json.loads(path.read_text())
    if not isinstance(recorded, dict) or recorded.get("format") != FORMAT:
        return f"{path}: not a speccond_base.json of format {FORMAT} (got {str(recorded)[:80]}); re-save the adapter with speccond.save_adapter"
    return _compare(recorded, found, path)


def _compare(recorded: dict, found: dict, path: Path) -> str:
    if recorded["conditioned"] and not found["conditioned"]:
        name, site = next(iter(recorded["sites"].items()))
        return (
            f"this adapter was trained on a spectrally conditioned base ({len(recorded['sites'])} projections, e.g. "
            f"{name}: {describe_marker(site)}, recorded in {path}), and this base is not conditioned: condition it "
            "as it was first (speccond.apply(base, SpectralConfig(...)) with the same correction, or "
            "speccond.from_pretrained / load_conditioned if the base was saved conditioned), then load the adapter"
        )
    if found["conditioned"] and not recorded["conditioned"]:
        return (
            f"this adapter was trained on a plain base ({path} records no conditioning), and this base is spectrally "
            f"conditioned ({len(found['sites'])} projections): load it onto the plain base, e.g. after "
            "speccond.remove(base, merge=False), which takes C off and leaves W"
        )
    missing = sorted(set(recorded["sites"]) - set(found["sites"]))
    extra = sorted(set(found["sites"]) - set(recorded["sites"]))
    if missing or extra:
        return (
            f"this base is conditioned on other projections than the one the adapter was trained on ({path}): "
            + (f"not conditioned here: {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}; " if missing else "")
            + (f"conditioned here only: {', '.join(extra[:3])}{' ...' if len(extra) > 3 else ''}; " if extra else "")
            + "condition the base with the targets it had (SpectralConfig(targets=..., exclude=...)) before loading"
        )
    for name, site in recorded["sites"].items():
        here = found["sites"][name]
        same = {k: v for k, v in site.items() if k != "c_norm"} == {k: v for k, v in here.items() if k != "c_norm"}
        if not same:
            return (
                f"{name} is conditioned with {describe_marker(here)} here, and the adapter was trained with "
                f"{describe_marker(site)} ({path}): condition the base as it was (speccond.remove(base, merge=False), "
                "then speccond.apply with that correction) before loading"
            )
        if not math.isclose(here["c_norm"], site["c_norm"], rel_tol=NORM_RTOL, abs_tol=1e-12):
            return (
                f"{name}: the correction here has ||C|| = {here['c_norm']:.6g}, the one the adapter was trained on "
                f"{site['c_norm']:.6g} ({path}), so C came from other weights (a correction that follows the "
                "weights was computed on another base, or refreshed since): load the adapter onto the base it was "
                "trained on"
            )
    return ""
