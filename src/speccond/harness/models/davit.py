"""DaViT: timm's DaVit, pairs of spatial-window and channel attention blocks (a line of registry.py).

DaViT's stem asserts stride 4, so patch_size is not used (logged when it is not 4). Its window attention pads
the grid to a multiple of the window with zero tokens that the real tokens then attend to, so the window must
divide every stage's grid: two stages when the stem grid is even (32 px: 8x8 and 4x4, window 4), one stage
with a global window when it is odd (28 px: 7x7, window 7) or when depth gives a single pair.
"""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)

CLASS = "timm.models.davit.DaVit"
DAVIT_STEM_STRIDE = 4  # timm's DaViT Stem asserts stride 4


def timm_kwargs(family: str, image: int, dim: int, depth: int, heads: int, patch: int) -> dict:
    if patch != DAVIT_STEM_STRIDE:
        log.info("davit: patch_size %d not used; timm's DaViT stem has stride %d", patch, DAVIT_STEM_STRIDE)
    if image % DAVIT_STEM_STRIDE:
        raise ValueError(
            f"davit: the stride-{DAVIT_STEM_STRIDE} stem needs image_size a multiple of {DAVIT_STEM_STRIDE} "
            f"(else it pads the image), got {image}"
        )
    if depth % 2:
        raise ValueError(f"davit: a DaViT block is a (spatial, channel) pair, so depth must be even, got {depth}")
    grid, pairs = image // DAVIT_STEM_STRIDE, depth // 2
    if grid % 2 == 0 and pairs >= 2:  # window grid / 2 divides stage 1 (grid) and stage 2 (grid / 2)
        return dict(
            depths=(pairs - pairs // 2, pairs // 2), embed_dims=(dim, 2 * dim), num_heads=(heads, 2 * heads),
            window_size=grid // 2,
        )
    return dict(depths=(pairs,), embed_dims=(dim,), num_heads=(heads,), window_size=grid)
