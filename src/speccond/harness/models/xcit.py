"""XCiT: timm's Xcit, cross-covariance (channel) attention blocks then 2 class-attention blocks.

XCiT's ``ConvPatchEmbed`` is a stack of stride-2 3x3 convolutions for patch 8 or 16 only: patch_size <= 8 uses
8 and larger uses 16. The padded convolutions give ceil(image_size / patch) tokens a side (28 px -> 4x4,
covering every pixel); timm's constructor asserts that the patch divides img_size, so it is given ``patch *
ceil(image_size / patch)`` (32 at 28 px), whose patch grid is the one the stem produces. XCA L2-normalises q
and k channels, so only V keeps the size of the correction (speccond's XCiT adapter reports this as a note).
"""
from __future__ import annotations

import logging
import math

log = logging.getLogger(__name__)

CLASS = "timm.models.xcit.Xcit"
XCIT_PATCHES = (8, 16)  # the patch sizes timm's XCiT ConvPatchEmbed implements


def timm_kwargs(family: str, image: int, dim: int, depth: int, heads: int, patch: int) -> dict:
    return dict(stem_sizes(family, image, dim, patch), embed_dim=dim, depth=depth, num_heads=heads, cls_attn_layers=2)


def stem_sizes(family: str, image: int, dim: int, patch: int) -> dict:
    """img_size and patch_size for the conv stem nearest ``patch``, refusing a width it cannot narrow."""
    stem = XCIT_PATCHES[0] if patch <= XCIT_PATCHES[0] else XCIT_PATCHES[1]
    if stem != patch:
        log.info("%s: patch_size %d -> %d (timm's XCiT conv stem implements %s)", family, patch, stem, XCIT_PATCHES)
    if dim % (stem // 2):
        raise ValueError(
            f"{family}: the patch-{stem} conv stem narrows embed_dim by {stem // 2} in its first layer, so embed_dim "
            f"must be a multiple of {stem // 2}; got {dim}"
        )
    grid = math.ceil(image / stem)  # the padded stride-2 convolutions round up
    return dict(img_size=grid * stem, patch_size=stem)
