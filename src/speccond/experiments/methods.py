"""The methods a comparison trains, applied in place to a freshly built model: ``apply_method(model, config)``.

Every method targets the same q, k, v projections that ``speccond.apply`` conditions
(``speccond.adapters.find_projections`` with the default SpectralConfig), so the peers differ from the
fixed correction only in what they do to those projections:

- "baseline": nothing.
- "spectral": W + C with the fixed correction C (lam, correction) of Saratchandran and Lucey (2025).
- "spectral-svd": W + C with the fixed SVD correction C = sigma_max U V^T.
- "shifted-init": W0 + lam I baked into the initial weights, no correction afterwards.
- "sigma-reparam": W_hat = gamma / sigma(W) * W per q, k, v block, gamma learnable (Zhai et al., 2023).
- "spectral-norm": W_hat = W / sigma(W) per q, k, v block (Miyato et al., 2018).
- "qk-norm": LayerNorm over head_dim on every head of q and of k before the logits (Dehghani et al., 2023).

The peers are the public functions of :mod:`speccond.peers` (sigma_reparam, spectral_norm, qk_norm);
this module maps a TrainConfig onto them and onto speccond.apply.
"""
from __future__ import annotations

import logging

from torch import nn

import speccond
from speccond import peers
from speccond.experiments.config import METHODS, TrainConfig

log = logging.getLogger(__name__)


def apply_method(model: nn.Module, config: TrainConfig) -> None:
    """Apply ``config.method`` to ``model`` in place (a freshly built model, not yet trained).

    Raises:
        ValueError: the method is unknown; the model has no q, k, v projections speccond recognises (or
            attention that no adapter covers); a projection already carries a parametrization; qk-norm was
            asked for an attention that reads its weight directly or already normalises q and k.
    """
    method = config.method
    if method == "baseline":
        return
    if method == "spectral":
        speccond.apply(model, speccond.SpectralConfig(
            lam=_lam(config), correction=config.correction, granularity=config.granularity,
            target_kappa=config.target_kappa or 2.0, **_scales(config)))
    elif method == "spectral-svd":
        speccond.apply(model, speccond.SpectralConfig(
            correction="svd", granularity=config.granularity, **_scales(config)))
    elif method == "shifted-init":  # W0 + C as a plain initialisation: decay then pulls it to 0, not to C
        speccond.apply(model, speccond.SpectralConfig(
            lam=_lam(config), granularity=config.granularity, target_kappa=config.target_kappa or 2.0,
            **_scales(config)))
        speccond.remove(model, merge=True)
    elif method == "sigma-reparam":
        peers.sigma_reparam(model)
    elif method == "spectral-norm":
        peers.spectral_norm(model)
    elif method == "qk-norm":
        peers.qk_norm(model)
    else:
        raise ValueError(f"unknown method {method!r}; known methods: {', '.join(METHODS)}")
    log.info("applied method %s to %s", method, type(model).__name__)


def _lam(config: TrainConfig) -> float | str:
    """config.lam, or "auto" when config.target_kappa is set."""
    return "auto" if getattr(config, "target_kappa", 0) else config.lam


def _scales(config: TrainConfig) -> dict[str, float | str]:
    """lam_q, lam_k, lam_v: the lam for the projections in config.corrected, 0 (untouched) for the rest."""
    return {f"lam_{role}": (_lam(config) if role in config.corrected else 0.0) for role in "qkv"}
