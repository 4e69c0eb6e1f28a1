"""XCiT without timm's two class-attention blocks (a softmax over tokens), pooled by the mean of the patch
tokens: only XCA's channel attention, as in the detection trunk. It tests whether the class attention is why
lam = 10 collapses the classification XCiT but not the detection one (docs/RESULTS.md). Sizes as xcit.py.
"""
from __future__ import annotations

from speccond.harness.models.xcit import CLASS, stem_sizes  # noqa: F401  (the same timm class)


def timm_kwargs(family: str, image: int, dim: int, depth: int, heads: int, patch: int) -> dict:
    return dict(stem_sizes(family, image, dim, patch), embed_dim=dim, depth=depth, num_heads=heads,
                cls_attn_layers=0, global_pool="avg")
