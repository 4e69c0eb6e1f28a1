"""timm DaViT (timm/models/davit.py): spatial ``WindowAttention`` and channel ``ChannelAttention``.

All three store ``qkv`` as nn.Linear(dim, 3 * dim), blocks q, k, v, heads contiguous
(``reshape(B, N, 3, H, C // H)``), and call ``self.qkv(x)``: both backends apply.

- ``WindowAttention``: softmax(q k^T) v inside windows, the paper's form.
- ``ChannelAttention`` (DaViT v1, ``davit_tiny`` ... ``davit_base``): attention over channels,
  x = q softmax(scale * k^T v)^T per head. The two projections inside the softmax are timm's k and v,
  and q is the one being mixed, so timm's q, k, v blocks play the paper's V, Q, K roles. The
  correction is placed by timm's names (``lam_q`` acts on timm's q block); with one lam for all three,
  as the paper uses, this makes no difference. Not a report note: it is not a loss of correction, and
  a warning on every DaViT would be noise.
- ``ChannelAttentionV2`` (``davit_base_fl``, ``davit_huge_fl``): softmax(q^T k) applied to v over
  channels, timm's names in the paper's roles; its head count is the attribute ``groups``.
"""
from __future__ import annotations

from speccond.adapters.base import CHANNEL_EXEMPT
from speccond.adapters.timm_attention import TimmFusedQkvAdapter

_CHANNEL = "channel attention mixes channels, not tokens: there is no token attention to rebuild"
TIMM_DAVIT_WINDOW = TimmFusedQkvAdapter(
    "timm DaViT WindowAttention", ("timm.models.davit.WindowAttention",),
    head_reason="DaViT's spatial attention runs inside windows; the head diagnostics rebuild attention over "
    "whole token sequences only",
)
TIMM_DAVIT_CHANNEL = TimmFusedQkvAdapter(
    "timm DaViT ChannelAttention", ("timm.models.davit.ChannelAttention",), acts_as="vqk", head_reason=_CHANNEL,
    collapse_exempt=CHANNEL_EXEMPT,
)
TIMM_DAVIT_CHANNEL_V2 = TimmFusedQkvAdapter(
    "timm DaViT ChannelAttentionV2", ("timm.models.davit.ChannelAttentionV2",), heads_attr="groups", head_reason=_CHANNEL,
    collapse_exempt=CHANNEL_EXEMPT,
)
