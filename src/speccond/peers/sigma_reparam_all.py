"""sigmaReparam as its authors apply it: every Linear and Conv2d weight, each one matrix.

    speccond.peers.sigma_reparam_all_layers(model)    # W_hat = gamma / sigma(W) * W on every layer

Zhai et al. (ICML 2023, apple/ml-sigma-reparam, vision/layers.py) reparametrise every linear and
convolutional layer of the network, not only attention, and re-initialise each weight from a normal of
std 0.02 (``init_std``; None keeps the weights). Here:

- each weight is one matrix, a Conv2d's (out, in * kh * kw): a fused qkv Linear gets one sigma, as in
  the authors' code, unlike :func:`speccond.peers.sigma_reparam`, which treats W_Q, W_K, W_V as the
  separate blocks of the attention formula and leaves every other layer alone;
- sigma(W) = v^T W u with u the first right singular vector from an SVD at the call, then one power
  iteration per training-mode forward;
- gamma, learnable, starts at sigma(W0), so the function is unchanged at the call.

It is a torch parametrization, so the trained Parameter keeps its identity; ``speccond.peers.remove``
takes it off.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

AUTHORS_INIT_STD = 0.02  # trunc_normal_(std=0.02 * gain), gain 1 (convert_to_sn's default)


def sigma_reparam_all_layers(model: nn.Module, *, init_std: Optional[float] = AUTHORS_INIT_STD) -> list[str]:
    """gamma / sigma(W) * W on every nn.Linear and nn.Conv2d weight of ``model``, in place; returns the
    weights' names. ``init_std``: each weight is first redrawn from a normal of that std (torch's
    trunc_normal_), as the authors initialise; None keeps the trained or initialised weights.

    Raises ValueError, before anything changes, when the model has no such layer or one of them already
    carries a parametrization of its weight."""
    if init_std is not None and not (isinstance(init_std, (int, float)) and init_std > 0):
        raise ValueError(f"sigma_reparam_all_layers: init_std must be a number > 0 or None, got {init_std!r}")
    layers = [(name, module) for name, module in model.named_modules() if isinstance(module, (nn.Linear, nn.Conv2d))]
    if not layers:
        raise ValueError("sigma_reparam_all_layers: the model has no nn.Linear or nn.Conv2d layer")
    taken = [name for name, module in layers if parametrize.is_parametrized(module, "weight")]
    if taken:
        raise ValueError(f"sigma_reparam_all_layers: {', '.join(taken[:3])} already carry a parametrization of their "
                         "weight (speccond.apply, a peer or torch's); remove it first")
    for _, module in layers:
        if init_std is not None:
            with torch.no_grad():
                nn.init.trunc_normal_(module.weight, std=float(init_std))
        reparam = MatrixSigmaReparam(module.weight)
        reparam.train(module.training)
        parametrize.register_parametrization(module, "weight", reparam)
    return [f"{name}.weight" if name else "weight" for name, _ in layers]


class MatrixSigmaReparam(nn.Module):
    """Parametrization W -> gamma / sigma(W) * W of one weight, viewed as the (out, rest) matrix.

    Buffer ``u`` (rest,): the estimate of the first right singular vector, exact at construction (SVD),
    then one power iteration per training-mode forward under no_grad; sigma(W) = v^T W u with
    v = normalise(W u), differentiable in W. Parameter ``gamma`` (1,): sigma(W0) at construction.
    """

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        with torch.no_grad():
            _, singular, right = torch.linalg.svd(weight.detach().flatten(1), full_matrices=False)
        self.register_buffer("u", right[0].clone())  # (rest,)
        self.gamma = nn.Parameter(singular[:1].clone())  # (1,)

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        matrix = weight.flatten(1)  # (out, rest)
        with torch.no_grad():
            v = F.normalize(matrix.mv(self.u), dim=0)  # (out,)
            u = F.normalize(matrix.t().mv(v), dim=0)  # (rest,)
            if self.training:
                self.u.copy_(u)
        sigma = torch.einsum("o,or,r->", v, matrix, u)
        return weight * (self.gamma / sigma)

    def right_inverse(self, value: torch.Tensor) -> torch.Tensor:
        """Assigning ``module.weight = W`` stores W itself (as torch's spectral_norm does)."""
        return value
