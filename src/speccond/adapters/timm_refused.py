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
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from speccond.adapters.base import ProjectionSpec, class_path

_UNEQUAL = (
    "each head holds q and k of key_dim features and v of attn_ratio * key_dim features in one weight; a "
    "ProjectionLayout needs one head width per weight"
)
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
)
