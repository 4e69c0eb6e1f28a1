"""torch.nn.MultiheadAttention (and so nn.TransformerEncoder / nn.Transformer).

Fused: ``in_proj_weight`` (3 E, E), blocks q, k, v, (out, in). Separate (kdim or vdim differ from E):
``q_proj_weight`` (E, E), ``k_proj_weight`` (E, kdim), ``v_proj_weight`` (E, vdim). MultiheadAttention
reads these tensors directly (F.multi_head_attention_forward and the fused inference path), so only the
weight backend applies.
"""
from __future__ import annotations

import math

from torch import nn

from speccond.adapters.base import ProjectionSpec
from speccond.adapters.head_inputs import HeadInputs, argument, hidden_states
from speccond.core.layout import ProjectionLayout


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

    def head_inputs(self, module: nn.MultiheadAttention, args: tuple, kwargs: dict) -> HeadInputs:
        """Self-attention without masks: softmax(q k^T / sqrt(dh)) v, inputs (B, N, E) or (N, B, E)."""
        query = hidden_states(args, kwargs, "query")
        key, value = argument(args, kwargs, 1, "key"), argument(args, kwargs, 2, "value")
        if not (key is not None and value is not None and query.equal(key) and query.equal(value)):
            raise ValueError("head diagnostics of nn.MultiheadAttention need self-attention (query = key = value)")
        if any(kwargs.get(k) is not None for k in ("key_padding_mask", "attn_mask")) or kwargs.get("is_causal"):
            raise ValueError("masks of nn.MultiheadAttention are not supported by the head diagnostics")
        x = query if module.batch_first else query.transpose(0, 1)  # (B, N, E)
        return HeadInputs(x, 1.0 / math.sqrt(module.head_dim))
