"""Extreme singular values of a linear operator given only as matvec / rmatvec: Golub-Kahan-Lanczos.

For A: R^n -> R^m (m >= n; pass J or J^T, whichever is tall) the Golub-Kahan bidiagonalisation

    A V_k = U_k B_k,    A^T U_k = V_k B_k^T + beta_k v_{k+1} e_k^T,    B_k upper bidiagonal (k, k)

with V_k, U_k orthonormal is Lanczos on the Gram matrix A^T A started at v_1: B_k^T B_k = V_k^T A^T A V_k
is its Lanczos tridiagonal matrix, so the singular values of B_k are the Ritz values sqrt(theta) of
A^T A. It is written on A rather than on A^T A so that small singular values keep full float64
resolution (the Gram matrix squares them: a Ritz value of A^T A resolves sigma only down to
sqrt(eps) sigma_max). Both V and U are reorthogonalised fully at every step (classical Gram-Schmidt,
with a second pass when the first removed most of the vector), which keeps the Ritz values free of
spurious copies; it costs O(k^2 (m + n)) in all, which overtakes the matvecs of a ViT-sized head after
about a hundred steps.

Residuals: for a singular triplet B_k q = s p, B_k^T p = s q, the Ritz pair y = V_k q, z = U_k p satisfies
A y = s z exactly and ||A^T z - s y|| = |beta_k p_k| (p_k the last component of p), the Lanczos
|beta_k * last component| estimate. A singular value of A (or 0) lies within that distance of s
(Bauer-Fike on [[0, A], [A^T, 0]]), and Ritz values interlace: s_max <= sigma_max, s_min >= the n-th
singular value. Lanczos finds the extreme values first; it cannot certify that no smaller singular
value exists away from the Krylov space, which is the usual caveat of every Krylov estimate.

Start vectors (``start``): "random" (a seeded Gaussian in R^n), whose Krylov space sees the null space
of A, so the smallest Ritz value tends to the n-th singular value, zeros included; or "range"
(v_1 = A^T b for a seeded Gaussian b in R^m), which lies in range(A^T) = null(A)^perp, so every Ritz
value tends to a nonzero singular value: the way to get the smallest nonzero singular value of a
matrix with a (large) null space, without knowing that null space. (Rounding brings the null space
back only at the eps level, below ``zero_tol``.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

Tensor = torch.Tensor


@dataclass(frozen=True)
class LanczosResult:
    """Ritz estimates of the extreme singular values of A and their convergence (module docstring).

    sigma_min is the smallest Ritz value; min_is_zero when sigma_min <= zero_tol * sigma_max (certified
    numerically zero: by interlacing the true sigma_min is at most the smallest Ritz value). sigma_min_nonzero is the smallest Ritz value above
    zero_tol * sigma_max; residual_max and residual_min are the residuals of sigma_max and of
    sigma_min_nonzero. ``converged``: residual_max <= tol * sigma_max and residual_min <= tol *
    sigma_min_nonzero (and, from a random start, sigma_min either certified zero or converged too).
    ``ritz`` / ``residuals`` hold all k Ritz values (descending) and their residuals.
    """

    sigma_max: float
    sigma_min: float
    min_is_zero: bool
    sigma_min_nonzero: float
    residual_max: float
    residual_min: float
    iterations: int
    converged: bool
    ritz: tuple[float, ...]
    residuals: tuple[float, ...]


def _orthogonalise(w: Tensor, basis: Tensor) -> Tensor:
    """w minus its projection on the rows of ``basis`` (k, len(w)): classical Gram-Schmidt, repeated once
    when the first pass removed most of w (Kahan-Parlett "twice is enough": norm fell below 1/sqrt(2))."""
    if basis.shape[0] == 0:
        return w
    before = w.norm()
    w = w - basis.T @ (basis @ w)  # (len(w),)
    if w.norm() < 0.7071 * before:
        w = w - basis.T @ (basis @ w)
    return w


def _bidiagonal(alphas: list[float], betas: list[float]) -> Tensor:
    """Upper bidiagonal (k, k): alphas on the diagonal, betas[:k-1] above it."""
    k = len(alphas)
    b = torch.diag(torch.tensor(alphas, dtype=torch.float64))  # (k, k)
    if k > 1:
        b += torch.diag(torch.tensor(betas[: k - 1], dtype=torch.float64), 1)
    return b


def extreme_singular_values(
    matvec: Callable[[Tensor], Tensor],
    rmatvec: Callable[[Tensor], Tensor],
    shape: tuple[int, int],
    start: str = "random",
    max_iter: int = 300,
    tol: float = 1e-2,
    zero_tol: float = 1e-10,
    seed: int = 0,
    check_every: int = 5,
) -> LanczosResult:
    """Largest and smallest singular values of A: R^n -> R^m, shape (m, n) with m >= n, from matvec (A v)
    and rmatvec (A^T u).

    Stops after max_iter steps, when the Krylov space is exhausted (an invariant subspace: the Ritz
    values are then exact), or when the extreme Ritz values have converged (residual <= tol * value,
    checked every ``check_every`` steps, and every k / 8 steps once that is more, since each check is
    an SVD of the k x k B_k). Everything runs in float64; ``seed`` fixes the start vector.
    """
    m, n = shape
    if m < n:
        raise ValueError(f"extreme_singular_values expects a tall operator (m >= n), got shape {shape}: pass A^T")
    if start not in ("random", "range"):
        raise ValueError(f"start must be 'random' or 'range', got {start!r}")
    generator = torch.Generator().manual_seed(seed)
    if start == "random":
        v = torch.randn(n, dtype=torch.float64, generator=generator)  # (n,)
    else:
        v = rmatvec(torch.randn(m, dtype=torch.float64, generator=generator))  # (n,) in range(A^T)
    v = v / v.norm()
    steps = min(max_iter, n)
    vs = torch.zeros(steps + 1, n, dtype=torch.float64)  # rows: v_1 .. v_{k+1}
    u = matvec(v)  # (m,)
    us = torch.zeros(steps, m, dtype=torch.float64)  # rows: u_1 .. u_k
    vs[0] = v
    alphas: list[float] = [float(u.norm())]
    betas: list[float] = []
    if alphas[0] == 0.0:  # A v_1 = 0
        return _result([0.0], [0.0], 1, start, tol, zero_tol, exhausted=True)
    us[0] = u / alphas[0]
    scale = alphas[0]  # running estimate of ||A|| for the breakdown tests
    breakdown = 256 * torch.finfo(torch.float64).eps
    for k in range(1, steps + 1):
        r = _orthogonalise(rmatvec(us[k - 1]) - alphas[k - 1] * vs[k - 1], vs[:k])  # (n,)
        betas.append(float(r.norm()))
        scale = max(scale, betas[-1])
        exhausted = betas[-1] <= breakdown * scale or k == n
        # each check is an SVD of the k x k B_k: every check_every steps, then every k / 8 steps
        if exhausted or k == steps or k % max(check_every, k // 8) == 0:
            result = _result(alphas, betas, k, start, tol, zero_tol, exhausted)
            if exhausted or result.converged or k == steps:
                return result
        vs[k] = r / betas[-1]
        p = _orthogonalise(matvec(vs[k]) - betas[-1] * us[k - 1], us[:k])  # (m,)
        alphas.append(float(p.norm()))
        scale = max(scale, alphas[-1])
        if alphas[-1] <= breakdown * scale:  # A v_{k+1} in span(U_k): span(V_{k+1}) is invariant under A^T A
            alphas[-1] = 0.0
            return _result(alphas, betas + [0.0], k + 1, start, tol, zero_tol, exhausted=True)
        us[k] = p / alphas[-1]  # k < steps here: the check above returns at k == steps
    raise AssertionError("unreachable: the loop returns at k == steps")


def _result(alphas: list[float], betas: list[float], k: int, start: str, tol: float, zero_tol: float,
            exhausted: bool) -> LanczosResult:
    """Ritz values of B_k and their residuals |beta_k p_k|; convergence as in LanczosResult."""
    b = _bidiagonal(alphas[:k], betas)
    p, s, _ = torch.linalg.svd(b)  # p (k, k) left singular vectors, s (k,) descending
    residuals = (0.0 if exhausted else abs(betas[k - 1])) * p[-1].abs()  # (k,)
    sigma_max, res_max = float(s[0]), float(residuals[0])
    sigma_min, res_min = float(s[-1]), float(residuals[-1])
    # Rayleigh-Ritz on the Gram matrix of the smaller side: every Ritz value lies inside its spectrum, so
    # the true sigma_min is at most the smallest Ritz value and the true sigma_max at least the largest.
    # A smallest Ritz value below zero_tol * sigma_max therefore certifies sigma_min numerically zero.
    min_is_zero = sigma_max == 0.0 or sigma_min <= zero_tol * sigma_max
    above = (s > zero_tol * sigma_max).nonzero()
    i_nz = int(above[-1]) if above.numel() else 0
    sigma_nz, res_nz = (float(s[i_nz]), float(residuals[i_nz])) if above.numel() else (0.0, 0.0)
    converged = res_max <= tol * sigma_max and res_nz <= tol * sigma_nz
    if start == "random" and not min_is_zero:
        converged = converged and res_min <= tol * sigma_min
    return LanczosResult(
        sigma_max=sigma_max, sigma_min=sigma_min, min_is_zero=bool(min_is_zero), sigma_min_nonzero=sigma_nz,
        residual_max=res_max, residual_min=res_nz,
        iterations=k, converged=bool(converged), ritz=tuple(s.tolist()), residuals=tuple(residuals.tolist()),
    )
