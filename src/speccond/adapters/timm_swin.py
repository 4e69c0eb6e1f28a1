"""timm Swin ``WindowAttention`` (timm/models/swin_transformer.py): attention inside shifted windows.

``qkv`` is nn.Linear(dim, 3 * attn_dim) with attn_dim = num_heads * head_dim, and ``head_dim`` is a
constructor argument, so attn_dim may differ from the model width dim: each q/k/v block is then a
rectangular (attn_dim, dim) matrix and gets lam times its rectangular identity I_k. Blocks q, k, v,
heads contiguous (``reshape(B, N, 3, H, -1)``), called as ``self.qkv(x)``: both backends apply. The
relative position bias is added to the logits after the projection and is not touched.
"""
from __future__ import annotations

from speccond.adapters.timm_attention import TimmFusedQkvAdapter

TIMM_SWIN = TimmFusedQkvAdapter(
    "timm Swin WindowAttention", ("timm.models.swin_transformer.WindowAttention",),
    head_reason="Swin attends inside (shifted) windows with a relative position bias; the head diagnostics "
    "rebuild attention over whole token sequences only",
)
