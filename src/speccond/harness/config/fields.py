"""Reading settings as the command line writes them, for TrainConfig (harness/config/train_config.py):

    config.with_overrides(["lr=3e-4"])        # a copy, each value parsed to its field's type (field_value)

The command line writes settings three ways, each taken apart here and nowhere else: ``--set lam=auto``
(:func:`setting`), ``--sweep lam=1,10,auto`` (:func:`sweep_setting`) and an arm of ``speccond tune --arms``,
``spectral:corrected=q+lam=auto`` (:func:`arm_settings`). Each ends as ``key=value`` pairs for
``with_overrides``, whose :func:`field_value` is the one reading of a value as its field's type, so every
form reads a value the same way, and so does ``speccond inspect --lam``. A field annotated ``float | str``
(MethodConfig.lam) reads a number or the word ``auto``.
"""
from __future__ import annotations

import ast
from typing import Sequence

from speccond.core.config import AUTO  # "auto", SpectralConfig's word for a lam chosen from each block's sigma_max

NUMBER_OR_AUTO = "float | str"  # the annotation of such a field, as ``from __future__ import annotations`` keeps it


def field_value(annotation: str, text: str):
    """``text`` (the value of a ``key=value`` pair) as a field annotated ``annotation`` holds it: "int" -> int,
    "float" -> float, "float | str" -> float, or "auto" for the word auto (any case), anything else -> the
    text. ValueError when the text is not such a value."""
    if annotation == NUMBER_OR_AUTO:
        return AUTO if text.strip().lower() == AUTO else float(text)
    return {"int": int, "float": float}.get(annotation, str)(text)


def setting(pair: str) -> tuple[str, str]:
    """"lam=auto" -> ("lam", "auto"); ValueError when there is no "=" or no key."""
    key, sep, text = pair.partition("=")
    if not sep or not key:
        raise ValueError(f"settings look like key=value, got {pair!r}")
    return key, text


def sweep_setting(text: str) -> tuple[str, list[str]]:
    """One ``--sweep``: "lam=1,10,auto" -> ("lam", ["1", "10", "auto"]) (blank values dropped)."""
    key, values = setting(text)
    return key, [value.strip() for value in values.split(",") if value.strip()]


def arm_settings(arm: str) -> tuple[str, list[str]]:
    """One arm of ``speccond tune --arms``: "spectral:corrected=q+lam=auto" -> ("spectral", ["corrected=q",
    "lam=auto"]); "baseline" -> ("baseline", []). ValueError for a key set twice in one arm
    ("spectral:lam=5+lam=10"): one of the two would be ignored."""
    method, _, settings = arm.partition(":")
    pairs = [pair for pair in settings.split("+") if pair]
    refuse_repeats([setting(pair)[0] for pair in pairs], f"arm {arm!r}")
    return method, pairs


def parse_overrides(pairs: Sequence[str]) -> dict:
    """["img_size=32", "depth=2"] -> {"img_size": 32, "depth": 2}; ValueError for a key given twice (one value
    would be ignored)."""
    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"expected key=value, got {pair!r}")
        if key in overrides:
            raise ValueError(f"{key} is given twice in {', '.join(pairs)}; give each key once")
        try:
            overrides[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            overrides[key] = value
    return overrides


def refuse_repeats(keys: Sequence[str], where: str) -> None:
    """ValueError naming the first key of ``keys`` that appears twice in ``where``."""
    seen = set()
    for key in keys:
        if key in seen:
            raise ValueError(f"{key} is set twice in {where}; set each key once")
        seen.add(key)
