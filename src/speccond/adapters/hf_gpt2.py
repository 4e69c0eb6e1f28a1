"""Hugging Face GPT-2 attention (``GPT2Attention``; also the transformers 4.x Sdpa/Flash subclasses and
``DecisionTransformerGPT2Attention``).

``c_attn`` is a transformers ``Conv1D``: y = x @ W + b with W stored (in, out) = (D, 3 D). Along the
output axis: blocks q, k, v (``split(split_size, dim=2)``), heads contiguous inside each block. For
cross-attention (``is_cross_attention``) ``c_attn`` is (D, 2 D) holding k, v from the encoder states and
``q_attn`` a separate (D, D) Conv1D for q. GPT2Attention calls ``self.c_attn(x)`` and Conv1D's forward
reads ``self.weight``: both backends apply (the activation hook adds x C^T to the Conv1D's output).
"""
from __future__ import annotations

import math

from torch import nn

from speccond.adapters.base import ProjectionSpec, class_path, is_conv1d
from speccond.adapters.head_inputs import HeadInputs, additive_mask, hidden_states
from speccond.core.layout import ProjectionLayout


class HFGPT2AttentionAdapter:
    name = "transformers GPT-2 c_attn (Conv1D, in-out)"

    def matches(self, module: nn.Module) -> bool:
        path = class_path(module)
        if not path.startswith("transformers.models.") or "GPT2" not in path.rsplit(".", 1)[-1]:
            return False
        heads, dim = getattr(module, "num_heads", None), getattr(module, "embed_dim", None)
        if not (isinstance(heads, int) and isinstance(dim, int) and is_conv1d(getattr(module, "c_attn", None))):
            return False
        if getattr(module, "is_cross_attention", False):
            return module.c_attn.nf == 2 * dim and is_conv1d(getattr(module, "q_attn", None))
        return module.c_attn.nf == 3 * dim

    def projections(self, module: nn.Module) -> list[ProjectionSpec]:
        heads = module.num_heads
        if getattr(module, "is_cross_attention", False):
            return [
                ProjectionSpec("q_attn", "weight", ProjectionLayout("q", heads, storage="in_out"), activation_ok=True),
                ProjectionSpec("c_attn", "weight", ProjectionLayout("kv", heads, storage="in_out"), activation_ok=True),
            ]
        layout = ProjectionLayout("qkv", heads, storage="in_out")
        return [ProjectionSpec("c_attn", "weight", layout, activation_ok=True)]

    def head_inputs(self, module: nn.Module, args: tuple, kwargs: dict) -> HeadInputs:
        """Causal self-attention, scale 1 / sqrt(dh) (or 1 with ``scale_attn_weights=False``), the model's mask."""
        if getattr(module, "is_cross_attention", False):
            raise ValueError("head diagnostics of GPT-2 cross-attention are not supported")
        if getattr(module, "scale_attn_by_inverse_layer_idx", False) or getattr(module, "reorder_and_upcast_attn", False):
            raise ValueError("GPT-2 scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn are not rebuilt")
        scale = 1.0 / math.sqrt(module.head_dim) if getattr(module, "scale_attn_weights", True) else 1.0
        mask = additive_mask(kwargs.get("attention_mask"))
        return HeadInputs(hidden_states(args, kwargs), scale, mask, causal=mask is None)  # a mask holds causality
