"""PEFT's tuner layers as speccond meets them, read by class path (peft is never imported here).

A PEFT tuner layer (``peft.tuners.*``: LoRA, DoRA, IA3, LoHa, LoKr, VeRA, ...) replaces a Linear by a
wrapper that holds it as ``base_layer`` and calls it. A correction goes on the wrapped layer:

- weight backend: a tuner reads the wrapped layer's ``weight``, which is W + C, and its merge writes
  that weight's ``.data``, which :class:`speccond.effective_weight.EffectiveWeight` stores as (value - C)
  in W: the merged model computes what the unmerged one did (tested for LoRA, DoRA, IA3, LoHa, LoKr and
  VeRA, tests/test_peft.py).
- activation backend: the wrapped layer's output is y + x C^T. A tuner that *adds* its update to that
  output (LoRA, LoHa, LoKr, VeRA) merges into W exactly, and C stays on the output. A tuner that
  *rescales* it (IA3, DoRA, LoRA variants) multiplies x C^T too, and its merge, which rescales W only,
  cannot: :func:`rescaling_reason` names those, ``speccond.apply`` refuses them, and the activation
  backend refuses to run under one (``speccond.backends.refuse_rescaling_wrapper``).
"""
from __future__ import annotations

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


def unmerged_tuner_layers(module: nn.Module) -> list[str]:
    """Names (below ``module``) of the PEFT tuner layers in it whose update is not in the wrapped layer's
    weight: their forward adds B A x (LoRA) or rescales (IA3) on top of the weight, so anything rebuilt
    from the weights alone (the head diagnostics, the projection spectra) would describe another function."""
    return [
        name
        for name, child in module.named_modules()
        if is_tuner_layer(child) and not (getattr(child, "merged", False) and not getattr(child, "disable_adapters", True))
    ]


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
