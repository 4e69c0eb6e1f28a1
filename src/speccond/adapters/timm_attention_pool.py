"""timm ``AttentionPoolLatent``: the attention-pooling head of ViTs built with ``global_pool="map"``.

A learned latent query attends over the tokens. ``q`` is nn.Linear(latent_dim, embed_dim) applied to
the latent (nn.Identity when built with ``q_proj=False``: then there is no q weight to correct), and
``kv`` is nn.Linear(embed_dim, 2 * embed_dim): blocks k, v, heads contiguous
(``reshape(B, N, 2, H, dh)``). Both are (out, in) and called as modules: both backends apply.
"""
from __future__ import annotations

from torch import nn

from speccond.adapters.base import QK_LAYER_NORM, QK_NORM_NOTE, ProjectionSpec, class_path, is_linear
from speccond.core.layout import ProjectionLayout


PROBE_SKIP = "the module's output passes through its own MLP, so output signatures cannot isolate the attention"


class TimmAttentionPoolAdapter:
    name = "timm AttentionPoolLatent"
    head_reason = "attention pooling has learned latent queries, not a square token attention"

    def matches(self, module: nn.Module) -> bool:
        return (
            class_path(module) == "timm.layers.attention_pool.AttentionPoolLatent"
            and is_linear(getattr(module, "kv", None))
            and isinstance(getattr(module, "num_heads", None), int)
        )

    def projections(self, module: nn.Module) -> list[ProjectionSpec]:
        heads = module.num_heads
        normed = not isinstance(getattr(module, "q_norm", nn.Identity()), nn.Identity)
        notes, normalised = ((QK_NORM_NOTE,), QK_LAYER_NORM) if normed else ((), "")
        specs = []
        if is_linear(module.q):
            specs.append(ProjectionSpec("q", "weight", ProjectionLayout("q", heads), activation_ok=True, notes=notes,
                                        probe_skip=PROBE_SKIP, qk_normalised=normalised))
        specs.append(ProjectionSpec("kv", "weight", ProjectionLayout("kv", heads), activation_ok=True, notes=notes,
                                    probe_skip=PROBE_SKIP, qk_normalised=normalised))
        return specs
