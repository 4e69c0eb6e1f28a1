"""ViT: timm's VisionTransformer, a class token and patch tokens (a line of registry.py; timm_family.py builds it).

ViT and DeiT take patch_size as given; it must divide image_size (timm would drop the border).
"""
from __future__ import annotations

from speccond.harness.models.timm_family import divisors

CLASS = "timm.models.vision_transformer.VisionTransformer"


def timm_kwargs(family: str, image: int, dim: int, depth: int, heads: int, patch: int) -> dict:
    if image % patch:
        raise ValueError(
            f"{family}: patch_size {patch} does not divide image_size {image} (the border would be dropped); "
            f"patch sizes that fit: {divisors(image)}"
        )
    return dict(img_size=image, patch_size=patch, embed_dim=dim, depth=depth, num_heads=heads)
