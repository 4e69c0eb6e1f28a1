"""CaiT: timm's Cait, ViT-like self-attention blocks with talking heads and layer scale over the patch
tokens only, then 2 class-attention blocks in which the class token attends to the patches (Touvron et
al., 2021). Its patch_size is taken as given and must divide image_size, as for the ViT.
"""
from __future__ import annotations

from speccond.harness.models.vit import timm_kwargs as _vit_kwargs

CLASS = "timm.models.cait.Cait"
CLASS_ATTENTION_BLOCKS = 2  # timm's default depth_token_only, as at full size


def timm_kwargs(family: str, image: int, dim: int, depth: int, heads: int, patch: int) -> dict:
    return dict(_vit_kwargs(family, image, dim, depth, heads, patch), depth_token_only=CLASS_ATTENTION_BLOCKS)
