"""Checks of what a caller passed, shared by the public verbs, with one way of saying what was received.

Errors a user can trigger are TypeError / ValueError that name the value received, what was expected and
what to do (STYLE.md). Imports only torch.
"""
from __future__ import annotations

from typing import Any, Iterator

import torch
from torch import nn


def received(value: object) -> str:
    """How a message names a value: its type and its repr, cut at 80 characters."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 80 else text[:77] + '...'}"


def require_module(value: object, where: str) -> None:
    """TypeError unless ``value`` is an nn.Module."""
    if not isinstance(value, nn.Module):
        raise TypeError(f"{where} expects a torch.nn.Module, got {received(value)}")


def require_bool(value: object, name: str) -> None:
    """TypeError unless ``value`` is True or False (a truthy string must not pass for True)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {received(value)}")


def check_example_input(args: tuple, kwargs: dict, where: str = "speccond.verify: the example input") -> None:
    """Refuse an example input on which no probe can show anything, naming it: a tensor with no elements
    (an empty batch or sequence), or one holding NaN or +inf (-inf is allowed: it is how an additive mask
    says "never attend"). The inputs are then at fault, not the model or its layout."""
    for name, tensor in named_tensors(args, kwargs):
        if tensor.numel() == 0:
            raise ValueError(
                f"{where} {name} is empty (shape {tuple(tensor.shape)}); it needs at least one example with at "
                "least one token: pass a small real batch"
            )
        if tensor.is_floating_point():
            bad = torch.isnan(tensor) | torch.isposinf(tensor)
            if bool(bad.any()):
                raise ValueError(
                    f"{where} {name} holds NaN or +inf ({int(bad.sum())} of {tensor.numel()} entries), so no "
                    "output can be compared on it; pass finite inputs (a real batch)"
                )


def named_tensors(args: tuple, kwargs: dict) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) of every tensor in call arguments: "argument 0", "'mask'", "argument 1[2]", ..."""

    def walk(value: Any, name: str) -> Iterator[tuple[str, torch.Tensor]]:
        if isinstance(value, torch.Tensor):
            yield name, value
        elif isinstance(value, (tuple, list)):
            for index, item in enumerate(value):
                yield from walk(item, f"{name}[{index}]")
        elif isinstance(value, dict):
            for key, item in value.items():
                yield from walk(item, f"{name}[{key!r}]")

    for index, value in enumerate(args):
        yield from walk(value, f"argument {index}")
    for key, value in kwargs.items():
        yield from walk(value, repr(key))
