"""Swin: timm's SwinTransformer in two stages of shifted windows (a line of registry.py; timm_family.py builds it).

Swin's stem patch is ``patch_size // 2``, so its last stage sees the ViT's grid g and its first stage 2g; the
window is g, which divides both, so stage 1 has 2x2 shifted windows and stage 2 one window. patch_size must be
even and divide image_size.
"""
from __future__ import annotations

from speccond.harness.models.timm_family import divisors

CLASS = "timm.models.swin_transformer.SwinTransformer"


def timm_kwargs(family: str, image: int, dim: int, depth: int, heads: int, patch: int) -> dict:
    if patch % 2 or image % patch:
        fits = [p for p in divisors(image) if p % 2 == 0]
        raise ValueError(
            f"swin: the stem patch is patch_size / 2 and the window the last stage's grid image_size / "
            f"patch_size, so patch_size must be even and divide image_size {image}; got {patch}, "
            f"patch sizes that fit: {fits}"
        )
    if depth < 2:
        raise ValueError(f"swin: two stages need depth >= 2 (one block each), got {depth}")
    grid = image // patch  # the ViT grid: stage 2's, and the window; stage 1 is 2 grid x 2 grid
    return dict(
        img_size=image, patch_size=patch // 2, embed_dim=dim, depths=(depth - depth // 2, depth // 2),
        num_heads=(heads, 2 * heads), window_size=grid,
    )
