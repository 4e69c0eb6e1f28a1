"""Hugging Face transformers attention with three separate nn.Linear q, k, v projections.

Each Linear is (out, in), heads contiguous (the forward does ``.view(*shape, -1, head_dim)``), and is
called as a module, so both backends apply. Three naming families, matched by class path (a
``transformers.models.*`` class whose name ends as listed) and by structure (the q/k/v Linears exist,
the only other direct Linear children are the listed output projections, the head count divides the
q width). Structure is checked so that a variant with extra projections (Longformer's global q/k/v,
gated queries) is left to the unrecognised-attention error instead of being half conditioned.

- BERT style ``query``/``key``/``value``, head count ``num_attention_heads``: ``BertSelfAttention``,
  ``BertCrossAttention``, ``RobertaSelfAttention``, ``NystromformerSelfAttention`` (and the many
  classes "copied from" them, including ``ViTSelfAttention`` of transformers 4.x).
- DistilBERT ``q_lin``/``k_lin``/``v_lin`` (+ ``out_lin``), head count ``n_heads``.
- ALBERT ``query``/``key``/``value`` + ``dense`` (``AlbertAttention``). ALBERT shares its layers: one
  module runs at every depth, so it is found, and conditioned, once; its correction acts at every depth.
- ``q_proj``/``k_proj``/``v_proj`` (+ ``o_proj``, ``out_proj`` or ``dense``): the HF ``ViTAttention`` of
  transformers 5, and CLIP-, BART-, Llama-, Phi- and GPT-J-style attention. k and v may have fewer heads
  than q (grouped-query attention): their head count is their width over q's head width.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from speccond.adapters.base import (
    COSINE_NOTE, QK_COSINE, QK_LAYER_NORM, QK_NORM_NOTE, QK_NORM_PAIRS, ProjectionSpec, class_path, is_linear,
)
from speccond.adapters.head_inputs import HeadInputs, Rotary, additive_mask, bound_arguments, has_module, hidden_states
from speccond.adapters.inferred import normalisation
from speccond.core.layout import ProjectionLayout

_HEAD_ATTRS = ("num_attention_heads", "num_heads", "n_heads")
_NORM_ATTRS = tuple(name for pair in QK_NORM_PAIRS for name in pair)


@dataclass(frozen=True)
class HFSeparateQkvAdapter:
    """transformers attention with separate q, k, v Linears named ``names``.

    Attributes:
        name: shown in reports and errors.
        names: attribute names of the q, k, v Linears, in that order.
        class_suffixes: the class name must end with one of these.
        output_names: other Linear children allowed on the module (its output projection).
        rebuilds: exact attention class names (e.g. "LlamaAttention") whose heads the diagnostics rebuild
            with :func:`hf_head_inputs`, each checked against the model's own attention probabilities
            (tests/test_architectures.py); every other class is refused, including relatives that share a
            prefix but not the logits (Llama4's chunked attention, Gemma3n's value norm, Qwen2-VL's mrope).
    """

    name: str
    names: tuple[str, str, str]
    class_suffixes: tuple[str, ...]
    output_names: tuple[str, ...] = ()
    rebuilds: tuple[str, ...] = ()

    def head_inputs(self, module: nn.Module, args: tuple, kwargs: dict) -> HeadInputs:
        reason = self.module_refusal(module)
        if reason:
            raise ValueError(reason)
        return hf_head_inputs(module, args, kwargs)

    def module_refusal(self, module: nn.Module) -> str:
        """Why the head diagnostics do not rebuild this module, read off the module alone ('' = they do)."""
        family = type(module).__name__
        if "Nystromformer" in family:
            return "Nystrom attention approximates the softmax through landmarks; no full head to rebuild"
        if has_module(module, "relative_position_bias") and family.startswith(("Swin", "Donut")):
            return (
                "Swin attends inside (shifted) windows and adds its relative_position_bias module's output to the "
                "logits; the head diagnostics do not rebuild windowed attention"
            )
        if family not in self.rebuilds:
            return (
                f"{family} is not among the families whose attention the head diagnostics rebuild and check "
                f"({', '.join(self.rebuilds)}); it may add position biases or other terms to its logits"
            )
        if getattr(module, "position_embedding_type", "absolute") != "absolute":
            return f"position_embedding_type={module.position_embedding_type!r} adds relative terms to the logits"
        return ""

    def matches(self, module: nn.Module) -> bool:
        path = class_path(module)
        if not path.startswith("transformers.models.") or not path.endswith(self.class_suffixes):
            return False
        linears = {n for n, child in module.named_children() if is_linear(child)}
        if not set(self.names) <= linears or not linears <= set(self.names) | set(self.output_names):
            return False
        return self._head_counts(module) is not None

    def projections(self, module: nn.Module) -> list[ProjectionSpec]:
        heads = self._head_counts(module)
        assert heads is not None, "projections() called on a module matches() rejected"
        layouts = [(name, ProjectionLayout(roles=role, num_heads=h)) for name, role, h in zip(self.names, "qkv", heads)]
        normalised = QK_LAYER_NORM if _has_qk_norm(module) else normalisation(module, tuple(layouts))
        notes = {QK_COSINE: (COSINE_NOTE,), QK_LAYER_NORM: (QK_NORM_NOTE,)}.get(normalised, ())
        return [
            ProjectionSpec(name, "weight", layout, activation_ok=True, notes=notes, qk_normalised=normalised)
            for name, layout in layouts
        ]

    def _head_counts(self, module: nn.Module) -> Optional[tuple[int, int, int]]:
        """(q, k, v) head counts, or None when they cannot be read consistently. A key head is as wide as a
        query head; v has the key heads' count (each key head's value), at its own width (Perceiver's
        v_channels: v heads twice as wide as q and k)."""
        heads = _num_heads(module)
        q, k, v = (getattr(module, n) for n in self.names)
        if heads is None or q.out_features % heads:
            return None
        head_dim = q.out_features // heads
        declared = getattr(module, "head_dim", getattr(module, "attention_head_size", head_dim))
        if declared != head_dim or k.out_features % head_dim:
            return None
        kv_heads = k.out_features // head_dim
        if v.out_features % kv_heads:
            return None
        return heads, kv_heads, kv_heads


def _num_heads(module: nn.Module) -> Optional[int]:
    for attr in _HEAD_ATTRS:
        value = getattr(module, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    value = getattr(getattr(module, "config", None), "num_attention_heads", None)
    return value if isinstance(value, int) and value > 0 else None


def _has_qk_norm(module: nn.Module) -> bool:
    return any(
        isinstance(getattr(module, attr, None), nn.Module) and not isinstance(getattr(module, attr), nn.Identity)
        for attr in _NORM_ATTRS
    )


HF_BERT = HFSeparateQkvAdapter(
    "transformers query/key/value (BERT style)", ("query", "key", "value"), ("SelfAttention", "CrossAttention"),
    rebuilds=("BertSelfAttention", "RobertaSelfAttention", "XLMRobertaSelfAttention", "ElectraSelfAttention"),
)
HF_DISTILBERT = HFSeparateQkvAdapter(
    "transformers q_lin/k_lin/v_lin (DistilBERT)", ("q_lin", "k_lin", "v_lin"), ("Attention",), ("out_lin",),
    rebuilds=("DistilBertSelfAttention",),
)
HF_ALBERT = HFSeparateQkvAdapter(
    "transformers query/key/value + dense (ALBERT)", ("query", "key", "value"), ("AlbertAttention",), ("dense",),
    rebuilds=("AlbertAttention",),
)
HF_QKV_PROJ = HFSeparateQkvAdapter(
    "transformers q_proj/k_proj/v_proj", ("q_proj", "k_proj", "v_proj"), ("Attention",),
    ("o_proj", "out_proj", "dense"),
    rebuilds=(
        "LlamaAttention", "MistralAttention", "MixtralAttention", "Qwen2Attention", "Qwen3Attention",
        "GemmaAttention", "Gemma2Attention", "Gemma3Attention", "OlmoAttention", "OPTAttention", "BartAttention",
        "CLIPAttention", "SiglipAttention", "ViTAttention", "DeiTAttention", "Dinov2Attention", "WhisperAttention",
        "PhiAttention", "GPTJAttention", "BeitAttention",
    ),
)


# -- rebuilding one head (speccond.diagnostics.heads) --------------------------------------------------------
def hf_head_inputs(module: nn.Module, args: tuple, kwargs: dict, head_dim: Optional[int] = None) -> HeadInputs:
    """transformers self-attention on one captured call: softmax(cap(scaling rot(n(q)) rot(n(k))^T) + mask) v.

    Reads ``scaling`` (else head_dim^-1/2), the additive ``attention_mask`` the model passed (padding,
    causal and sliding-window masks included), ``is_causal`` (only when the model passed no mask: a
    materialised mask already holds causality, and a query row it hides entirely is uniform there), rotary ``position_embeddings`` (cos, sin)
    (rotate_half style, partial when cos is narrower than dh; GPT-J passes (sin, cos) over the rotated pairs
    and rotates pairs (2i, 2i + 1)), per-head ``q_norm`` / ``k_norm`` (Phi: ``q_layernorm`` / ``k_layernorm``) and
    the ``attn_logit_softcapping`` its forward applies (``applied_softcap``). Refuses cross-attention, q/k norms over the whole width, clipped q/k/v and
    a sliding window the model left out of a missing mask.
    """
    call = bound_arguments(module, args, kwargs)
    if call.get("encoder_hidden_states") is not None or call.get("key_value_states") is not None:
        raise ValueError("head diagnostics of cross-attention are not supported (its keys come from another sequence)")
    x = hidden_states((), call, "hidden_states")
    config = getattr(module, "config", None)
    if getattr(config, "clip_qkv", None) is not None:
        raise ValueError("config.clip_qkv clamps q, k and v; the head diagnostics do not rebuild the clamp")
    head_dim = head_dim or getattr(module, "head_dim", None) or getattr(module, "attention_head_size")
    scale = getattr(module, "scaling", None)
    scale = float(scale) if isinstance(scale, (int, float)) and not isinstance(scale, bool) else head_dim**-0.5
    q_norm = k_norm = None
    if any(has_module(module, n) for n in _NORM_ATTRS):
        pair = next((p for p in QK_NORM_PAIRS if any(has_module(module, n) for n in p)), QK_NORM_PAIRS[0])
        q_norm, k_norm = (getattr(module, n, None) for n in pair)
        widths = {tuple(getattr(n, "weight", torch.empty(head_dim)).shape) for n in (q_norm, k_norm)}
        if not (isinstance(q_norm, nn.Module) and isinstance(k_norm, nn.Module)) or widths != {(head_dim,)}:
            raise ValueError("q/k normalisation over the whole projection width (not per head) is not rebuilt")
    mask = additive_mask(call.get("attention_mask"))
    window = getattr(module, "sliding_window", getattr(config, "sliding_window", None))
    if mask is None and isinstance(window, int) and x.shape[1] > window:
        raise ValueError(
            f"the model passed no attention mask but its sliding window ({window}) is shorter than the input "
            f"({x.shape[1]} tokens); run it with attn_implementation='eager' so the mask is materialised"
        )
    rotary = None
    position = call.get("position_embeddings")
    if isinstance(position, (tuple, list)) and len(position) == 2 and type(module).__name__.startswith("GPTJ"):
        sin, cos = (t.detach().repeat_interleave(2, dim=-1) for t in position)  # (B, N, r/2) -> (B, N, r)
        rotary = Rotary(cos, sin, interleaved=True)  # rotate_every_two: pairs (2i, 2i + 1)
    elif isinstance(position, (tuple, list)) and len(position) == 2:
        rotary = Rotary(position[0].detach(), position[1].detach())
    return HeadInputs(
        x, scale, mask, causal=mask is None and bool(getattr(module, "is_causal", False)), q_norm=q_norm, k_norm=k_norm,
        rotary=rotary, softcap=applied_softcap(module),
    )


def applied_softcap(module: nn.Module) -> Optional[float]:
    """The logit soft-cap this module's forward applies, or None when it applies none.

    A module may store ``attn_logit_softcapping`` without using it: Gemma 2 passes
    ``softcap=self.attn_logit_softcapping`` to its attention function, Gemma 3 (transformers 5) keeps the
    same attribute and passes nothing. The cap is read from the forward, not from the attribute: applied
    when the forward passes the attribute as ``softcap=``, not applied when the forward never mentions a
    soft-cap; anything else (the source unreadable, the cap used some other way) is refused, since a
    rebuilt head with the wrong cap reports the wrong entropy (tests/test_forward_follows.py).
    """
    cap = getattr(module, "attn_logit_softcapping", None)
    if not cap:
        return None
    family = type(module).__name__
    try:
        source = inspect.getsource(type(module).forward)
    except (OSError, TypeError):
        source = None
    if source is not None and re.search(r"softcap\s*=\s*self\.attn_logit_softcapping\b", source):
        return float(cap)
    if source is not None and "softcap" not in source.lower():
        return None  # stored, never used by the forward
    raise ValueError(
        f"{family} stores attn_logit_softcapping={cap!r}, but its forward does not show whether it caps the "
        "logits with it (passing softcap=self.attn_logit_softcapping to its attention function, or not using "
        "it at all); the head diagnostics do not guess. projection_spectra, which does not rebuild heads, "
        "works for it"
    )
