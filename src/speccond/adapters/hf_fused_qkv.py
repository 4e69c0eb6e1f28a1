"""Hugging Face transformers attention with one fused q/k/v nn.Linear (stored (out, in)).

How each family splits the Linear's output features, read from its forward (B = batch, N = tokens,
H = query heads, G = key/value heads, dh = head width):

- GPT-NeoX ``GPTNeoXAttention.query_key_value``: ``view(B, N, H, 3 dh)`` then ``chunk(3)``: per head
  (H, 3, dh). Rotary over the first ``rotary_ndims`` features of each head (partial, rotate_half).
- BLOOM ``BloomAttention.query_key_value``: ``view(B, N, H, 3, dh)``: per head. ALiBi:
  logits = beta alibi + inv_norm_factor q k^T + mask (``baddbmm``), alibi (B H, 1, N).
- Falcon ``FalconAttention.query_key_value`` (and its flash subclass), three layouts:
  ``new_decoder_architecture``: ``view(B, N, G, H / G + 2, dh)``, grouped (per_head when G = H);
  ``multi_query``: ``view(B, N, H + 2, dh)``, blocked [q | k | v] with one k/v head;
  otherwise ``view(B, N, H, 3, dh)``, per head. Rotary (rotate_half) unless ``alibi``.
- Phi-3 ``Phi3Attention.qkv_proj``: slices [:H dh], [H dh : (H + G) dh], [(H + G) dh:]: blocked, G k/v
  heads. Rotary (partial when ``partial_rotary_factor`` < 1).
- GPTBigCode ``GPTBigCodeAttention.c_attn`` (an nn.Linear, not GPT-2's Conv1D): ``multi_query``:
  ``split((H dh, dh, dh))``, blocked with one k/v head; otherwise ``view(B, N, H, 3 dh).split(dh)``: per
  head. Its cross-attention (``q_attn`` + ``c_attn`` split into dh-wide k, v) is left to the
  unrecognised-attention error.
- ModernBERT ``ModernBertAttention.Wqkv``: ``view(B, N, 3, H, dh)``: blocked. Rotary; the local layers
  attend inside a window, which the model's mask holds.

In every family the correction is the paper's: C = lam I_k on each of the q, k, v blocks; ALiBi and
rotary embeddings act after the projection and are untouched. Each Linear is called as a module, so both
backends apply.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

from torch import nn

from speccond.adapters.base import ProjectionSpec, class_path, is_linear
from speccond.adapters.head_inputs import HeadInputs, Rotary, additive_mask, bound_arguments, hidden_states
from speccond.adapters.hf_separate_qkv import hf_head_inputs
from speccond.core.layout import ProjectionLayout

LayoutOf = Callable[[nn.Module], Optional[ProjectionLayout]]


@dataclass(frozen=True)
class HFFusedQkvAdapter:
    """One transformers family whose attention holds q, k, v in one Linear.

    Attributes:
        name: shown in reports and errors.
        class_names: the attention class names of the family (exact, after ``transformers.models.``).
        weight_owner: attribute name of the fused Linear on the attention module.
        layout_of: the module -> its ProjectionLayout, or None when the module is a variant this adapter
            does not describe (then it is left to the unrecognised-attention error).
        rebuild: (module, args, kwargs) -> HeadInputs for the head diagnostics (raises ValueError naming
            what it cannot rebuild); each family's is checked against the model's own attention
            probabilities in tests/test_architectures.py.
    """

    name: str
    class_names: tuple[str, ...]
    weight_owner: str
    layout_of: LayoutOf
    rebuild: Callable[[nn.Module, tuple, dict], HeadInputs]

    def matches(self, module: nn.Module) -> bool:
        path = class_path(module)
        if not path.startswith("transformers.models.") or path.rsplit(".", 1)[-1] not in self.class_names:
            return False
        if not is_linear(getattr(module, self.weight_owner, None)):
            return False
        layout = self.layout_of(module)
        if layout is None:
            return False
        weight = getattr(module, self.weight_owner).weight
        try:
            out_features, _ = layout.check_shape(weight.shape, self.weight_owner)
        except ValueError:
            return False
        return self._head_dim(module) in (None, layout.head_dim(out_features))

    def projections(self, module: nn.Module) -> list[ProjectionSpec]:
        layout = self.layout_of(module)
        assert layout is not None, "projections() called on a module matches() rejected"
        return [ProjectionSpec(self.weight_owner, "weight", layout, activation_ok=True)]

    def head_inputs(self, module: nn.Module, args: tuple, kwargs: dict) -> HeadInputs:
        return self.rebuild(module, args, kwargs)

    @staticmethod
    def _head_dim(module: nn.Module) -> Optional[int]:
        for attr in ("head_dim", "head_size"):
            value = getattr(module, attr, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return None


def _config_heads(module: nn.Module) -> Optional[int]:
    heads = getattr(getattr(module, "config", None), "num_attention_heads", None)
    return heads if isinstance(heads, int) and heads > 0 else None


# -- layouts, one per family (module docstring) ---------------------------------------------------------------
def _neox_layout(module: nn.Module) -> Optional[ProjectionLayout]:
    heads = _config_heads(module)
    return ProjectionLayout("qkv", heads, arrangement="per_head") if heads else None


def _bloom_layout(module: nn.Module) -> Optional[ProjectionLayout]:
    return ProjectionLayout("qkv", module.num_heads, arrangement="per_head")


def _falcon_layout(module: nn.Module) -> Optional[ProjectionLayout]:
    heads, kv_heads = module.num_heads, module.num_kv_heads
    if module.new_decoder_architecture:  # (G, H / G + 2, dh)
        return ProjectionLayout("qkv", heads, arrangement="grouped" if kv_heads < heads else "per_head",
                                num_kv_heads=kv_heads)
    if module.multi_query:  # (H + 2, dh): q heads, then the one k and the one v head
        return ProjectionLayout("qkv", heads, num_kv_heads=1)
    # (H, 3, dh); the forward reshapes k/v to num_kv_heads heads, so it runs only with num_kv_heads = H
    return ProjectionLayout("qkv", heads, arrangement="per_head") if kv_heads == heads else None


def _phi3_layout(module: nn.Module) -> Optional[ProjectionLayout]:
    heads = _config_heads(module)
    return ProjectionLayout("qkv", heads, num_kv_heads=module.num_key_value_heads) if heads else None


def _bigcode_layout(module: nn.Module) -> Optional[ProjectionLayout]:
    if module.is_cross_attention:
        return None
    if module.multi_query:  # split((H dh, dh, dh))
        return ProjectionLayout("qkv", module.num_heads, num_kv_heads=1)
    return ProjectionLayout("qkv", module.num_heads, arrangement="per_head")  # view(B, N, H, 3 dh)


def _modernbert_layout(module: nn.Module) -> Optional[ProjectionLayout]:
    heads = _config_heads(module)
    return ProjectionLayout("qkv", heads) if heads else None  # view(B, N, 3, H, dh)


# -- rebuilding one head ---------------------------------------------------------------------------------------
def _neox_heads(module: nn.Module, args: tuple, kwargs: dict) -> HeadInputs:
    """GPT-NeoX: the shared transformers form (scaling, mask, partial rotary); its head width is head_size."""
    return hf_head_inputs(module, args, kwargs, head_dim=module.head_size)


def _bloom_heads(module: nn.Module, args: tuple, kwargs: dict) -> HeadInputs:
    """BLOOM: logits = inv_norm_factor q k^T + beta alibi + mask; without a mask the module masks nothing."""
    call = bound_arguments(module, args, kwargs)
    x = hidden_states((), call, "hidden_states")
    alibi = call.get("alibi")
    if alibi is None:
        raise ValueError("BLOOM attention was called without its alibi tensor")
    batch = x.shape[0]
    bias = module.beta * alibi.detach().double().reshape(batch, module.num_heads, 1, -1)  # (B, H, 1, N)
    mask = additive_mask(call.get("attention_mask"))
    if mask is not None:
        bias = bias + mask
    return HeadInputs(x, float(module.inv_norm_factor), bias, causal=False)


def _falcon_heads(module: nn.Module, args: tuple, kwargs: dict) -> HeadInputs:
    """Falcon with rotary embeddings: logits = q k^T / sqrt(dh) + mask, under eager and SDPA alike."""
    call = bound_arguments(module, args, kwargs)
    if call.get("alibi") is not None:
        raise ValueError(
            "Falcon with alibi: transformers' eager attention adds the ALiBi bias twice (once folded into the "
            "mask, once as alibi * inv_norm_factor) and SDPA once, so its logits depend on the attention "
            "implementation; the head diagnostics do not pick one"
        )
    x = hidden_states((), call, "hidden_states")
    mask = additive_mask(call.get("attention_mask"))
    position = call.get("position_embeddings")
    rotary = Rotary(position[0].detach(), position[1].detach()) if position is not None else None
    return HeadInputs(x, 1.0 / math.sqrt(module.head_dim), mask, causal=mask is None, rotary=rotary)


def _bigcode_heads(module: nn.Module, args: tuple, kwargs: dict) -> HeadInputs:
    """GPTBigCode: the shared transformers form (scaling, the model's causal mask), no rotary."""
    return hf_head_inputs(module, args, kwargs)


HF_GPT_NEOX = HFFusedQkvAdapter(
    "transformers GPT-NeoX query_key_value (per head)", ("GPTNeoXAttention",), "query_key_value", _neox_layout,
    _neox_heads,
)
HF_BLOOM = HFFusedQkvAdapter(
    "transformers BLOOM query_key_value (per head, ALiBi)", ("BloomAttention",), "query_key_value", _bloom_layout,
    _bloom_heads,
)
HF_FALCON = HFFusedQkvAdapter(
    "transformers Falcon query_key_value", ("FalconAttention", "FalconFlashAttention2"), "query_key_value",
    _falcon_layout, _falcon_heads,
)
HF_PHI3 = HFFusedQkvAdapter(
    "transformers Phi-3 qkv_proj (blocked, grouped-query)", ("Phi3Attention",), "qkv_proj", _phi3_layout,
    hf_head_inputs,
)
HF_GPT_BIGCODE = HFFusedQkvAdapter(
    "transformers GPTBigCode c_attn", ("GPTBigCodeAttention",), "c_attn", _bigcode_layout, _bigcode_heads,
)
HF_MODERNBERT = HFFusedQkvAdapter(
    "transformers ModernBERT Wqkv (blocked, rotary)", ("ModernBertAttention",), "Wqkv", _modernbert_layout,
    hf_head_inputs,
)
HF_FUSED_QKV = (HF_GPT_NEOX, HF_BLOOM, HF_FALCON, HF_PHI3, HF_GPT_BIGCODE, HF_MODERNBERT)
