"""The architecture table (docs/MODELS.md, "Every family: the architecture table"): one tiny real model per family
people train today, built from config (no downloads), with what speccond must do to it.

Each ``Arch`` names, by hand, every projection weight the adapters must condition and its layout
(``params``), or the refusal expected (``refused``, a regex of the message). ``attention`` returns the
model's own attention probabilities per attention layer, in the order the adapters find the layers, as
(B, H, N, N), for the head diagnostics to be checked against; ``diagnostics_refused`` is the regex of the
diagnostics' refusal where they cannot rebuild the heads. The cases live in architectures_hf.py
(transformers) and architectures_timm.py (timm); tests/test_architectures.py runs every check on every
case, and README's supported-architecture table is checked against this table.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
from torch import nn

from speccond import ProjectionLayout

os.environ.setdefault("HF_HUB_OFFLINE", "1")

Inputs = dict  # keyword inputs of the model, e.g. {"input_ids": ..., "attention_mask": ...}


@dataclass(frozen=True)
class Arch:
    """One architecture of the table.

    name: the case id, "hf-<model_type>" or "timm-<family>" (README's table lists the same names).
    build: () -> the model, from config, in eval mode (float32; the tests cast to float64).
    inputs: () -> keyword inputs for ``model(**inputs)`` (drawn after torch.manual_seed).
    params: qualified weight name -> its expected ProjectionLayout ({} when refused).
    refused: regex of apply's error when the family is refused; None when it is conditioned.
    attention: (model, inputs) -> the model's own attention probabilities {attention module name:
        (B, H, N, N)}; None with ``diagnostics_refused`` set.
    diagnostics_refused: regex of the head diagnostics' error for layer 0 when they cannot rebuild it.
    activation_ok: whether the activation backend applies (every projection called as a Linear-like module).
    call: the README's one-line call for this family ("speccond.apply(model)" unless it needs more).
    reason: for a refused family, the reason README gives; for a conditioned one, a note (may be "").
    config: extra SpectralConfig fields (e.g. declared layouts).
    """

    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[], Inputs]
    params: dict[str, ProjectionLayout] = field(default_factory=dict)
    refused: Optional[str] = None
    attention: Optional[Callable[[nn.Module, Inputs], dict[str, torch.Tensor]]] = None
    diagnostics_refused: Optional[str] = None
    activation_ok: bool = True
    call: str = "speccond.apply(model)"
    reason: str = ""
    config: dict = field(default_factory=dict)


def output_tensor(output) -> torch.Tensor:
    """One tensor every parameter feeds: a model's last hidden state (and pooler output), or its logits."""
    if isinstance(output, torch.Tensor):
        return output
    parts = []
    for key in ("last_hidden_state", "pooler_output", "encoder_last_hidden_state", "logits"):
        value = getattr(output, key, None) if not isinstance(output, dict) else output.get(key)
        if isinstance(value, torch.Tensor):
            parts.append(value.flatten(1))
    if not parts:
        parts = [t.flatten(1) for t in output if isinstance(t, torch.Tensor)]
    return torch.cat(parts, dim=1)


def hf_attentions(model: nn.Module, inputs: Inputs) -> dict[str, torch.Tensor]:
    """transformers' own attention probabilities (eager attention, output_attentions=True) by the name of
    the self-attention module that computed them: {name: (B, H, N, N)}. An encoder-decoder's encoder
    layers come first, then its decoder's self-attention layers; cross-attention is not listed."""
    import copy

    from speccond.layers import attention_layers

    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    with torch.no_grad():
        out = eager(**inputs, output_attentions=True)
    names = [layer.name for layer in attention_layers(model) if not _is_cross(layer.name)]
    probabilities = []
    for key in ("encoder_attentions", "attentions", "decoder_attentions"):
        value = getattr(out, key, None)
        if value is not None:
            probabilities += list(value)
    assert len(names) == len(probabilities), (names, len(probabilities))
    return dict(zip(names, probabilities))


def _is_cross(name: str) -> bool:
    return any(part in name for part in ("encoder_attn", "EncDecAttention", "crossattention", "cross_attn"))
