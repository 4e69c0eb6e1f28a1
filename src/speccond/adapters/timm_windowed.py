"""timm attention inside windows, blocks or grids, with a fused ``qkv`` nn.Linear called as a module
(both backends apply). The head diagnostics rebuild attention over whole token sequences only, so they
refuse these (NesT excepted: its blocks are a batch axis).

- MaxViT ``AttentionCl`` (maxxvit.py, block and grid partition attention, channels last): ``qkv``
  (3 * A, D), A = H * dim_head. With ``head_first`` (timm's default) the output is split as
  ``view(B, N, H, 3 * dh).chunk(3)``: per head, q, k, v next to each other, arrangement ``per_head``;
  otherwise ``reshape(B, N, 3, H, dh)``, ``blocked``. A relative position bias is added to the logits.
  (MaxxViT / CoAtNet ``Attention2d`` uses a 1x1 conv: refused in timm_refused.py.)
- GCViT ``WindowAttentionGlobal`` (gcvit.py): local blocks have ``qkv`` (3 * dim, dim), blocks q, k, v;
  global blocks have ``qkv`` (2 * dim, dim), blocks k, v only, and take their queries from the model's
  global query generator (convolutions over the whole feature map), not from a projection of the
  window tokens. There only K and V are corrected (a report note). Relative position bias in windows.
- NesT ``Attention`` (nest.py): input (B, T, N, C), attention within each of T image blocks; ``qkv``
  (3 * dim, dim), blocks q, k, v (``reshape(B, T, N, 3, H, dh)``). The heads are rebuilt with the blocks
  folded into the batch, (B * T, N, C).
- Twins ``LocallyGroupedAttn`` (twins.py): ``qkv`` (3 * dim, dim), blocks q, k, v, inside ws x ws groups.
"""
from __future__ import annotations

from dataclasses import replace

from torch import nn

from speccond.adapters.base import ProjectionSpec
from speccond.adapters.head_inputs import HeadInputs, argument
from speccond.adapters.timm_attention import TimmFusedQkvAdapter
from speccond.core.layout import ProjectionLayout

GCVIT_GLOBAL_NOTE = (
    "GCViT global attention takes its queries from the global query generator (convolutions), not from a "
    "projection of the tokens: only K and V are corrected"
)
_WINDOWS = "attends inside {}; the head diagnostics rebuild attention over whole token sequences only"


class TimmMaxVitAdapter(TimmFusedQkvAdapter):
    """MaxViT AttentionCl: ``per_head`` with ``head_first`` (timm's default), else ``blocked``."""

    def projections(self, module: nn.Module) -> list[ProjectionSpec]:
        arrangement = "per_head" if module.head_first else "blocked"
        layout = ProjectionLayout("qkv", module.num_heads, arrangement=arrangement)
        return [replace(spec, layout=layout) for spec in super().projections(module)]


class TimmGcVitAdapter(TimmFusedQkvAdapter):
    """GCViT WindowAttentionGlobal: roles "kv" in global blocks (queries come from elsewhere)."""

    def projections(self, module: nn.Module) -> list[ProjectionSpec]:
        if not module.use_global:
            return super().projections(module)
        layout = ProjectionLayout("kv", module.num_heads)
        return [ProjectionSpec("qkv", "weight", layout, activation_ok=True, notes=self.notes + (GCVIT_GLOBAL_NOTE,))]


def nest_inputs(module: nn.Module, args: tuple, kwargs: dict) -> HeadInputs:
    """NesT: (B, T, N, C) blocks folded into the batch, (B * T, N, C); plain softmax(scale q k^T)."""
    x = argument(args, kwargs, 0, "x")
    if x is None or x.dim() != 4:
        raise ValueError("NesT attention expects a (B, T, N, C) input")
    return HeadInputs(x.detach().flatten(0, 1), float(module.scale))  # (B * T, N, C)


TIMM_MAXVIT = TimmMaxVitAdapter(
    "timm MaxViT AttentionCl", ("timm.models.maxxvit.AttentionCl",),
    head_reason=_WINDOWS.format("block or grid partitions with a relative position bias"),
)
TIMM_GCVIT = TimmGcVitAdapter(
    "timm GCViT WindowAttentionGlobal", ("timm.models.gcvit.WindowAttentionGlobal",),
    head_reason=_WINDOWS.format("windows (with global queries in global blocks) and a relative position bias"),
)
TIMM_NEST = TimmFusedQkvAdapter("timm NesT Attention", ("timm.models.nest.Attention",), head_form=nest_inputs)
TIMM_TWINS_LOCAL = TimmFusedQkvAdapter(
    "timm Twins LocallyGroupedAttn", ("timm.models.twins.LocallyGroupedAttn",),
    head_reason=_WINDOWS.format("ws x ws groups"),
)
