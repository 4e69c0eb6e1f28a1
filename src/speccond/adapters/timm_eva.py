"""timm modules that hold q, k, v in one bias-free ``qkv`` nn.Linear plus separate ``q_bias`` / ``v_bias``
(k has none): EVA / EVA02 ``EvaAttention`` (timm/models/eva.py), BEiT ``Attention`` (beit.py) and SwinV2
``WindowAttention`` (swin_transformer_v2.py).

``qkv.weight`` is (3 * A, D), (out, in), blocks q, k, v, heads contiguous
(``reshape(B, N, 3, H, -1)``); A = H * head_dim may differ from D (``attn_head_dim``), so blocks may be
rectangular. With biases (the default) the forward computes
``F.linear(x, self.qkv.weight, cat(q_bias, k_bias, v_bias))``: it reads the weight directly, so only the
weight backend reaches it (activation_ok False). Without biases, or with ``qkv_bias_separate``, it calls
``self.qkv(x)`` and both backends apply. The biases are found by ``speccond.layers.projection_bias``.

- EVA: after the projection come optional per-head q/k norms (``qk_norm``, reported) and a rotary
  embedding on every token after the ``num_prefix_tokens`` prefix; the logits are scale q k^T.
  ``qkv_fused=False`` builds separate ``q_proj``, ``k_proj``, ``v_proj`` Linears instead (both backends).
- BEiT: logits scale q k^T plus a relative position bias (the module's own table and/or the model's
  shared one), which the correction does not touch.
- SwinV2: cosine attention inside windows: each head's q and k are L2-normalised and the logits are
  multiplied by a learned, clamped ``logit_scale``. The normalisation divides out the size of q and k,
  so the magnitude of the Q/K correction is cancelled (only its direction survives): a report note.
  V is unaffected.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from speccond.adapters.base import (
    COSINE_NOTE, QK_COSINE, QK_LAYER_NORM, QK_NORM_NOTE, ProjectionSpec, class_path, is_linear,
)
from speccond.adapters.head_inputs import HeadInputs, Rotary, bound_arguments, has_module, hidden_states
from speccond.adapters.timm_attention import TimmFusedQkvAdapter
from speccond.core.layout import ProjectionLayout



def calls_qkv_as_module(module: nn.Module) -> bool:
    """Whether the forward calls ``self.qkv(x)`` (no separate biases, or ``qkv_bias_separate``) rather than
    ``F.linear(x, self.qkv.weight, ...)``, which the activation backend cannot reach."""
    return getattr(module, "q_bias", None) is None or bool(getattr(module, "qkv_bias_separate", False))


@dataclass(frozen=True)
class TimmQvBiasAdapter(TimmFusedQkvAdapter):
    """A timm fused ``qkv`` with separate ``q_bias`` / ``v_bias`` (BEiT, SwinV2); EVA also accepts
    ``qkv_fused=False`` (separate ``q_proj``, ``k_proj``, ``v_proj``)."""

    def matches(self, module: nn.Module) -> bool:
        heads = getattr(module, self.heads_attr, None)
        projections = is_linear(getattr(module, "qkv", None)) or all(
            is_linear(getattr(module, f"{role}_proj", None)) for role in "qkv"
        )
        return class_path(module) in self.class_paths and projections and isinstance(heads, int)

    def projections(self, module: nn.Module) -> list[ProjectionSpec]:
        if not is_linear(getattr(module, "qkv", None)):  # EVA qkv_fused=False
            heads = getattr(module, self.heads_attr)
            normed = has_module(module, "q_norm")
            notes = self.notes + ((QK_NORM_NOTE,) if normed else ())
            return [
                ProjectionSpec(f"{role}_proj", "weight", ProjectionLayout(role, heads), activation_ok=True, notes=notes,
                               collapse_exempt=self.collapse_exempt, qk_normalised=QK_LAYER_NORM if normed else "")
                for role in "qkv"
            ]
        [spec] = super().projections(module)
        return [replace(spec, activation_ok=calls_qkv_as_module(module))]


def eva_attention_inputs(module: nn.Module, args: tuple, kwargs: dict) -> HeadInputs:
    """EVA: softmax(scale rot(n(q)) rot(n(k))^T); the rotary table ``rope`` (N - prefix, 2 dh) holds
    [sin | cos] per feature and leaves the ``num_prefix_tokens`` first tokens unrotated."""
    call = bound_arguments(module, args, kwargs)
    if call.get("attn_mask") is not None or call.get("is_causal"):
        raise ValueError("attention masks of EVA attention are not supported by the head diagnostics")
    x = hidden_states(args, kwargs, "x")
    norms = (module.q_norm, module.k_norm) if has_module(module, "q_norm") else (None, None)
    rope = call.get("rope")
    rotary = None
    if rope is not None:
        if rope.dim() != 2:
            raise ValueError(f"EVA rope tables per batch or per head (shape {tuple(rope.shape)}) are not supported")
        sin, cos = rope.detach().chunk(2, dim=-1)  # (N - prefix, dh) each
        prefix = x.shape[1] - sin.shape[0]
        if prefix != module.num_prefix_tokens:
            raise ValueError(f"EVA rope covers {sin.shape[0]} of {x.shape[1]} tokens, expected all but the prefix")
        cos = torch.cat((torch.ones(prefix, cos.shape[1], dtype=cos.dtype), cos))[None]  # (1, N, dh)
        sin = torch.cat((torch.zeros(prefix, sin.shape[1], dtype=sin.dtype), sin))[None]  # (1, N, dh)
        rotary = Rotary(cos, sin, interleaved=not getattr(module, "rotate_half", False))
    return HeadInputs(x, float(module.scale), q_norm=norms[0], k_norm=norms[1], rotary=rotary)


def beit_attention_inputs(module: nn.Module, args: tuple, kwargs: dict) -> HeadInputs:
    """BEiT: softmax(scale q k^T + relative position bias (own table + shared))."""
    call = bound_arguments(module, args, kwargs)
    bias = module._get_rel_pos_bias() if module.relative_position_bias_table is not None else None  # (1, H, N, N)
    shared = call.get("shared_rel_pos_bias")
    if shared is not None:
        bias = shared if bias is None else bias + shared
    bias = None if bias is None else bias.detach()
    return HeadInputs(hidden_states(args, kwargs, "x"), float(module.scale), logit_bias=bias)


TIMM_EVA = TimmQvBiasAdapter(
    "timm EVA EvaAttention", ("timm.models.eva.EvaAttention",), head_form=eva_attention_inputs
)
TIMM_BEIT = TimmQvBiasAdapter(
    "timm BEiT Attention", ("timm.models.beit.Attention",), head_form=beit_attention_inputs
)
TIMM_SWINV2 = TimmQvBiasAdapter(
    "timm SwinV2 WindowAttention", ("timm.models.swin_transformer_v2.WindowAttention",),
    notes=(COSINE_NOTE,),
    qk_normalised=QK_COSINE,
    head_reason="SwinV2 attends inside (shifted) windows with cosine logits; the head diagnostics rebuild "
    "scaled dot-product attention over whole token sequences only",
)
