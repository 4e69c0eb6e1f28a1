"""``ConfigFields``: dict and ``key=value`` round trips for the harness's frozen config dataclass.

TrainConfig (harness/config/train_config.py), the one config of every task, inherits it:

    config.to_dict()                          # {"lam": 10.0, ...}, what config.json records
    TrainConfig.from_dict(values)             # unknown keys are a ValueError naming the known ones
    config.with_overrides(["lr=3e-4"])        # a copy, each value parsed to its field's type

Errors name the class (``type(config).__name__``), so a user reads "unknown TrainConfig field 'lr_max'".
Validation stays in each class's ``__post_init__``, which every constructed copy runs.
"""
from __future__ import annotations

import ast
import dataclasses
from typing import Sequence, TypeVar

Config = TypeVar("Config", bound="ConfigFields")


class ConfigFields:
    """Mixin for a frozen dataclass whose fields are annotated ``int``, ``float`` or ``str``."""

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
        types = {f.name: f.type for f in dataclasses.fields(self)}  # annotations as strings: "int", "float", "str"
        changes = {}
        for pair in pairs:
            key, sep, text = pair.partition("=")
            if not sep:
                raise ValueError(f"overrides look like key=value, got {pair!r}")
            if key not in types:
                raise ValueError(f"unknown {name} field {key!r}; known: {sorted(types)}")
            try:
                changes[key] = {"int": int, "float": float}.get(types[key], str)(text)
            except ValueError:
                raise ValueError(f"{name}.{key} expects {types[key]}, got {text!r}") from None
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
