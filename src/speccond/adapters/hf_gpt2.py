"""Hugging Face GPT-2 attention (``GPT2Attention``; also the transformers 4.x Sdpa/Flash subclasses and
``DecisionTransformerGPT2Attention``).

``c_attn`` is a transformers ``Conv1D``: y = x @ W + b with W stored (in, out) = (D, 3 D). Along the
output axis: blocks q, k, v (``split(split_size, dim=2)``), heads contiguous inside each block. For
cross-attention (``is_cross_attention``) ``c_attn`` is (D, 2 D) holding k, v from the encoder states and
``q_attn`` a separate (D, D) Conv1D for q. GPT2Attention calls ``self.c_attn(x)`` and Conv1D's forward
reads ``self.weight``: both backends apply (the activation hook adds x C^T to the Conv1D's output).
"""
from __future__ import annotations

from torch import nn

from speccond.adapters.base import ProjectionSpec, class_path, is_conv1d
from speccond.layout import ProjectionLayout


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
