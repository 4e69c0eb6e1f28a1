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

sigma-reparam and spectral-norm are torch parametrizations of the projection weight, so the trained
Parameter keeps its identity (``module.parametrizations.<name>.original``) and an optimiser built before or
after sees the same object. qk-norm is a forward hook on the projection module that produces q and k,
with its LayerNorms registered as children of that module (``q_norm``, ``k_norm``) so they are trained
and saved with the model.
"""
from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

import speccond
from speccond.adapters import ProjectionSite, find_projections, unrecognised_attention, unrecognised_message
from speccond.adapters.base import QK_NORM_NOTE
from speccond.adapters.timm_xcit import XCA_NORM_NOTE
from speccond.experiments.config import METHODS, TrainConfig
from speccond.layout import ProjectionLayout

log = logging.getLogger(__name__)

# Power iterations when a block's u, v are first set; then one per training-mode forward. spectral-norm
# does what torch.nn.utils.parametrizations.spectral_norm does (15), so it starts from the same estimate;
# sigma-reparam sets gamma = sigma(W0) from the estimate, and 15 iterations leave it a few percent low on
# a random 32 x 32 block (sigma_2 / sigma_1 ~ 0.97), so it iterates until the estimate has converged.
SPECTRAL_NORM_INIT_ITERATIONS = 15
SIGMA_REPARAM_INIT_ITERATIONS = 200
# LayerNorm epsilon of qk-norm: timm's ViT builds its q_norm / k_norm with timm.layers.LayerNorm (eps 1e-6).
QK_NORM_EPS = 1e-6


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
    elif method in ("sigma-reparam", "spectral-norm"):
        sites = _sites(model, method)
        for site in sites:  # every check before the first change: an error leaves the model as it was
            _check_unparametrized(site, method)
            site.layout.check_shape(getattr(site.module, site.param_name).shape, site.qualified_name)
        reparam = method == "sigma-reparam"
        iterations = SIGMA_REPARAM_INIT_ITERATIONS if reparam else SPECTRAL_NORM_INIT_ITERATIONS
        for site in sites:
            weight = getattr(site.module, site.param_name)
            norm = BlockSpectralNorm(weight, site.layout, learnable_scale=reparam, init_iterations=iterations)
            norm.train(site.module.training)  # a new module is in training mode; follow the model's mode
            parametrize.register_parametrization(site.module, site.param_name, norm)  # runs forward once
            norm.reset_scale(site.module.parametrizations[site.param_name].original)
    elif method == "qk-norm":
        plans = [(site, _qk_norm_blocks(site)) for site in _sites(model, method)]
        if not any(blocks for _, blocks in plans):
            raise ValueError(
                f"method 'qk-norm' found nothing to normalise in {type(model).__name__}: every q, k projection it "
                "targets already normalises q and k (XCiT's XCA); use a model with ordinary softmax(q k^T) attention"
            )
        for site, blocks in plans:
            if blocks:
                _attach_qk_norm(site, blocks)
    else:
        raise ValueError(f"unknown method {method!r}; known methods: {', '.join(METHODS)}")
    log.info("applied method %s to %s", method, type(model).__name__)


def _lam(config: TrainConfig) -> float | str:
    """config.lam, or "auto" when config.target_kappa is set."""
    return "auto" if getattr(config, "target_kappa", 0) else config.lam


def _scales(config: TrainConfig) -> dict[str, float | str]:
    """lam_q, lam_k, lam_v: the lam for the projections in config.corrected, 0 (untouched) for the rest."""
    return {f"lam_{role}": (_lam(config) if role in config.corrected else 0.0) for role in "qkv"}


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
    and a model with separate q, k, v Linears get the same function. Zhai et al. reparametrise every
    linear layer; here only the q, k, v projections are, the ones the fixed correction acts on, so the
    comparison differs in those projections only.

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


class QKNormHook:
    """Forward hook y -> y with every head of the q and k blocks layer-normalised over head_dim.

        q_h <- LayerNorm_q(q_h),  k_h <- LayerNorm_k(k_h)   for each head h      (Dehghani et al., ICML 2023)

    One LayerNorm(head_dim) per role, shared by the heads of that role, as timm's ``qk_norm=True``
    (``Attention.q_norm`` / ``k_norm``). The LayerNorms are the projection module's children ``q_norm`` and
    ``k_norm``; the v block passes through unchanged. A class rather than a closure so the model pickles.

    ``blocks``: (stored role, LayerNorm child name) pairs. The name is the role the block plays in the
    logits (the site's ``acts_as``), which differs from the stored role in DaViT's channel attention.
    """

    def __init__(self, layout: ProjectionLayout, blocks: tuple[tuple[str, str], ...]):
        self.layout = layout
        self.blocks = blocks

    def __call__(self, module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        out_features = output.shape[-1]  # output (..., out)
        for role, norm_name in self.blocks:
            rows = self.layout.block_rows(role, out_features).to(output.device)  # (H * dh,)
            heads = output[..., rows].unflatten(-1, (self.layout.heads(role), -1))  # (..., H, dh)
            normed = getattr(module, norm_name)(heads).flatten(-2)  # (..., H * dh)
            output = output.index_copy(output.dim() - 1, rows, normed)  # (..., out)
        return output


def _qk_norm_blocks(site: ProjectionSite) -> tuple[tuple[str, str], ...]:
    """(stored role, LayerNorm name) of each block of ``site`` that forms the logits; () when there is none
    or the attention already normalises q and k itself (XCiT's XCA). Raises when qk-norm cannot apply."""
    acts_as = site.acts_as or site.layout.roles  # the role each stored block plays in the attention
    blocks = tuple((role, f"{acting}_norm") for role, acting in zip(site.layout.roles, acts_as) if acting != "v")
    if not blocks:
        return ()
    if XCA_NORM_NOTE in site.notes:
        log.info("%s: XCA already L2-normalises q and k over the tokens; qk-norm leaves it", site.qualified_name)
        return ()
    if not site.activation_ok:
        raise ValueError(
            f"{site.qualified_name} ({site.source}): qk-norm hooks the module that outputs q and k, but this "
            "attention reads the weight directly instead of calling a Linear-like module (e.g. "
            "nn.MultiheadAttention.in_proj_weight); use a model whose q/k projections are Linear modules "
            "(timm ViT, transformers BERT) or one with its own qk normalisation"
        )
    if QK_NORM_NOTE in site.notes:
        raise ValueError(
            f"{site.attention_name or site.module_name} ({site.source}) already normalises q and k; build the "
            "model without its own qk_norm before applying method 'qk-norm'"
        )
    for _, name in blocks:
        if hasattr(site.module, name):
            raise ValueError(
                f"{site.module_name} already has an attribute {name!r} (qk-norm applied twice?); build a fresh model"
            )
    site.layout.check_shape(getattr(site.module, site.param_name).shape, site.qualified_name)
    return blocks


def _attach_qk_norm(site: ProjectionSite, blocks: tuple[tuple[str, str], ...]) -> None:
    """One LayerNorm(head_dim) child per block in ``blocks``, and the hook that applies them."""
    weight = getattr(site.module, site.param_name)
    out_features, _ = site.layout.check_shape(weight.shape, site.qualified_name)
    head_dim = site.layout.head_dim(out_features)
    for _, name in blocks:
        site.module.add_module(name, nn.LayerNorm(head_dim, eps=QK_NORM_EPS, device=weight.device, dtype=weight.dtype))
    site.module.register_forward_hook(QKNormHook(site.layout, blocks))


def _sites(model: nn.Module, method: str) -> list[ProjectionSite]:
    """The q, k, v projections speccond.apply would condition, with its errors for attention nothing covers."""
    config = speccond.SpectralConfig()
    sites = find_projections(model, config)
    unknown = unrecognised_attention(model, config, sites)
    if unknown:
        raise ValueError(unrecognised_message(unknown))
    if not sites:
        raise ValueError(
            f"method {method!r} found no q, k, v projections in {type(model).__name__}: it acts on the same "
            "projections speccond.apply conditions; use a model with attention speccond recognises (timm ViT, "
            "nn.MultiheadAttention, transformers BERT/GPT-2, ...) or method 'baseline'"
        )
    return sites


def _check_unparametrized(site: ProjectionSite, method: str) -> None:
    if parametrize.is_parametrized(site.module, site.param_name):
        raise ValueError(
            f"{site.qualified_name} already has a parametrization; method {method!r} needs a freshly built "
            "model (was a method applied twice, or speccond.apply called first?)"
        )
