"""Attention entropy per layer and head: H = -sum_j p_ij log p_ij, averaged over queries and the batch.

Uniform attention has entropy log(N), or less where a padding mask or causality hides keys
(``uniform_entropy``); values near 0 mean one-hot attention, the collapse that sigmaReparam guards
against and the risk of lam = 10 at initialisation (docs/THEORY.md section 3).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from torch import nn

from speccond.checks import require_module
from speccond.diagnostics.heads import Inputs, head_cases, measured_layers
from speccond.diagnostics.records import Records


def row_entropy(probs: torch.Tensor) -> torch.Tensor:
    """-sum_j p_j log p_j over the last dimension of probabilities (..., n) -> (...), in nats (0 log 0 = 0)."""
    return -(probs * probs.clamp_min(torch.finfo(probs.dtype).tiny).log()).sum(-1)


def uniform_reference(rows: list[dict]) -> float | None:
    """The largest entropy of uniform attention among entropy rows (the dashed line the plots draw):
    ``uniform_entropy``, or ``log_n`` for rows written before that field; None when there are none."""
    values = [r.get("uniform_entropy", r.get("log_n")) for r in rows if r.get("kind", "entropy") == "entropy"]
    values = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return max(values) if values else None


def attention_entropy(model: nn.Module, inputs: Inputs, layers: Optional[Sequence[int]] = None) -> Records:
    """Rows: layer, head, entropy (mean nats over queries and batch), min_entropy, log_n, and uniform_entropy:
    the entropy of attention spread evenly over the keys each query may see (mean of log visible keys),
    which is log_n unless a padding mask or causality hides some (AttentionHead.visible_keys).

    layers: the attention layers to measure (default every one; where the head diagnostics refuse one, say
    an attention pooling head, the error names the ``layers=`` that measures the others)."""
    require_module(model, "speccond.diagnostics.attention_entropy")
    inputs = inputs if isinstance(inputs, (tuple, dict)) else (inputs,)  # a dict: keyword inputs
    rows = []
    for layer in measured_layers(model, layers, "attention_entropy"):
        for head, case in enumerate(head_cases(model, inputs, layer)):
            with torch.no_grad():
                probs = case.double().probabilities()  # (B, N, N)
            entropy = row_entropy(probs)  # (B, N)
            rows.append(
                {
                    "layer": layer,
                    "head": head,
                    "entropy": float(entropy.mean()),
                    "min_entropy": float(entropy.min()) + 0.0,  # -0.0 for one-hot rows prints as -0
                    "log_n": math.log(probs.shape[-1]),
                    "uniform_entropy": float(case.visible_keys().double().log().mean()),
                }
            )
    return Records(rows, "attention entropy (nats)")
