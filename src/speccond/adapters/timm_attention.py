"""timm's ``Attention`` (ViT, DeiT and the many models built on timm.layers.Attention).

``qkv`` is an nn.Linear of shape (3 * num_heads * head_dim, dim), blocks q, k, v, heads contiguous inside
each block, (out, in). timm calls ``self.qkv(x)``, so both backends apply.
"""
from __future__ import annotations

from torch import nn

from speccond.adapters.base import ProjectionSpec, class_path
from speccond.layout import ProjectionLayout

QK_NORM_NOTE = (
    "q/k normalisation after the projection (qk_norm) rescales each head's q and k, so part of the "
    "Q/K correction is cancelled; V is unaffected"
)


class TimmAttentionAdapter:
    name = "timm Attention"

    def matches(self, module: nn.Module) -> bool:
        return (
            class_path(module) == "timm.layers.attention.Attention"
            and isinstance(getattr(module, "qkv", None), nn.Linear)
            and isinstance(getattr(module, "num_heads", None), int)
        )

    def projections(self, module: nn.Module) -> list[ProjectionSpec]:
        layout = ProjectionLayout(roles="qkv", num_heads=module.num_heads)
        notes = ()
        if not isinstance(getattr(module, "q_norm", nn.Identity()), nn.Identity):
            notes = (QK_NORM_NOTE,)
        return [ProjectionSpec("qkv", "weight", layout, activation_ok=True, notes=notes)]
