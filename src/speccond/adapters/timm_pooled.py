"""timm attention with pooling after the projection: MViTv2 ``MultiScaleAttention`` (mvitv2.py) and Hiera
``MaskUnitAttention`` (hiera.py). Both hold q, k, v in one ``qkv`` nn.Linear (3 * A, D), (out, in),
blocks q, k, v, heads contiguous, called as ``self.qkv(x)`` (both backends apply); A (``dim_out``) may
differ from D, so the blocks may be rectangular.

- MViTv2: after the projection, each head's q, k, v are pooled (``pool_q/k/v``: depthwise strided convs,
  or max/avg pools) and layer-normalised (``norm_q/k/v``); the logits get decomposed relative position
  terms that read q; the pooled q is added to the output (``residual_pooling``). The correction is the
  paper's on the projections; the layer norms after pooling rescale each head's q, k and v, so the
  magnitude of the correction is partly cancelled on all three (a report note), and what the softmax
  sees is the pooled, normalised product. ``verify`` cannot read signatures off the output (the pooled
  q is added to it), so it checks only that the correction takes effect.
- Hiera: attention inside mask units (or global), with q max-pooled over ``q_stride`` tokens after the
  projection (``amax``). Head count attribute ``heads``. The correction is the paper's on q, k, v; the
  max pooling picks, per feature, the largest corrected query of each pooled group.
"""
from __future__ import annotations

from dataclasses import replace

from torch import nn

from speccond.adapters.timm_attention import TimmFusedQkvAdapter

MVIT_NORM_NOTE = (
    "MViTv2 layer-normalises every head's pooled q, k and v after the projection, so the magnitude of the "
    "correction is partly cancelled on all three"
)
MVIT_COLLAPSE_EXEMPT = (
    "MViTv2 pools q and k over the tokens before the logits, so a query and a key of the same position are "
    "not one token's; the prediction, which pairs them, does not describe it"
)
MVIT_PROBE_SKIP = "the pooled queries are added to the output (residual pooling) and q, k, v are normalised after pooling"


class TimmMultiScaleAdapter(TimmFusedQkvAdapter):
    """MViTv2 MultiScaleAttention: note the post-pooling norms; ``verify`` checks only that C takes effect."""

    def projections(self, module: nn.Module):
        norms = any(getattr(module, f"norm_{r}", None) is not None for r in "qkv")
        notes = self.notes + ((MVIT_NORM_NOTE,) if norms else ())
        pooled = getattr(module, "pool_q", None) is not None or getattr(module, "pool_k", None) is not None
        exempt = MVIT_COLLAPSE_EXEMPT if pooled else ""
        return [
            replace(spec, notes=notes, probe_skip=MVIT_PROBE_SKIP, collapse_exempt=spec.collapse_exempt or exempt)
            for spec in super().projections(module)
        ]


TIMM_MVIT = TimmMultiScaleAdapter(
    "timm MViTv2 MultiScaleAttention", ("timm.models.mvitv2.MultiScaleAttention",),
    head_reason="MViTv2 pools and normalises q, k, v after the projection and adds decomposed relative "
    "position terms; the head diagnostics rebuild unpooled attention only",
)
TIMM_HIERA = TimmFusedQkvAdapter(
    "timm Hiera MaskUnitAttention", ("timm.models.hiera.MaskUnitAttention",), heads_attr="heads",
    head_reason="Hiera attends inside mask units and max-pools its queries; the head diagnostics rebuild "
    "attention over whole token sequences only",
)
