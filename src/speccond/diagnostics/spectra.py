"""Projection spectra: sigma_min, sigma_max and kappa of W_Q, W_K, W_V per layer, per head and whole.

Computed in float64 on the effective weight W + C (the weight the model uses) and, when a correction
is attached, also on the stored W. A block is the (out_block, in) matrix of one role, W_role^T; a head
is its dh rows. kappa is invariant under transposition, so the (out, in) storage gives the paper's
kappa(W_role) directly.
"""
from __future__ import annotations

from typing import Optional

from torch import nn

from speccond.checks import received, require_bool, require_module
from speccond.core.config import SpectralConfig
from speccond.core.spectral import spectrum
from speccond.diagnostics.records import Records
from speccond.layers import attention_layers, coverage_refusal


def spectra_refusal(model: nn.Module, config: Optional[SpectralConfig] = None) -> str:
    """Why :func:`projection_spectra` refuses ``model`` ('' when it does not): a projection whose output a
    hook changes after the weights (qk-norm's LayerNorms), PEFT tuner layers not merged, attention-like
    modules no adapter or declared layout covers, or no attention layer at all. Runs nothing."""
    layers = attention_layers(model, config)
    uncovered = coverage_refusal(model, "projection_spectra", config, layers)
    if uncovered:
        return uncovered
    for layer in layers:
        try:
            layer.check_weights_tell("projection_spectra")
        except ValueError as error:
            return str(error)
    return ""


def projection_spectra(model: nn.Module, config: Optional[SpectralConfig] = None, per_head: bool = True) -> Records:
    """Rows: layer, module, projection (q/k/v, the paper's role), head (None = the whole block),
    sigma_min, sigma_max, kappa of the effective weight; plus kappa_w, sigma_min_w, sigma_max_w of the stored
    W when conditioned. ``config`` only supplies declared layouts for modules no adapter knows. Raises
    ValueError naming attention-like modules that neither an adapter nor ``config`` covers, and when it finds
    no attention layer (an empty table would read as "nothing to measure")."""
    require_module(model, "speccond.diagnostics.projection_spectra")
    if config is not None and not isinstance(config, SpectralConfig):
        raise TypeError(f"projection_spectra: config must be a speccond.SpectralConfig or None, got {received(config)}")
    require_bool(per_head, "projection_spectra: per_head")
    layers = attention_layers(model, config)
    uncovered = coverage_refusal(model, "projection_spectra", config, layers)
    if uncovered:
        raise ValueError(uncovered)
    rows = []
    for layer in layers:
        layer.check_weights_tell("projection_spectra")
        for projection in layer.projections:
            effective, stored = projection.effective(), projection.stored()  # (out, in) each
            for stored_role, role in zip(projection.layout.roles, projection.acts_as):
                heads = [None] + (list(range(projection.layout.heads(stored_role))) if per_head else [])
                for head in heads:
                    index = projection.rows(stored_role, head)
                    eff = spectrum(effective[index])
                    row = {
                        "layer": layer.index,
                        "module": layer.name,
                        "projection": role,
                        "head": head,
                        "sigma_min": eff.sigma_min,
                        "sigma_max": eff.sigma_max,
                        "kappa": eff.kappa,
                        "conditioned": projection.attachment is not None,
                    }
                    if projection.attachment is not None:
                        raw = spectrum(stored[index])
                        row.update(sigma_min_w=raw.sigma_min, sigma_max_w=raw.sigma_max, kappa_w=raw.kappa)
                    rows.append(row)
    return Records(rows, "projection spectra (effective weights, float64)")
