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
- ``q_proj``/``k_proj``/``v_proj`` (+ ``o_proj`` or ``out_proj``): the HF ``ViTAttention`` of
  transformers 5, and CLIP-, BART- and Llama-style attention. k and v may have fewer heads than q
  (grouped-query attention): their head count is their width over q's head width.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from torch import nn

from speccond.adapters.base import QK_NORM_NOTE, ProjectionSpec, class_path
from speccond.layout import ProjectionLayout

_HEAD_ATTRS = ("num_attention_heads", "num_heads", "n_heads")
_NORM_ATTRS = ("q_norm", "k_norm", "query_norm", "key_norm")


@dataclass(frozen=True)
class HFSeparateQkvAdapter:
    """transformers attention with separate q, k, v Linears named ``names``.

    Attributes:
        name: shown in reports and errors.
        names: attribute names of the q, k, v Linears, in that order.
        class_suffixes: the class name must end with one of these.
        output_names: other Linear children allowed on the module (its output projection).
    """

    name: str
    names: tuple[str, str, str]
    class_suffixes: tuple[str, ...]
    output_names: tuple[str, ...] = ()

    def matches(self, module: nn.Module) -> bool:
        path = class_path(module)
        if not path.startswith("transformers.models.") or not path.endswith(self.class_suffixes):
            return False
        linears = {n for n, child in module.named_children() if isinstance(child, nn.Linear)}
        if not set(self.names) <= linears or not linears <= set(self.names) | set(self.output_names):
            return False
        return self._head_counts(module) is not None

    def projections(self, module: nn.Module) -> list[ProjectionSpec]:
        heads = self._head_counts(module)
        assert heads is not None, "projections() called on a module matches() rejected"
        notes = (QK_NORM_NOTE,) if _has_qk_norm(module) else ()
        return [
            ProjectionSpec(name, "weight", ProjectionLayout(roles=role, num_heads=h), activation_ok=True, notes=notes)
            for name, role, h in zip(self.names, "qkv", heads)
        ]

    def _head_counts(self, module: nn.Module) -> Optional[tuple[int, int, int]]:
        """(q, k, v) head counts, or None when they cannot be read consistently."""
        heads = _num_heads(module)
        q, k, v = (getattr(module, n) for n in self.names)
        if heads is None or q.out_features % heads:
            return None
        head_dim = q.out_features // heads
        declared = getattr(module, "head_dim", getattr(module, "attention_head_size", head_dim))
        if declared != head_dim or k.out_features % head_dim or v.out_features % head_dim:
            return None
        return heads, k.out_features // head_dim, v.out_features // head_dim


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
    "transformers query/key/value (BERT style)", ("query", "key", "value"), ("SelfAttention", "CrossAttention")
)
HF_DISTILBERT = HFSeparateQkvAdapter(
    "transformers q_lin/k_lin/v_lin (DistilBERT)", ("q_lin", "k_lin", "v_lin"), ("Attention",), ("out_lin",)
)
HF_QKV_PROJ = HFSeparateQkvAdapter(
    "transformers q_proj/k_proj/v_proj", ("q_proj", "k_proj", "v_proj"), ("Attention",), ("o_proj", "out_proj")
)
