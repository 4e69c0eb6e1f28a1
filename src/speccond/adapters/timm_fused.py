"""More timm modules with one fused ``qkv`` nn.Linear in ViT's layout: (3 * A, D), (out, in), blocks q, k,
v, heads contiguous (``reshape(B, N, 3, H, dh)``), called as ``self.qkv(x)`` (both backends apply).

- CaiT ``TalkingHeadAttn`` (cait.py): talking-heads attention. The logits scale q k^T of all heads are
  mixed across heads by a learned H x H map (``proj_l``) before the softmax, and the probabilities again
  (``proj_w``) after it. The correction is placed on q, k, v exactly as in ViT, so each head's own
  q k^T is conditioned; the logits the softmax sees are learned mixtures of those (not bounded by the
  correction alone), and each head's output mixes every head's probabilities. Heads are not separable,
  so ``verify`` checks only that the correction takes effect and the head diagnostics refuse.
  (CaiT's class-attention blocks are ``ClassAttn``: see timm_xcit.py.)
- ConViT ``MHSA`` (convit.py, the blocks after ``local_up_to_layer``): plain softmax(scale q k^T) v.
- FastViT ``Attention`` (fastvit.py, stages with ``token_mixers="attention"``): takes a (B, C, H, W) map,
  flattens it to (B, H * W, C) tokens and runs plain softmax(scale q k^T) v on them.
"""
from __future__ import annotations

from dataclasses import replace

from torch import nn

from speccond.adapters.head_inputs import HeadInputs, argument
from speccond.adapters.timm_attention import TimmFusedQkvAdapter
from speccond.adapters.timm_separate import plain_inputs

TALKING_HEADS_PROBE_SKIP = "talking heads mix the logits and the probabilities across heads"


def fastvit_inputs(module: nn.Module, args: tuple, kwargs: dict) -> HeadInputs:
    """FastViT: the (B, C, H, W) input as (B, H * W, C) tokens, then plain attention."""
    x = argument(args, kwargs, 0, "x")
    if x is not None and x.dim() == 4:
        x = x.flatten(2).transpose(-2, -1)  # (B, N, C)
    return plain_inputs(module, (x,), {})


class TimmTalkingHeadsAdapter(TimmFusedQkvAdapter):
    """CaiT TalkingHeadAttn: the fused qkv of ViT; ``verify`` cannot separate its heads."""

    def projections(self, module: nn.Module):
        return [replace(spec, probe_skip=TALKING_HEADS_PROBE_SKIP) for spec in super().projections(module)]


TIMM_CAIT_TALKING_HEADS = TimmTalkingHeadsAdapter(
    "timm CaiT TalkingHeadAttn", ("timm.models.cait.TalkingHeadAttn",),
    head_reason="talking heads mix the logits and the probabilities across heads, so no head has its own "
    "softmax(q k^T)",
)
TIMM_CONVIT_MHSA = TimmFusedQkvAdapter("timm ConViT MHSA", ("timm.models.convit.MHSA",), head_form=plain_inputs)
TIMM_FASTVIT = TimmFusedQkvAdapter("timm FastViT Attention", ("timm.models.fastvit.Attention",), head_form=fastvit_inputs)
