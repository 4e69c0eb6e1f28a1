"""Hugging Face DeBERTa-v2 / v3 disentangled self-attention (``DisentangledSelfAttention``).

Projections: ``query_proj``, ``key_proj``, ``value_proj``, nn.Linears (out, in), heads contiguous
(``transpose_for_scores``: ``view(B, N, H, -1)``); the logits are

    logits = (q_c k_c^T + [c2p] q_c k_r^T + [p2c] k_c q_r^T) / sqrt(dh (1 + number of position terms)) + mask

with q_c = x W_Q, k_c = x W_K the content queries and keys and q_r, k_r position queries and keys of the
relative embeddings R: k_r = R W_pos_key, q_r = R W_pos_query, or, with ``share_att_key`` (DeBERTa-v3),
k_r = R W_K and q_r = R W_Q.

What the correction means here: the paper's C = lam I_k is added to the token projections W_Q, W_K, W_V
(it conditions the content-to-content term and the values, as in any attention). The position
projections ``pos_key_proj`` / ``pos_query_proj`` are not token q/k/v and stay plain. With
``share_att_key`` the position keys and queries are computed by the same corrected W_K, W_Q, so they
become (R (W_K + lam I)) and (R (W_Q + lam I)): one weight, one correction, wherever the model uses it;
this is reported as a note. Without ``share_att_key`` the c2p / p2c terms pair q with position keys
and k with position queries, so ``verify`` checks only that the correction takes effect, not the
role and head signatures (``probe_skip``). Both backends agree (each adds lam x to the Linear's output for every input
it reads). The head diagnostics refuse these modules: the c2p / p2c terms are not rebuilt.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from torch import nn

from speccond.adapters.base import ProjectionSpec
from speccond.adapters.head_inputs import HeadInputs
from speccond.adapters.hf_separate_qkv import HFSeparateQkvAdapter

POSITION_PROJECTION_SKIP = (
    "disentangled attention: its c2p / p2c terms pair q with pos_key_proj and k with pos_query_proj, so q "
    "and k rows do not pair only with each other"
)
SHARED_KEY_NOTE = (
    "share_att_key: the relative-position keys and queries of the c2p/p2c terms are computed by the same "
    "query_proj/key_proj, so the correction shifts them too (by lam times the relative embeddings)"
)


@dataclass(frozen=True)
class HFDebertaAdapter(HFSeparateQkvAdapter):
    head_reason: str = (
        "DeBERTa's disentangled attention adds content-to-position and position-to-content terms (c2p, p2c) "
        "to the logits, and scales by sqrt(dh (1 + their number)); the head diagnostics rebuild only "
        "softmax(scale q k^T + bias)"
    )

    def projections(self, module: nn.Module) -> list[ProjectionSpec]:
        specs = super().projections(module)
        positional = getattr(module, "relative_attention", False) and set(getattr(module, "pos_att_type", ())) & {
            "c2p", "p2c"
        }
        if not positional:
            return specs
        if not getattr(module, "share_att_key", False):
            return [replace(s, probe_skip=POSITION_PROJECTION_SKIP) for s in specs]
        return [replace(s, notes=s.notes + (SHARED_KEY_NOTE,)) if s.layout.roles in "qk" else s for s in specs]

    def head_inputs(self, module: nn.Module, args: tuple, kwargs: dict) -> HeadInputs:
        raise ValueError(self.head_reason)


HF_DEBERTA_V2 = HFDebertaAdapter(
    "transformers DeBERTa-v2 query_proj/key_proj/value_proj (disentangled)",
    ("query_proj", "key_proj", "value_proj"), ("DisentangledSelfAttention",), ("pos_key_proj", "pos_query_proj"),
)
