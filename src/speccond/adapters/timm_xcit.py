"""timm XCiT (timm/models/xcit.py): cross-covariance attention ``XCA`` and class attention ``ClassAttn``.

- ``XCA``: ``qkv`` nn.Linear(dim, 3 * dim), blocks q, k, v, heads contiguous, called as ``self.qkv(x)``
  (both backends apply). Per head, q and k are read as (channels, tokens), each channel is
  L2-normalised over the tokens, and the (channels x channels) logits are scaled by a learned
  ``temperature``. The normalisation divides out the size of each q/k channel, so the magnitude of the
  Q/K correction is cancelled: only its direction survives (for large lam, q and k tend to the
  normalised input channels) and the logits stay bounded by the temperature. V is unaffected.
- ``ClassAttn`` (timm/models/cait.py, used by XCiT's class-attention blocks and by CaiT): separate
  nn.Linear ``q``, ``k``, ``v`` of shape (dim, dim), heads contiguous; q is computed from the class
  token only (``self.q(x[:, 0])``), k and v from all tokens. Called as modules: both backends apply.
"""
from __future__ import annotations

from torch import nn

from speccond.adapters.base import QK_L2_OVER_TOKENS, ProjectionSpec, class_path, is_linear
from speccond.adapters.timm_attention import TimmFusedQkvAdapter
from speccond.core.layout import ProjectionLayout

XCA_NORM_NOTE = (
    "XCA L2-normalises every q and k channel over the tokens and rescales the logits by a learned "
    "temperature, so the magnitude of the Q/K correction is cancelled (only its direction survives); "
    "V is unaffected"
)

TIMM_XCA = TimmFusedQkvAdapter(
    "timm XCiT XCA", ("timm.models.xcit.XCA",), notes=(XCA_NORM_NOTE,), qk_normalised=QK_L2_OVER_TOKENS,
    collapse_exempt="channel attention with cosine logits: |logit| <= the learned temperature whatever lam",
    head_reason="XCA is channel attention (cross-covariance of L2-normalised channels): there is no token "
    "attention to rebuild",
)


class TimmClassAttnAdapter:
    """timm ``ClassAttn``: separate q, k, v Linears, (out, in), heads contiguous."""

    name = "timm ClassAttn"
    head_reason = "class attention has one query (the class token), not a square token attention"

    def matches(self, module: nn.Module) -> bool:
        return (
            class_path(module) == "timm.models.cait.ClassAttn"
            and all(is_linear(getattr(module, role, None)) for role in "qkv")
            and isinstance(getattr(module, "num_heads", None), int)
        )

    def projections(self, module: nn.Module) -> list[ProjectionSpec]:
        return [
            ProjectionSpec(role, "weight", ProjectionLayout(roles=role, num_heads=module.num_heads), activation_ok=True)
            for role in "qkv"
        ]
