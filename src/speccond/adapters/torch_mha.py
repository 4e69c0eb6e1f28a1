"""torch.nn.MultiheadAttention (and so nn.TransformerEncoder / nn.Transformer).

Fused: ``in_proj_weight`` (3 E, E), blocks q, k, v, (out, in). Separate (kdim or vdim differ from E):
``q_proj_weight`` (E, E), ``k_proj_weight`` (E, kdim), ``v_proj_weight`` (E, vdim). MultiheadAttention
reads these tensors directly (F.multi_head_attention_forward and the fused inference path), so only the
weight backend applies.
"""
from __future__ import annotations

from torch import nn

from speccond.adapters.base import ProjectionSpec
from speccond.layout import ProjectionLayout


class TorchMultiheadAttentionAdapter:
    name = "torch.nn.MultiheadAttention"

    def matches(self, module: nn.Module) -> bool:
        return isinstance(module, nn.MultiheadAttention)

    def projections(self, module: nn.Module) -> list[ProjectionSpec]:
        heads = module.num_heads
        if module._qkv_same_embed_dim:
            layout = ProjectionLayout(roles="qkv", num_heads=heads)
            return [ProjectionSpec("", "in_proj_weight", layout, activation_ok=False)]
        return [
            ProjectionSpec("", f"{role}_proj_weight", ProjectionLayout(roles=role, num_heads=heads), False)
            for role in "qkv"
        ]
