"""timm attention modules with one fused ``qkv`` nn.Linear, and the ViT/DeiT ``Attention``.

All of them store ``qkv.weight`` as (3 * A, D), (out, in): blocks q, k, v along the output axis, heads
contiguous inside each block (their forward does ``self.qkv(x).reshape(B, N, 3, H, A // H)``), and call
``self.qkv(x)`` as a module, so both backends apply. A (the attention width) may differ from D: the
blocks are then rectangular and C = lam * I_k is the rectangular identity of each (A, D) block.

One adapter class serves every such module; the families (ViT/DeiT here, Swin, DaViT, XCiT in their
own files) differ only in the class path, the attribute holding the head count, and caveats to report.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from torch import nn

from speccond.adapters.base import (
    QK_LAYER_NORM, QK_NORM_NOTE, ProjectionSpec, class_path, is_linear,
)
from speccond.adapters.head_inputs import HeadInputs, RebuiltByForm, has_module, hidden_states
from speccond.core.layout import ProjectionLayout

HeadForm = Callable[[nn.Module, tuple, dict], HeadInputs]


@dataclass(frozen=True)
class TimmFusedQkvAdapter(RebuiltByForm):
    """A timm module whose ``qkv`` Linear holds q, k, v blocked, heads contiguous, (out, in).

    Attributes:
        name: shown in reports and errors.
        class_paths: ``module.Class`` paths this adapter claims (seen through parametrization swaps).
        heads_attr: the module attribute holding the head count ("num_heads"; DaViT V2 uses "groups").
        notes: caveats reported and warned for every projection of this family.
        acts_as: the paper's roles of timm's q, k, v blocks when they differ (DaViT v1 channel attention).
        head_form: how the module forms its logits on a captured input (``head_inputs``), or None when the
            head diagnostics cannot rebuild its heads; ``head_reason`` then says why.
    """

    name: str
    class_paths: tuple[str, ...]
    heads_attr: str = "num_heads"
    notes: tuple[str, ...] = ()
    acts_as: str = ""
    head_form: Optional[HeadForm] = None
    head_reason: str = ""
    collapse_exempt: str = ""
    qk_normalised: str = ""  # how the family itself normalises q and k (ProjectionSpec.qk_normalised)

    def matches(self, module: nn.Module) -> bool:
        heads = getattr(module, self.heads_attr, None)
        return (
            class_path(module) in self.class_paths
            and is_linear(getattr(module, "qkv", None))
            and isinstance(heads, int)
            and not isinstance(heads, bool)
        )

    def projections(self, module: nn.Module) -> list[ProjectionSpec]:
        layout = ProjectionLayout(roles="qkv", num_heads=getattr(module, self.heads_attr))
        notes, exempt, normalised = self.notes, self.collapse_exempt, self.qk_normalised
        if not isinstance(getattr(module, "q_norm", nn.Identity()), nn.Identity):
            notes, normalised = notes + (QK_NORM_NOTE,), QK_LAYER_NORM
        return [
            ProjectionSpec("qkv", "weight", layout, activation_ok=True, notes=notes, acts_as=self.acts_as,
                           collapse_exempt=exempt, qk_normalised=normalised)
        ]


def timm_attention_inputs(module: nn.Module, args: tuple, kwargs: dict) -> HeadInputs:
    """timm Attention: softmax(scale q_norm(q) q_norm(k)^T) v over all tokens, ``module.scale`` (dh^-1/2)."""
    if kwargs.get("attn_mask") is not None or kwargs.get("is_causal"):
        raise ValueError("attention masks of timm Attention are not supported by the head diagnostics")
    norms = (module.q_norm, module.k_norm) if has_module(module, "q_norm") else (None, None)
    return HeadInputs(hidden_states(args, kwargs, "x"), float(module.scale), q_norm=norms[0], k_norm=norms[1])


# timm.layers.Attention: ViT, DeiT and the many models built on it (``qk_norm`` is reported).
TIMM_ATTENTION = TimmFusedQkvAdapter(
    "timm Attention", ("timm.layers.attention.Attention",), head_form=timm_attention_inputs
)
