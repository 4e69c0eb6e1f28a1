"""The projections a peer method acts on: the q, k, v projections speccond.apply would condition."""
from __future__ import annotations

from typing import Optional, Sequence

from torch import nn
from torch.nn.utils import parametrize

from speccond.adapters import ProjectionSite, find_projections, unrecognised_attention, unrecognised_message
from speccond.core.config import SpectralConfig


def projection_sites(
    model: nn.Module, method: str, targets: Optional[Sequence[str]] = None, exclude: Optional[Sequence[str]] = None
) -> list[ProjectionSite]:
    """The sites ``speccond.apply(model, SpectralConfig(targets=..., exclude=...))`` would condition, with its
    errors for attention that no adapter covers; ``method`` names the caller in messages."""
    config = SpectralConfig(targets=list(targets) if targets else None, exclude=list(exclude) if exclude else None)
    sites = find_projections(model, config)
    unknown = unrecognised_attention(model, config, sites)
    if unknown:
        raise ValueError(unrecognised_message(unknown, model))
    if not sites:
        raise ValueError(
            f"{method} found no q, k, v projections in {type(model).__name__} (targets={targets}, exclude={exclude}): "
            "it acts on the projections speccond.apply conditions; use a model with attention speccond recognises "
            "(timm ViT, nn.MultiheadAttention, transformers BERT/GPT-2, ...)"
        )
    return sites


def check_unparametrized(site: ProjectionSite, method: str) -> None:
    """Refuse a projection that already carries a parametrization (a method applied twice, or speccond's)."""
    if parametrize.is_parametrized(site.module, site.param_name):
        raise ValueError(
            f"{site.qualified_name} already has a parametrization; {method} needs projections without one "
            "(was a method applied twice, or speccond.apply called first?)"
        )
