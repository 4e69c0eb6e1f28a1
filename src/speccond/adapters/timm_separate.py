"""timm attention modules whose q, k, v live in two or three separate nn.Linears, each (out, in), heads
contiguous, each called as a module (both backends apply).

- CrossViT ``CrossAttention`` (crossvit.py): ``wq``, ``wk``, ``wv`` (dim, dim); q from the class token of
  one branch only (``self.wq(x[:, 0:1])``), k and v from all its tokens. One query: no square attention.
- TNT ``Attention`` (tnt.py, inner pixel and outer patch attention): ``qk`` (2 * hidden_dim, dim), blocks
  q, k; ``v`` (dim, dim). q/k heads are hidden_dim / H wide, v heads dim / H: each weight has its own
  head width, and the qk blocks are rectangular when hidden_dim != dim. Plain softmax(scale q k^T) v.
- ConViT ``GPSA`` (convit.py): ``qk`` (2 * dim, dim), blocks q, k; ``v`` (dim, dim). The attention is a
  gated mix (1 - g) softmax(scale q k^T) + g softmax(positional scores), renormalised, with a learned
  per-head gate g = sigmoid(gating_param). The correction conditions the content term exactly as the
  paper says; the positional term does not read q or k and is not bounded by it, and a head whose gate
  is near 1 barely sees the correction. V is corrected as usual.
- PVT-v2 ``Attention`` (pvt_v2.py) and Twins ``GlobalSubSampleAttn`` (twins.py): ``q`` (dim, dim) on the
  tokens, ``kv`` (2 * dim, dim), blocks k, v, on the spatially reduced tokens (``sr`` strided conv +
  LayerNorm; PVT-v2 ``linear`` also pools to 7x7). k and v are still linear maps of their input (the
  reduced tokens), so K = X' (W_K + lam I) is the paper's correction on that input. With ``sr_ratio`` 1
  (no reduction) it is plain self-attention and the heads are rebuilt; with a reduction the keys come
  from another sequence than the queries and the head diagnostics refuse.
- MViTv2 ``MultiScaleAttentionPoolFirst`` (mvitv2.py, ``pool_first=True``): ``q``, ``k``, ``v`` (dim_out,
  dim) applied after pooling and normalising the input, so each is a linear map of its pooled input;
  see timm_pooled.py for the default MViTv2 attention.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from torch import nn

from speccond.adapters.base import ProjectionSpec, class_path, is_linear
from speccond.adapters.head_inputs import HeadInputs, RebuiltByForm, hidden_states
from speccond.adapters.timm_attention import HeadForm
from speccond.core.layout import ProjectionLayout


@dataclass(frozen=True)
class TimmProjectionsAdapter(RebuiltByForm):
    """A timm module with separate projection Linears ``parts`` = ((attribute, roles), ...), (out, in),
    heads contiguous within each block, all with the module's head count.

    Attributes: as :class:`speccond.adapters.timm_attention.TimmFusedQkvAdapter`; ``probe_skip`` tells
    ``verify`` why it cannot read role and head signatures off the module's output ("" = it can).
    """

    name: str
    class_paths: tuple[str, ...]
    parts: tuple[tuple[str, str], ...]
    heads_attr: str = "num_heads"
    notes: tuple[str, ...] = ()
    head_form: Optional[HeadForm] = None
    head_reason: str = ""
    probe_skip: str = ""

    def matches(self, module: nn.Module) -> bool:
        heads = getattr(module, self.heads_attr, None)
        return (
            class_path(module) in self.class_paths
            and all(is_linear(getattr(module, attr, None)) for attr, _ in self.parts)
            and isinstance(heads, int)
            and not isinstance(heads, bool)
        )

    def projections(self, module: nn.Module) -> list[ProjectionSpec]:
        heads = getattr(module, self.heads_attr)
        return [
            ProjectionSpec(attr, "weight", ProjectionLayout(roles, heads), activation_ok=True, notes=self.notes,
                           probe_skip=self.probe_skip)
            for attr, roles in self.parts
        ]


def plain_inputs(module: nn.Module, args: tuple, kwargs: dict) -> HeadInputs:
    """softmax(module.scale q k^T) over all tokens of the (B, N, D) input."""
    return HeadInputs(hidden_states(args, kwargs, "x"), float(module.scale))


def reduced_kv_inputs(module: nn.Module, args: tuple, kwargs: dict) -> HeadInputs:
    """PVT-v2 / Twins: plain self-attention when the keys are not spatially reduced."""
    if getattr(module, "sr", None) is not None or getattr(module, "pool", None) is not None:
        raise ValueError(
            "its keys and values come from spatially reduced tokens (sr_ratio > 1 or linear pooling), not from "
            "the queries' sequence: there is no square token attention to rebuild"
        )
    return plain_inputs(module, args, kwargs)


TIMM_CROSSVIT = TimmProjectionsAdapter(
    "timm CrossViT CrossAttention", ("timm.models.crossvit.CrossAttention",), (("wq", "q"), ("wk", "k"), ("wv", "v")),
    head_reason="cross-attention has one query (the class token), not a square token attention",
)
TIMM_TNT = TimmProjectionsAdapter(
    "timm TNT Attention", ("timm.models.tnt.Attention",), (("qk", "qk"), ("v", "v")), head_form=plain_inputs
)
TIMM_CONVIT_GPSA = TimmProjectionsAdapter(
    "timm ConViT GPSA", ("timm.models.convit.GPSA",), (("qk", "qk"), ("v", "v")),
    head_reason="gated positional self-attention mixes the content softmax with a positional softmax",
)
TIMM_REDUCED_KV = TimmProjectionsAdapter(
    "timm spatial-reduction attention (PVT-v2, Twins GSA)",
    ("timm.models.pvt_v2.Attention", "timm.models.twins.GlobalSubSampleAttn"), (("q", "q"), ("kv", "kv")),
    head_form=reduced_kv_inputs,
)
TIMM_MVIT_POOL_FIRST = TimmProjectionsAdapter(
    "timm MViTv2 MultiScaleAttentionPoolFirst", ("timm.models.mvitv2.MultiScaleAttentionPoolFirst",),
    (("q", "q"), ("k", "k"), ("v", "v")),
    head_reason="MViTv2 pools the queries and keys and adds decomposed relative position terms",
    probe_skip="the pooled queries are added to the output (residual pooling)",
)
