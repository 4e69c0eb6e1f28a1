"""PEFT's tuner layers as speccond meets them, read by class path (peft is never imported here).

A PEFT tuner layer (``peft.tuners.*``: LoRA, DoRA, IA3, LoHa, LoKr, VeRA, ...) replaces a Linear by a
wrapper that holds it as ``base_layer`` and calls it. A correction goes on the wrapped layer:

- weight backend: a tuner reads the wrapped layer's ``weight``, which is W + C, and its merge writes
  that weight's ``.data``, which :class:`speccond.core.effective_weight.EffectiveWeight` stores as (value - C)
  in W: the merged model computes what the unmerged one did (tested for LoRA, DoRA, IA3, LoHa, LoKr and
  VeRA, tests/test_peft.py).
- activation backend: the wrapped layer's output is y + x C^T. A tuner that *adds* its update to that
  output (LoRA, LoHa, LoKr, VeRA) merges into W exactly, and C stays on the output. A tuner that
  *rescales* it (IA3, DoRA, LoRA variants) multiplies x C^T too, and its merge, which rescales W only,
  cannot: :func:`rescaling_reason` names those, ``speccond.apply`` refuses them, and the activation
  backend refuses to run under one (``speccond.core.backends.refuse_rescaling_wrapper``).
"""
from __future__ import annotations

import torch
from torch import nn

# Tuner packages whose Linear layers return base_layer(x) + update(x) (no variant: see rescaling_reason).
ADDITIVE_TUNERS = ("peft.tuners.lora.", "peft.tuners.loha.", "peft.tuners.lokr.", "peft.tuners.vera.")


def is_tuner_layer(module: object) -> bool:
    """A PEFT tuner layer that wraps another module as ``base_layer``."""
    return (
        isinstance(module, nn.Module)
        and type(module).__module__.startswith("peft.")
        and isinstance(module._modules.get("base_layer"), nn.Module)
    )


def tuned_layer(module: nn.Module) -> tuple[nn.Module, str]:
    """The layer a PEFT tuner layer wraps (through nested wrappers) and its path below ``module``, e.g.
    (the Linear, "base_layer"); ``(module, "")`` for any other module."""
    path = []
    while is_tuner_layer(module):
        module = module._modules["base_layer"]
        path.append("base_layer")
    return module, ".".join(path)


def unmerged_tuner_layers(module: nn.Module, readable_ok: bool = False) -> list[str]:
    """Names (below ``module``) of the PEFT tuner layers in it whose update is not in the wrapped layer's
    weight: their forward adds B A x (LoRA) or rescales (IA3) on top of the weight, so anything rebuilt
    from the weights alone (the head diagnostics, the projection spectra) would describe another function.
    ``readable_ok``: leave out those whose update :func:`unmerged_delta` reads (additive, one level deep)."""
    return [
        name
        for name, child in module.named_modules()
        if is_tuner_layer(child) and not (getattr(child, "merged", False) and not getattr(child, "disable_adapters", True))
        and not (readable_ok and unmerged_reason(child) == "")
    ]


def unmerged_reason(wrapper: nn.Module) -> str:
    """'' when the update of the tuner layer ``wrapper`` that is not merged can be read as a weight, delta W
    with y = x (W + delta W)^T + b (:func:`unmerged_delta`), else why not."""
    reason = rescaling_reason(wrapper)
    if reason:
        return reason
    if is_tuner_layer(wrapper._modules["base_layer"]):
        return f"PEFT's {type(wrapper).__name__} wraps another tuner layer"
    if not callable(getattr(wrapper, "get_delta_weight", None)):
        return f"PEFT's {type(wrapper).__name__} has no get_delta_weight"
    if any(getattr(wrapper, "lora_bias", {}).get(name, False) for name in _unmerged_adapters(wrapper)):
        return f"PEFT's {type(wrapper).__name__} trains a bias (lora_bias=True), which the weight does not hold"
    return ""


def unmerged_delta(wrapper: nn.Module) -> torch.Tensor | None:
    """The update that the tuner layer ``wrapper`` adds and its base layer's weight does not hold, in that
    weight's storage orientation: the sum of ``get_delta_weight`` (LoRA: scaling B A) over the active
    adapters not merged; None when there is none. Computed from the adapters, nothing is merged."""
    deltas = [wrapper.get_delta_weight(name) for name in _unmerged_adapters(wrapper)]
    return None if not deltas else sum(deltas[1:], deltas[0]).detach()


def _unmerged_adapters(wrapper: nn.Module) -> list[str]:
    if getattr(wrapper, "disable_adapters", False):
        return []
    merged = set(getattr(wrapper, "merged_adapters", []))
    active = getattr(wrapper, "active_adapters", [])
    names = getattr(wrapper, "adapter_layer_names", ())  # PEFT: ("lora_A", "lora_B", ...), keyed by adapter
    present = getattr(wrapper, names[0], {}) if names else {}
    return [name for name in active if name not in merged and name in present]


def rescaling_reason(wrapper: nn.Module) -> str:
    """'' when the tuner layer ``wrapper`` adds its update to its base layer's output, else why it does not
    (then the activation backend's x C^T would be rescaled with y, and no merge into W can carry that)."""
    name = f"PEFT's {type(wrapper).__module__}.{type(wrapper).__name__}"
    variants = getattr(wrapper, "lora_variant", None) or {}
    if variants:
        kinds = sorted({type(v).__name__ for v in variants.values()})
        return f"{name} runs the LoRA variant {', '.join(kinds)} (DoRA and the other variants rescale or reshape the base layer's output)"
    if not type(wrapper).__module__.startswith(ADDITIVE_TUNERS):
        return f"{name} is not one of the tuners known to add their update to the base layer's output (LoRA, LoHa, LoKr, VeRA)"
    return ""
