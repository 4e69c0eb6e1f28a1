"""The optimiser of every run (classification, language, sequence, detection): one recipe, one owner."""
from __future__ import annotations

import fnmatch
from typing import Iterable

import torch
from torch import nn


def adamw(
    model: nn.Module, lr: float, weight_decay: float, exempt_names: Iterable[str] = (),
    exempt_patterns: Iterable[str] = (),
) -> torch.optim.AdamW:
    """AdamW with decoupled weight decay on matrices only (the usual recipe, as timm's): biases, norm
    scales, sigma-reparam's and LayerScale's gamma, the parameters named in ``exempt_names`` and those
    matching an fnmatch pattern of ``exempt_patterns`` are not decayed. A parametrized weight counts by its
    plain name (``qkv.weight``, not ``qkv.parametrizations.weight.original``).

    The classification harness passes a model's ``no_weight_decay()`` as names, read exactly, as its
    published runs were made: timm's XCiT returns the pattern "pos_embed.*", which is then not expanded
    and XCiT's positional-encoding projection is decayed. The detection harness passes patterns."""
    names, patterns = set(exempt_names), list(exempt_patterns)
    decay, keep = [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        plain = name.replace("parametrizations.", "").replace(".original", "")
        excluded = (parameter.ndim <= 1 or plain in names
                    or any(fnmatch.fnmatchcase(plain, pattern) for pattern in patterns))
        (keep if excluded else decay).append(parameter)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": keep, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr)
