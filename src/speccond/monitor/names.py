"""The names every front end logs, as paths so that every logger groups them (TensorBoard, W&B, MLflow, CSV).

    speccond/kappa/layer3/q/head0       kappa of head 0 of W_Q + C in layer 3 (sigma_max / sigma_min)
    speccond/kappa/layer3/q             kappa of the whole W_Q + C block of layer 3
    speccond/sigma_max/layer3/q         its largest singular value (and sigma_min: its smallest)
    speccond/entropy/layer3/head0       mean attention entropy of head 0 of layer 3 on the training batch (nats)
    speccond/entropy/layer3             mean over the measured heads of layer 3
    speccond/kappa/mean, /max           over the per-head kappas measured (the blocks' when per_head is off)
    speccond/entropy/mean, /min         over the measured heads

Roles are the paper's: q, k, v. Layers and heads count from 0 in the order speccond.layers finds them.
"""
from __future__ import annotations

from typing import Optional

PREFIX = "speccond"


def spectrum_name(quantity: str, layer: int, role: str, head: Optional[int] = None) -> str:
    """``speccond/<quantity>/layer<l>/<role>[/head<h>]``; quantity is kappa, sigma_max or sigma_min."""
    base = f"{PREFIX}/{quantity}/layer{layer}/{role}"
    return base if head is None else f"{base}/head{head}"


def entropy_name(layer: int, head: Optional[int] = None) -> str:
    """``speccond/entropy/layer<l>[/head<h>]``."""
    base = f"{PREFIX}/entropy/layer{layer}"
    return base if head is None else f"{base}/head{head}"


def summary_name(quantity: str, statistic: str) -> str:
    """``speccond/<quantity>/<statistic>``, e.g. speccond/kappa/mean."""
    return f"{PREFIX}/{quantity}/{statistic}"
