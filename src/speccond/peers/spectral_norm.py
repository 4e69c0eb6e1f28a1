"""Spectral normalisation of the q, k, v projections, per block: sigmaReparam and spectral norm.

    W_hat_b = gamma_b / sigma(W_b) * W_b      sigma_reparam   (Zhai et al., ICML 2023)
    W_hat_b = W_b / sigma(W_b)                 spectral_norm   (Miyato et al., ICLR 2018)

for each q, k, v block W_b of each projection the adapters find (the projections ``speccond.apply``
conditions). Each is a torch parametrization of the projection weight (:class:`BlockSpectralNorm`), so
the trained Parameter keeps its identity (``module.parametrizations.<name>.original``) and an optimiser
built before or after sees the same object; ``speccond.peers.remove`` takes them off.

Zhai et al. reparametrise every linear layer of the network; these functions act on the q, k, v
projections only, the ones the fixed correction acts on (a comparison then differs in those alone).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

from speccond.core.layout import ProjectionLayout
from speccond.peers.targets import check_unparametrized, projection_sites

# Power iterations when a block's u, v are first set; then one per training-mode forward. spectral_norm
# does what torch.nn.utils.parametrizations.spectral_norm does (15), so it starts from the same estimate;
# sigma_reparam sets gamma = sigma(W0) from the estimate, and 15 iterations leave it a few percent low on
# a random 32 x 32 block (sigma_2 / sigma_1 ~ 0.97), so it iterates until the estimate has converged.
SPECTRAL_NORM_INIT_ITERATIONS = 15
SIGMA_REPARAM_INIT_ITERATIONS = 200


def spectral_norm(
    model: nn.Module, *, targets: Optional[Sequence[str]] = None, exclude: Optional[Sequence[str]] = None,
    init_iterations: int = SPECTRAL_NORM_INIT_ITERATIONS,
) -> list[str]:
    """W_b / sigma(W_b) for every q, k, v block of ``model``'s attention projections, in place; returns the
    parametrized weights' names. ``targets`` / ``exclude``: as in SpectralConfig. For a separate q, k or v
    Linear this is torch.nn.utils.parametrizations.spectral_norm (same draws, same iterations).

    Raises ValueError, before anything changes, when nothing is found, attention is not covered by an
    adapter, or a projection already carries a parametrization."""
    return _parametrize(model, "spectral_norm", targets, exclude, learnable_scale=False, iterations=init_iterations)


def sigma_reparam(
    model: nn.Module, *, targets: Optional[Sequence[str]] = None, exclude: Optional[Sequence[str]] = None,
    init_iterations: int = SIGMA_REPARAM_INIT_ITERATIONS,
) -> list[str]:
    """gamma_b / sigma(W_b) * W_b for every q, k, v block, gamma_b learnable and set to sigma(W0_b) (so the
    function is unchanged at the call), in place; returns the parametrized weights' names. Errors as
    :func:`spectral_norm`."""
    return _parametrize(model, "sigma_reparam", targets, exclude, learnable_scale=True, iterations=init_iterations)


def _parametrize(model, method, targets, exclude, learnable_scale: bool, iterations: int) -> list[str]:
    if not (isinstance(iterations, int) and iterations >= 1):
        raise ValueError(f"{method}: init_iterations must be an int >= 1, got {iterations!r}")
    sites = projection_sites(model, method, targets, exclude)
    for site in sites:  # every check before the first change: an error leaves the model as it was
        check_unparametrized(site, method)
        site.layout.check_shape(getattr(site.module, site.param_name).shape, site.qualified_name)
    for site in sites:
        weight = getattr(site.module, site.param_name)
        norm = BlockSpectralNorm(weight, site.layout, learnable_scale=learnable_scale, init_iterations=iterations)
        norm.train(site.module.training)  # a new module is in training mode; follow the model's mode
        parametrize.register_parametrization(site.module, site.param_name, norm)  # runs forward once
        norm.reset_scale(site.module.parametrizations[site.param_name].original)
    return [site.qualified_name for site in sites]


class BlockSpectralNorm(nn.Module):
    """Parametrization W -> W_hat that rescales each q, k, v block of one projection weight separately.

        W_hat_b = gamma_b / sigma(W_b) * W_b      (sigma-reparam, Zhai et al., ICML 2023)
        W_hat_b = W_b / sigma(W_b)                 (spectral-norm, Miyato et al., ICLR 2018)

    for every logical block W_b (layout.block_rows) of the (out, in) view. sigma(W_b) = u_b^T W_b v_b with
    persistent unit vectors u_b, v_b: ``init_iterations`` power iterations from random at construction,
    then one per training-mode forward, under no_grad; the gradient flows through W_b in u^T W v, as in
    torch's spectral_norm.

    For a separate projection (one block) this is torch.nn.utils.parametrizations.spectral_norm (same
    random draws, same iterations). For a fused weight torch's function would divide the whole (3A, D)
    matrix by its largest singular value, so only the largest of W_Q, W_K, W_V would have norm 1 and the
    others would be shrunk by an amount that depends on how a codebase happens to store them. Per block
    treats W_Q, W_K, W_V as the separate matrices they are in the attention formula, so a fused timm ViT
    and a model with separate q, k, v Linears get the same function.

    Buffers ``u_<role>`` (out_block,), ``v_<role>`` (in,); parameter ``gamma`` (blocks,) when learnable,
    set by :meth:`reset_scale` to the converged estimate sigma(W0_b), so at initialisation W_hat = W0.
    """

    def __init__(
        self, weight: torch.Tensor, layout: ProjectionLayout, learnable_scale: bool, init_iterations: int,
        eps: float = 1e-12,
    ):
        super().__init__()
        self.layout = layout
        self.eps = eps
        matrix = layout.out_in(weight.detach())  # (out, in)
        out_features, in_features = matrix.shape
        row_block = torch.empty(out_features, dtype=torch.long, device=matrix.device)  # block index of each row
        for index, role in enumerate(layout.roles):
            rows = layout.block_rows(role, out_features).to(matrix.device)  # (out_block,)
            row_block[rows] = index
            self.register_buffer(f"rows_{role}", rows, persistent=False)
            # Drawn in the order torch's spectral_norm draws them (u, then v), from the global generator.
            u = matrix.new_empty(rows.numel()).normal_(0, 1)  # (out_block,)
            v = matrix.new_empty(in_features).normal_(0, 1)  # (in,)
            self.register_buffer(f"u_{role}", F.normalize(u, dim=0, eps=eps))
            self.register_buffer(f"v_{role}", F.normalize(v, dim=0, eps=eps))
        self.register_buffer("row_block", row_block, persistent=False)
        self.gamma = nn.Parameter(matrix.new_ones(len(layout.roles))) if learnable_scale else None  # (blocks,)
        self._power_method(matrix, init_iterations)

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        matrix = self.layout.out_in(weight)  # (out, in)
        if self.training:
            self._power_method(matrix.detach(), 1)
        divisor = self.sigmas(matrix)  # (blocks,)
        if self.gamma is not None:
            divisor = divisor / self.gamma
        return self.layout.out_in(matrix / divisor[self.row_block].unsqueeze(1))  # stored orientation

    def right_inverse(self, value: torch.Tensor) -> torch.Tensor:
        """Assigning ``module.weight = W`` stores W itself (as torch's spectral_norm does)."""
        return value

    def sigmas(self, matrix: torch.Tensor) -> torch.Tensor:
        """u_b^T W_b v_b per block, differentiable in W: shape (blocks,)."""
        values = []
        for role in self.layout.roles:
            block = matrix[getattr(self, f"rows_{role}")]  # (out_block, in)
            # Clones: the buffers are updated in place by the next power iteration, after autograd saved them.
            u = getattr(self, f"u_{role}").clone(memory_format=torch.contiguous_format)
            v = getattr(self, f"v_{role}").clone(memory_format=torch.contiguous_format)
            values.append(torch.vdot(u, torch.mv(block, v)))
        return torch.stack(values)

    @torch.no_grad()
    def reset_scale(self, weight: torch.Tensor) -> None:
        """gamma_b = sigma(W_b) as the current u, v estimate it, so that W_hat = W (no-op without gamma)."""
        if self.gamma is not None:
            self.gamma.copy_(self.sigmas(self.layout.out_in(weight)))

    @torch.no_grad()
    def _power_method(self, matrix: torch.Tensor, iterations: int) -> None:
        for role in self.layout.roles:
            block = matrix[getattr(self, f"rows_{role}")]  # (out_block, in)
            u, v = getattr(self, f"u_{role}"), getattr(self, f"v_{role}")
            for _ in range(iterations):
                u.copy_(F.normalize(torch.mv(block, v), dim=0, eps=self.eps))
                v.copy_(F.normalize(torch.mv(block.t(), u), dim=0, eps=self.eps))
