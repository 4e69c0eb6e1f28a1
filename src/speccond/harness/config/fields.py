"""``ConfigFields``: dict and ``key=value`` round trips for the harness's frozen config dataclass.

TrainConfig (harness/config/train_config.py), the one config of every task, inherits it:

    config.to_dict()                          # {"lam": 10.0, ...}, what config.json records
    TrainConfig.from_dict(values)             # unknown keys are a ValueError naming the known ones
    config.with_overrides(["lr=3e-4"])        # a copy, each value parsed to its field's type

The command line writes settings three ways, each taken apart here and nowhere else: ``--set lam=auto``
(:func:`setting`), ``--sweep lam=1,10,auto`` (:func:`sweep_setting`) and an arm of ``speccond tune --arms``,
``spectral:corrected=q+lam=auto`` (:func:`arm_settings`). Each ends as ``key=value`` pairs for
``with_overrides``, whose :func:`field_value` is the one reading of a value as its field's type, so every
form reads a value the same way, and so does ``speccond inspect --lam``. A field annotated ``float | str``
(TrainConfig.lam) reads a number or the word ``auto``.

Errors name the class (``type(config).__name__``), so a user reads "unknown TrainConfig field 'lr_max'".
Validation stays in each class's ``__post_init__``, which every constructed copy runs.
"""
from __future__ import annotations

import ast
import dataclasses
from typing import Sequence, TypeVar

from speccond.core.config import AUTO  # "auto", SpectralConfig's word for a lam chosen from each block's sigma_max

Config = TypeVar("Config", bound="ConfigFields")


NUMBER_OR_AUTO = "float | str"  # the annotation of such a field, as ``from __future__ import annotations`` keeps it
_EXPECTED = {NUMBER_OR_AUTO: f"float or {AUTO!r}"}  # what an error says a field expects (others: the annotation)


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
    "lam=auto"]); "baseline" -> ("baseline", [])."""
    method, _, settings = arm.partition(":")
    return method, [pair for pair in settings.split("+") if pair]


class ConfigFields:
    """Mixin for a frozen dataclass whose fields are annotated ``int``, ``float``, ``str`` or ``float | str``
    (a number or "auto")."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls: type[Config], values: dict) -> Config:
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = set(values) - set(known)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} fields {sorted(unknown)}; known: {known}")
        return cls(**values)

    def with_overrides(self: Config, pairs: Sequence[str]) -> Config:
        """A copy with ``key=value`` overrides parsed to each field's type; unknown keys are an error."""
        name = type(self).__name__
        types = {f.name: f.type for f in dataclasses.fields(self)}  # annotations as strings: "int", "float", ...
        changes = {}
        for pair in pairs:
            key, text = setting(pair)
            if key not in types:
                raise ValueError(f"unknown {name} field {key!r}; known: {sorted(types)}")
            try:
                changes[key] = field_value(types[key], text)
            except ValueError:
                raise ValueError(f"{name}.{key} expects {_EXPECTED.get(types[key], types[key])}, got {text!r}") from None
        return dataclasses.replace(self, **changes)


def parse_overrides(pairs: Sequence[str]) -> dict:
    """["img_size=32", "depth=2"] -> {"img_size": 32, "depth": 2}."""
    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"expected key=value, got {pair!r}")
        try:
            overrides[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            overrides[key] = value
    return overrides
