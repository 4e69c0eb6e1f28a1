"""timm attention modules speccond refuses, each with the reason, so that ``apply`` stops before anything
is attached instead of leaving them plain or guessing a layout.

- Unequal per-head widths: EfficientFormer ``Attention`` (efficientformer.py) and TinyViT ``Attention``
  (tiny_vit.py) hold, per head, q and k of ``key_dim`` features and v of ``attn_ratio * key_dim``
  (``reshape(B, N, H, -1).split([kd, kd, vd])``). A ProjectionLayout has one head width per weight.
- LeViT ``Attention`` / ``AttentionDownsample`` (levit.py): ``qkv`` (and ``q``, ``kv``) are LinearNorm /
  ConvNorm, a Linear (or 1x1 conv) followed by BatchNorm. The BatchNorm rescales and shifts every output
  feature after the weight, so lam I_k added to the weight is not lam I_k on the projection; and the
  per-head widths are unequal as above.
- 1x1 convolutions: Visformer ``Attention`` (visformer.py) and MaxxViT / CoAtNet ``Attention2d``
  (maxxvit.py) project with ``nn.Conv2d(dim, 3 * A, 1)``. A 1x1 conv is a linear map, but its weight is
  4-D (3A, D, 1, 1) and speccond's layouts and both backends take 2-D weights.
- CoaT ``FactorAttnConvRelPosEnc`` (coat.py): factorised attention q (softmax_N(k)^T v) plus a
  convolutional position term q * conv(v). There is no softmax(q k^T) whose conditioning the correction
  is for, and the output is linear in q, so the paper's correction has no meaning there.
- EfficientViT (MIT) ``LiteMLA`` (efficientvit_mit.py): ReLU linear attention, relu(q) (relu(k)^T v)
  normalised by relu(q) sum relu(k), with 1x1-conv projections: no softmax over q k^T.
- EfficientViT (MSRA) ``CascadedGroupAttention`` (efficientvit_msra.py): softmax attention, but each head's
  q, k, v come from its own ConvNorm (1x1 conv + BatchNorm) with q, k of key_dim and v of d features, and
  each head reads its input plus the previous head's output (the cascade).
- MobileViTv2 ``LinearSelfAttention`` (timm mobilevit.py, and transformers'
  ``MobileViTV2LinearSelfAttention``, claimed here by class path too): separable self-attention, a softmax
  over one context score per token from a 1-channel slice of a 1x1-conv projection: no q k^T.
- SwiftFormer ``EfficientAdditiveAttention`` (swiftformer.py): additive attention. Its ``to_query`` and
  ``to_key`` are L2-normalised; one global query, a weighted sum of the queries with weights from a
  learned vector ``w_g``, multiplies every key elementwise: no q k^T, no softmax.
- VOLO ``OutlookAttention`` (volo.py): each token's weights over its k x k window come from a Linear of the
  (pooled) token itself, ``attn``, not from q k^T; only ``v`` is a projection of the kind the paper
  conditions. VOLO's later stages (timm ``Attention``, ``ClassAttention``) are conditioned once these are
  excluded.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from speccond.adapters.base import ProjectionSpec, class_path

_UNEQUAL = (
    "each head holds q and k of key_dim features and v of attn_ratio * key_dim features in one weight; a "
    "ProjectionLayout needs one head width per weight"
)
_NO_QK_SOFTMAX = "there is no softmax over query-key scores q k^T for the correction to condition"
_CONV = (
    "its q/k/v projection is a 1x1 nn.Conv2d with a 4-D weight (3A, D, 1, 1); speccond's layouts and "
    "backends take 2-D weights"
)


@dataclass(frozen=True)
class TimmRefusedAdapter:
    """Claims a timm attention class and refuses it: ``projections`` raises ValueError with ``reason``
    (``find_projections`` skips modules that ``exclude`` leaves out before asking, so excluding works)."""

    name: str
    class_paths: tuple[str, ...]
    reason: str

    def matches(self, module: nn.Module) -> bool:
        return class_path(module) in self.class_paths

    def projections(self, module: nn.Module) -> list[ProjectionSpec]:
        raise ValueError(
            f"{self.name} ({class_path(module)}) cannot be conditioned by speccond: {self.reason}. To condition "
            "the rest of the model, leave these modules plain: SpectralConfig(exclude=[<their module names>])"
        )


TIMM_REFUSED = (
    TimmRefusedAdapter(
        "timm EfficientFormer / TinyViT Attention",
        ("timm.models.efficientformer.Attention", "timm.models.tiny_vit.Attention"), _UNEQUAL,
    ),
    TimmRefusedAdapter(
        "timm LeViT attention", ("timm.models.levit.Attention", "timm.models.levit.AttentionDownsample"),
        "its projections are LinearNorm/ConvNorm (a Linear or 1x1 conv followed by BatchNorm, which rescales "
        "every output feature after the weight, so lam I_k on the weight is not lam I_k on the projection), "
        f"and {_UNEQUAL}",
    ),
    TimmRefusedAdapter(
        "timm 1x1-conv attention (Visformer, MaxxViT/CoAtNet Attention2d)",
        ("timm.models.visformer.Attention", "timm.models.maxxvit.Attention2d"), _CONV,
    ),
    TimmRefusedAdapter(
        "timm CoaT factorized attention", ("timm.models.coat.FactorAttnConvRelPosEnc",),
        "factorized attention computes q (softmax over tokens of k)^T v plus a convolutional term in q and v: "
        "there is no softmax(q k^T) for the correction to condition, and the output is linear in q",
    ),
    TimmRefusedAdapter(
        "timm EfficientViT (MIT) ReLU linear attention", ("timm.models.efficientvit_mit.LiteMLA",),
        "it is ReLU linear attention, relu(q) (relu(k)^T v) / (relu(q) sum relu(k)), with 1x1-convolution "
        f"projections (4-D weights): {_NO_QK_SOFTMAX}",
    ),
    TimmRefusedAdapter(
        "timm EfficientViT (MSRA) cascaded group attention", ("timm.models.efficientvit_msra.CascadedGroupAttention",),
        "each head has its own q, k, v projection, a ConvNorm (1x1 convolution with a 4-D weight, then BatchNorm, "
        "which rescales every output feature after the weight, so lam I_k on the weight is not lam I_k on the "
        "projection), with q, k of key_dim and v of another width; and each head reads its input plus the "
        "previous head's output",
    ),
    TimmRefusedAdapter(
        "MobileViTv2 separable self-attention",
        ("timm.models.mobilevit.LinearSelfAttention",
         "transformers.models.mobilevitv2.modeling_mobilevitv2.MobileViTV2LinearSelfAttention"),
        "separable self-attention takes a softmax over one context score per token (a 1-channel slice of a "
        f"1x1-convolution projection) and weights the keys' sum with it: {_NO_QK_SOFTMAX}",
    ),
    TimmRefusedAdapter(
        "SwiftFormer additive attention", ("timm.models.swiftformer.EfficientAdditiveAttention",),
        "additive attention multiplies each L2-normalised key elementwise by one global query (the queries summed "
        f"with weights from the learned vector w_g), with no softmax: {_NO_QK_SOFTMAX}",
    ),
    TimmRefusedAdapter(
        "VOLO outlook attention", ("timm.models.volo.OutlookAttention",),
        "outlook attention's weights over each k x k window come from a Linear of the token itself (attn), not "
        f"from queries and keys: {_NO_QK_SOFTMAX}",
    ),
)
