"""LayerScale on the attention branch: y -> gamma * y, gamma a learnable vector per output channel,
initialised small (Touvron et al., ICCV 2021, CaiT: 0.1 up to depth 18, 1e-5 at 24, 1e-6 deeper).

``layer_scale(model)`` hooks every attention module the adapters find (those ``speccond.apply``
conditions): its output, or the first element of a tuple output (transformers, nn.MultiheadAttention),
is multiplied by the module's new parameter ``layer_scale_gamma`` (D,), where D is the width of the
attention's input (its q projection's in_features), which is also its output width. A model built with
its own LayerScale (timm ``init_values``) scales the block's output after the projection; this one
scales the attention module's output, the same place when the attention module ends with its output
projection (timm's Attention).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import nn

from speccond.peers.hooks import PeerHook
from speccond.peers.targets import projection_sites

LAYER_SCALE_INIT = 0.1  # CaiT's value for networks up to 18 layers deep
PARAMETER = "layer_scale_gamma"


def layer_scale(
    model: nn.Module, *, init: float = LAYER_SCALE_INIT, targets: Optional[Sequence[str]] = None,
    exclude: Optional[Sequence[str]] = None,
) -> list[str]:
    """gamma * attention(x) on every attention module found, gamma = ``init`` per channel, in place;
    returns the attention modules' names. Raises ValueError, before anything changes, when nothing is
    found, a module carries it already, or the q projection's input width cannot be read."""
    if not (isinstance(init, float) and init > 0):
        raise ValueError(f"layer_scale: init must be a positive float, got {init!r}")
    widths = {}
    for site in projection_sites(model, "layer_scale", targets, exclude):
        name = site.attention_name or site.module_name.rpartition(".")[0]
        if name in widths:
            continue
        attention = model.get_submodule(name)
        if hasattr(attention, PARAMETER):
            raise ValueError(f"{name} already has {PARAMETER!r} (layer_scale applied twice?); build a fresh model")
        widths[name] = site.layout.check_shape(getattr(site.module, site.param_name).shape, site.qualified_name)[1]
    for name, width in widths.items():
        attention = model.get_submodule(name)
        weight = next(attention.parameters())
        gamma = torch.full((width,), init, dtype=weight.dtype, device=weight.device)  # (D,)
        attention.register_parameter(PARAMETER, nn.Parameter(gamma))
        attention.register_forward_hook(LayerScaleHook())
    return list(widths)


class LayerScaleHook(PeerHook):
    """Forward hook: the output (or a tuple's first element, (..., D)) times ``layer_scale_gamma`` (D,)."""

    def __call__(self, module: nn.Module, args: tuple, output):
        gamma = getattr(module, PARAMETER)
        if isinstance(output, tuple):
            return (output[0] * gamma, *output[1:])
        return output * gamma

    def take_off(self, module: nn.Module) -> None:
        delattr(module, PARAMETER)
