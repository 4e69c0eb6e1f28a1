"""kappa(J) of a real head's weight Jacobian from its Gram matrix J J^T: jacobian_spectrum(method="gram")
(tests/test_jacobian.py, method="gram").

Why the Gram matrix. J = d vec(A) / d [vec W_Q, vec W_K, vec W_V] is (R, C) with R = B N dh rows and
C = 3 D dh columns: for one image through a timm ViT-Ti block at 224 px, 12608 x 36864 (ViT-S: 12608 x
73728). When R <= C minus the structural null space (jacobian.py), J has full row rank and its R singular
values are the square roots of the eigenvalues of the (R, R) matrix J J^T: kappa(J) = sqrt(lmax / lmin).
Golub-Kahan-Lanczos on J (the "matrix-free" method) needs on the order of kappa steps to resolve the
small end and cannot bound it from below short of exhausting all R dimensions (lanczos.py); a dense SVD
of J costs O(R^2 C) (minutes) and 3.7 GB. J J^T is small enough to hold and factor.

How J J^T is formed. A sees each weight only through the projections x W + b, so with G = X X^T
(the (B N, B N) Gram matrix of all tokens, since the weights are shared by the samples), rows (t, a) =
(token, output channel):

    J_V J_V^T = (P G P^T) kron I_dh                    A_t = sum_j P_tj v_j, P does not depend on W_V
    J_Q J_Q^T [(t, a), (t', a')] = G_tt' (T_t T_t'^T)[a, a']    T_t = dA_t / d(x_t W_Q + b_Q), (dh, dh)
    J_K J_K^T [(t, a), (t', a')] = s^2 (q_t . q_t') (L G L^T)[(t, a), (t', a')]
        L[(t, a), j] = phi'_tj P_tj (v_j - A_t)[a]  (the derivative of A_t[a] by the logit s q_t . k_j)

and J J^T is their sum (the three blocks of J are side by side). Row t of A depends on W_Q only through
its own query, so T_t comes from dh vector-Jacobian products with the head's own forward (q/k/v biases,
q normalisation, soft-capping, logit biases and causal masks included). The key block needs the logit to
be s q_t . k_j with k_j = x_j W_K + b_K: a head with k normalisation or rotary embeddings takes J from
torch.func (jacobian.weight_jacobian, O(R^2 C)) and forms J J^T from it. Forming costs O(R^2 (N + dh)):
about 5 s at R = 12608.

How its extreme eigenvalues are read:

- R <= GRAM_EIGH_MAX: all eigenvalues (eigvalsh, O(R^3), 6 s at R = 4160). Values and brackets as for an
  exact SVD, with the rounding margin of the Gram matrix: an eigenvalue computed to within
  dl = R eps lmax (the backward error of the eigensolver, and of forming entries that each sum N + dh
  products), so sigma_min in [sqrt(lmin - dl), sqrt(lmin + dl)]. Squaring the singular values costs
  accuracy at the small end: the relative width of that bracket is about R eps kappa^2, fine for kappa
  up to about 1 / sqrt(R eps) / 10 (1e5 at R = 4160); beyond that the bracket's upper end is inf and
  kappa is nan, and a lower bound is all the Gram matrix can give.
- R > GRAM_EIGH_MAX (a full eigendecomposition of 12608 x 12608 takes minutes here): one Cholesky
  factorisation J J^T = L L^T (O(R^3 / 3), 20-30 s at R = 12608 on one thread), which also shows that
  J J^T is positive definite; then Lanczos with full reorthogonalisation on J J^T for lmax and on
  (J J^T)^{-1} (two triangular solves per step) for 1 / lmin: shift-invert turns the hard small end into
  the easy large end, so both converge in a few dozen steps. A Ritz value theta of a symmetric matrix is
  a Rayleigh quotient: lmax >= theta_1 and 1 / lmin >= mu_1 hold whatever happens (the lower end of the
  kappa bracket is proven); the residual r of a Ritz pair puts an eigenvalue within r of it, which bounds
  lmax <= theta_1 + r and 1 / lmin <= mu_1 + rho provided the Krylov space has seen the extreme
  eigenvector, which a seeded random start does with probability one: the upper end of the bracket rests
  on that, and kappa is filled (converged) once both relative residuals are below GRAM_RESIDUAL_RTOL.
"""
from __future__ import annotations

import math

import torch
from torch.func import vjp

Tensor = torch.Tensor

GRAM_EIGH_MAX = 6000  # eigvalsh up to this R (R = 4160: 6 s here), Cholesky + Lanczos above
GRAM_LANCZOS_STEPS = 80  # at most, for each end; stops once the residual is below GRAM_RESIDUAL_RTOL
GRAM_RESIDUAL_RTOL = 1e-10


def can_structure(head) -> bool:
    """True when J J^T has the closed form of the module docstring: logits s q_t . k_j + bias with
    k_j = x_j W_K + b_K (no k normalisation, no rotary embedding)."""
    return getattr(head, "k_norm", None) is None and getattr(head, "rotary", None) is None and hasattr(head, "probabilities")


def structured_gram(h) -> Tensor:
    """J J^T of the weight Jacobian of a float64 head that ``can_structure``, (R, R) with R = B N dh, rows
    in vec(A)'s order (jacobian.py): the module docstring's closed form, accumulated in place in one
    (R, R) matrix plus one temporary. (jacobian.weight_gram takes J J^T from torch.func's J otherwise.)"""
    b, n, d = h.x.shape
    dh = h.w_q.shape[1]
    t = b * n  # tokens of the whole batch
    x = h.x.reshape(t, d)  # (T, D)
    gram_x = x @ x.T  # (T, T) = G
    p = h.probabilities()  # (B, N, N)
    p_full = torch.block_diag(*p)  # (T, T): P of each sample on its diagonal block
    v = h.x @ h.w_v + (0 if h.b_v is None else h.b_v)  # (B, N, dh)
    out = p @ v  # (B, N, dh) = A

    gram = torch.zeros(t, dh, t, dh, dtype=torch.float64)  # (T, dh, T, dh) = (R, R)
    gram.diagonal(dim1=1, dim2=3).add_((p_full @ gram_x @ p_full.T).unsqueeze(-1))  # V block: (T, T, dh)

    tq = _query_derivatives(h).reshape(t * dh, dh)  # rows (t, a): T_t[a, :]
    block = (tq @ tq.T).view(t, dh, t, dh)  # (T, dh, T, dh)
    gram += block.mul_(gram_x[:, None, :, None])  # Q block
    del block

    q = _query(h)  # (B, N, dh), after the q normalisation: what meets k in the logit
    k = h.x @ h.w_k + (0 if h.b_k is None else h.b_k)  # (B, N, dh)
    slope = torch.ones_like(p)  # (B, N, N): phi' of the logit
    if getattr(h, "softcap", None) is not None:
        slope = 1 - torch.tanh((h.scale * q) @ k.transpose(-2, -1) / h.softcap) ** 2
    c = (slope * p).unsqueeze(-1) * (v.unsqueeze(1) - out.unsqueeze(2))  # (B, N, N, dh): [b, i, j, a]
    ell = torch.zeros(b, n, dh, b, n, dtype=torch.float64)  # L: rows (t, a), columns j over all tokens
    for sample in range(b):
        ell[sample, :, :, sample, :] = c[sample].permute(0, 2, 1)  # (N, dh, N): [i, a, j]
    ell = ell.reshape(t * dh, t)  # (R, T)
    block = (ell @ gram_x @ ell.T).view(t, dh, t, dh)  # (T, dh, T, dh)
    q_flat = q.reshape(t, dh)
    gram += block.mul_((h.scale**2 * (q_flat @ q_flat.T))[:, None, :, None])  # K block
    del block
    return gram.reshape(t * dh, t * dh)  # (R, R)


def _query(h) -> Tensor:
    """q = n_Q(x W_Q + b_Q), (B, N, dh)."""
    q = h.x @ h.w_q + (0 if h.b_q is None else h.b_q)
    return q if getattr(h, "q_norm", None) is None else h.q_norm(q)


def _query_derivatives(h) -> Tensor:
    """T_t = dA_t / d(x_t W_Q + b_Q) for every token t, (B, N, dh, dh) [.., a, e] = dA_t[a] / dq_t[e].

    Row t of A depends on the pre-normalisation queries only through its own, so one vjp with the
    cotangent e_a in every row gives row a of every T_t: dh vjps in all."""
    b, n, _ = h.x.shape
    dh = h.w_q.shape[1]
    pre = h.x @ h.w_q + (0 if h.b_q is None else h.b_q)  # (B, N, dh)

    def output(query_pre: Tensor) -> Tensor:
        # the head with its queries given: x W_Q + b_Q replaced by query_pre (W_Q = I on a dh-wide input)
        keys = h.x @ h.w_k + (0 if h.b_k is None else h.b_k)
        query = query_pre if getattr(h, "q_norm", None) is None else h.q_norm(query_pre)
        logits = (h.scale * query) @ keys.transpose(-2, -1)  # (B, N, N)
        if getattr(h, "softcap", None) is not None:
            logits = h.softcap * torch.tanh(logits / h.softcap)
        if getattr(h, "logit_bias", None) is not None:
            logits = logits + h.logit_bias
        if getattr(h, "causal", False):
            future = torch.ones(n, n, dtype=torch.bool).triu(1)
            logits = logits.masked_fill(future, float("-inf"))
        v = h.x @ h.w_v + (0 if h.b_v is None else h.b_v)
        return torch.softmax(logits, dim=-1) @ v  # (B, N, dh)

    _, pullback = vjp(output, pre)
    eye = torch.eye(dh, dtype=torch.float64)
    rows = [pullback(eye[a].expand(b, n, dh).contiguous())[0] for a in range(dh)]  # each (B, N, dh): T_t[a, :]
    return torch.stack(rows, dim=2)  # (B, N, dh, dh)


def _lanczos_top(apply, size: int, steps: int, seed: int) -> tuple[float, float, int]:
    """(largest Ritz value, its residual ||M y - theta y||, steps) of a symmetric operator, full reorthogonalisation."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(size, dtype=torch.float64, generator=generator)
    q = q / q.norm()
    basis = torch.zeros(min(steps, size), size, dtype=torch.float64)
    alphas: list[float] = []
    betas: list[float] = []
    theta, residual = 0.0, math.inf
    for k in range(basis.shape[0]):
        basis[k] = q
        w = apply(q)  # (size,)
        alphas.append(float(q @ w))
        for _ in range(2):  # full reorthogonalisation, twice
            w = w - basis[: k + 1].T @ (basis[: k + 1] @ w)
        beta = float(w.norm())
        tri = torch.diag(torch.tensor(alphas, dtype=torch.float64))
        if k:
            off = torch.tensor(betas, dtype=torch.float64)
            tri += torch.diag(off, 1) + torch.diag(off, -1)
        values, vectors = torch.linalg.eigh(tri)
        theta, residual = float(values[-1]), beta * float(vectors[-1, -1].abs())
        if residual <= GRAM_RESIDUAL_RTOL * abs(theta) or beta == 0.0:
            return theta, residual, k + 1
        betas.append(beta)
        q = w / beta
    return theta, residual, len(alphas)


def gram_extremes(gram: Tensor, seed: int = 0) -> dict:
    """lmin and lmax of a symmetric positive semi-definite ``gram`` with brackets (module docstring):
    {"lmax", "lmax_lower", "lmax_upper", "lmin", "lmin_lower", "lmin_upper", "exact", "iterations"}; lmin_lower
    0 and lmin nan when the matrix is not numerically positive definite."""
    size = gram.shape[0]
    if size <= GRAM_EIGH_MAX:
        values = torch.linalg.eigvalsh(gram)  # ascending
        lmin, lmax = float(values[0]), float(values[-1])
        return dict(lmax=lmax, lmax_lower=lmax, lmax_upper=lmax, lmin=lmin, lmin_lower=lmin, lmin_upper=lmin,
                    exact=True, iterations=None)
    theta, r_max, steps_max = _lanczos_top(lambda v: gram @ v, size, GRAM_LANCZOS_STEPS, seed)
    factor, info = torch.linalg.cholesky_ex(gram)
    if int(info) != 0:  # not positive definite to working precision: sigma_min is at the rounding level
        return dict(lmax=theta, lmax_lower=theta, lmax_upper=theta + r_max, lmin=math.nan, lmin_lower=0.0,
                    lmin_upper=math.nan, exact=False, iterations=steps_max)
    def inverse(v: Tensor) -> Tensor:  # (J J^T)^-1 v = L^-T L^-1 v (two triangular solves: 10x cholesky_solve's speed)
        half = torch.linalg.solve_triangular(factor, v.unsqueeze(1), upper=False)  # (R, 1)
        return torch.linalg.solve_triangular(factor.T, half, upper=True).squeeze(1)  # (R,)

    mu, r_min, steps_min = _lanczos_top(inverse, size, GRAM_LANCZOS_STEPS, seed + 1)
    converged = r_max <= GRAM_RESIDUAL_RTOL * theta and r_min <= GRAM_RESIDUAL_RTOL * mu
    return dict(lmax=theta if converged else math.nan, lmax_lower=theta, lmax_upper=theta + r_max,
                lmin=1.0 / mu if converged else math.nan, lmin_lower=1.0 / (mu + r_min), lmin_upper=1.0 / mu,
                exact=False, iterations=max(steps_max, steps_min))

