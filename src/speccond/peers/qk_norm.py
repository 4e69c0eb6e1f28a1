"""QK-norm: a LayerNorm over head_dim on every head of q and of k before the logits (Dehghani et al., ICML
2023), added to a model that does not normalise them, as timm's ``qk_norm=True`` builds it.

``qk_norm(model)`` hooks each projection module that outputs q or k (:class:`QKNormHook`) and registers
its LayerNorms as that module's children ``q_norm`` / ``k_norm``, so they are trained and saved with the
model; ``speccond.peers.remove(model, merge=False)`` takes them off (a LayerNorm cannot be merged into W).
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence

import torch
from torch import nn

from speccond.adapters import ProjectionSite
from speccond.adapters.base import QK_L2_OVER_TOKENS
from speccond.core.layout import ProjectionLayout
from speccond.peers.hooks import PeerHook
from speccond.peers.targets import projection_sites

log = logging.getLogger(__name__)

# LayerNorm epsilon: timm's ViT builds its q_norm / k_norm with timm.layers.LayerNorm (eps 1e-6).
QK_NORM_EPS = 1e-6


def qk_norm(
    model: nn.Module, *, targets: Optional[Sequence[str]] = None, exclude: Optional[Sequence[str]] = None,
    eps: float = QK_NORM_EPS,
) -> list[str]:
    """A LayerNorm(head_dim) on the heads of q and of k of every attention module found, in place; returns
    the names of the hooked projection modules. Attention that L2-normalises q and k over the tokens itself
    (XCiT's XCA) is left as it is.

    Raises ValueError, before anything changes: nothing to normalise; attention that reads its weight
    directly (nn.MultiheadAttention) or already normalises q and k per head; qk_norm applied twice."""
    if not (isinstance(eps, float) and eps > 0):
        raise ValueError(f"qk_norm: eps must be a positive float, got {eps!r}")
    plans = [(site, _blocks(site)) for site in projection_sites(model, "qk_norm", targets, exclude)]
    if not any(blocks for _, blocks in plans):
        raise ValueError(
            f"qk_norm found nothing to normalise in {type(model).__name__}: every q, k projection it targets "
            "already normalises q and k (XCiT's XCA); use a model with ordinary softmax(q k^T) attention"
        )
    for site, blocks in plans:
        if blocks:
            _attach(site, blocks, eps)
    return [site.module_name for site, blocks in plans if blocks]


class QKNormHook(PeerHook):
    """Forward hook y -> y with every head of the q and k blocks layer-normalised over head_dim.

        q_h <- LayerNorm_q(q_h),  k_h <- LayerNorm_k(k_h)   for each head h      (Dehghani et al., ICML 2023)

    One LayerNorm(head_dim) per role, shared by the heads of that role, as timm's ``qk_norm=True``
    (``Attention.q_norm`` / ``k_norm``). The LayerNorms are the projection module's children ``q_norm`` and
    ``k_norm``; the v block passes through unchanged. A class rather than a closure so the model pickles.

    ``blocks``: (stored role, LayerNorm child name) pairs. The name is the role the block plays in the
    logits (the site's ``acts_as``), which differs from the stored role in DaViT's channel attention.
    """

    def __init__(self, layout: ProjectionLayout, blocks: tuple[tuple[str, str], ...]):
        self.layout = layout
        self.blocks = blocks

    def __call__(self, module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        out_features = output.shape[-1]  # output (..., out)
        for role, norm_name in self.blocks:
            rows = self.layout.block_rows(role, out_features).to(output.device)  # (H * dh,)
            heads = output[..., rows].unflatten(-1, (self.layout.heads(role), -1))  # (..., H, dh)
            normed = getattr(module, norm_name)(heads).flatten(-2)  # (..., H * dh)
            output = output.index_copy(output.dim() - 1, rows, normed)  # (..., out)
        return output

    def take_off(self, module: nn.Module) -> None:
        for _, norm_name in self.blocks:
            delattr(module, norm_name)


def _blocks(site: ProjectionSite) -> tuple[tuple[str, str], ...]:
    """(stored role, LayerNorm name) of each block of ``site`` that forms the logits; () when there is none
    or the attention already normalises q and k itself (XCiT's XCA). Raises when qk_norm cannot apply."""
    acts_as = site.acts_as or site.layout.roles  # the role each stored block plays in the attention
    blocks = tuple((role, f"{acting}_norm") for role, acting in zip(site.layout.roles, acts_as) if acting != "v")
    if not blocks:
        return ()
    if site.qk_normalised == QK_L2_OVER_TOKENS:
        log.info("%s: XCA already L2-normalises q and k over the tokens; qk_norm leaves it", site.qualified_name)
        return ()
    if not site.activation_ok:
        raise ValueError(
            f"{site.qualified_name} ({site.source}): qk_norm hooks the module that outputs q and k, but this "
            "attention reads the weight directly instead of calling a Linear-like module (e.g. "
            "nn.MultiheadAttention.in_proj_weight); use a model whose q/k projections are Linear modules "
            "(timm ViT, transformers BERT) or one with its own qk normalisation"
        )
    if site.qk_normalised:
        raise ValueError(
            f"{site.attention_name or site.module_name} ({site.source}) already normalises q and k; build the "
            "model without its own qk_norm before applying qk_norm"
        )
    for _, name in blocks:
        if hasattr(site.module, name):
            raise ValueError(
                f"{site.module_name} already has an attribute {name!r} (qk_norm applied twice?); build a fresh model"
            )
    site.layout.check_shape(getattr(site.module, site.param_name).shape, site.qualified_name)
    return blocks


def _attach(site: ProjectionSite, blocks: tuple[tuple[str, str], ...], eps: float) -> None:
    """One LayerNorm(head_dim) child per block in ``blocks``, and the hook that applies them."""
    weight = getattr(site.module, site.param_name)
    out_features, _ = site.layout.check_shape(weight.shape, site.qualified_name)
    head_dim = site.layout.head_dim(out_features)
    for _, name in blocks:
        site.module.add_module(name, nn.LayerNorm(head_dim, eps=eps, device=weight.device, dtype=weight.dtype))
    site.module.register_forward_hook(QKNormHook(site.layout, blocks))
