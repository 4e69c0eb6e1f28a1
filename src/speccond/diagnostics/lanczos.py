"""Extreme singular values of a linear operator given only as matvec / rmatvec: Golub-Kahan-Lanczos.

For A: R^n -> R^m (m >= n; pass J or J^T, whichever is tall) the Golub-Kahan bidiagonalisation

    A V_k = U_k B_k,    A^T U_k = V_k B_k^T + beta_k v_{k+1} e_k^T,    B_k upper bidiagonal (k, k)

with V_k, U_k orthonormal is Lanczos on the Gram matrix A^T A started at v_1: B_k^T B_k = V_k^T A^T A V_k
is its Lanczos tridiagonal matrix, so the singular values s_1 >= ... >= s_k of B_k are the Ritz values
sqrt(theta) of A^T A. It is written on A rather than on A^T A so that small singular values keep full
float64 resolution (the Gram matrix squares them: a Ritz value of A^T A resolves sigma only down to
sqrt(eps) sigma_max). Both V and U are reorthogonalised fully at every step (classical Gram-Schmidt,
with a second pass when the first removed most of the vector), which keeps the Ritz values free of
spurious copies; it costs O(k^2 (m + n)) in all, which overtakes the matvecs of a ViT-sized head after
about a hundred steps.

Breakdown (beta_k = 0: span(V_k) is invariant under A^T A, e.g. from repeated singular values; or
alpha_k = 0: A v_k lies in span(U_{k-1})) does not stop the iteration: the next v (or u) is a fresh seeded
vector orthogonalised against the basis, and beta_k (alpha_k) = 0 enters B_k, which keeps both relations
above exact. So the basis keeps growing until k = n.

What is proven, after k steps (``LanczosResult`` names in brackets):

1. Interlacing (Cauchy, on the compression V_k^T A^T A V_k): s_1 <= sigma_1(A) and s_k >= sigma_n(A),
   whatever the start vector. So sigma_max >= ``sigma_max`` and sigma_min <= ``sigma_min``: kappa(A) >=
   s_1 / s_k. s_k <= zero_tol * s_1 therefore proves sigma_n(A) <= zero_tol * sigma_max (``min_is_zero``).
2. Residuals: for a singular triplet B_k q = s p, B_k^T p = s q, the Ritz pair y = V_k q, z = U_k p
   satisfies A y = s z exactly and ||A^T z - s y|| = r := |beta_k p_k| (p_k the last component of p).
   By Bauer-Fike on the symmetric [[0, A], [A^T, 0]], whose eigenvalues are +-sigma_i(A) and zeros, some
   sigma_j(A) or 0 lies within r of s. So when s - r > zero_tol * s_1 there is a singular value of A in
   [s - r, s + r] above zero_tol * s_1: the smallest such singular value is at most s + r
   (``nonzero_bound``, the minimum over the Ritz values that qualify). This is NOT a statement about
   sigma_max or sigma_min themselves: a singular value the Krylov space has not seen may lie beyond s_1
   or below s_k, so sigma_max <= s_1 + r_1 is not proven.
3. Exhaustion (``exhausted``): after k = n steps V_n is an orthonormal basis of R^n and A V_n = U_n B_n,
   so the singular values of B_n are those of A (up to floating-point rounding, as for a dense SVD), and
   every residual is zero. From the "range" start the iteration also ends, early, when after a
   breakdown a restart vector A^T b (fresh seeded b) has less than 256 eps of its norm left outside
   span(V_k): range(A^T) then very probably lies in span(V_k), but a singular value small enough, or a
   b unlucky enough, escapes that test, so this is not counted as exhaustion. What it does prove comes
   from 2: beta_k = 0 makes every residual zero, so every Ritz value is a singular value of A.
4. Not used as a bound: from the "range" start, in exact arithmetic, every Ritz value would lie in
   [sigma_+, sigma_max] (sigma_+ the smallest positive singular value). In floating point the rounding
   left in a residual that nearly breaks down is amplified by 1 / beta_k into the next basis vector,
   which brings null-space directions back at O(1) (a (60, 40) test matrix with 3 distinct nonzero
   singular values shows a Ritz value 2e-16 after 25 range-start steps), and a Ritz value mixing them
   can fall anywhere below sigma_+. So ``nonzero_bound`` uses 2 (or 3) from either start.

Without exhaustion nothing bounds sigma_max from above or sigma_min from below: the Krylov data are
consistent with an A that has an arbitrarily large, or zero, singular value on the complement of the
Krylov space (A w is only known to be orthogonal to U_k there). A certified upper bound on kappa needs
k = n, or information about A other than these products.

Start vectors (``start``): "random" (a seeded Gaussian in R^n), whose Krylov space sees the null space
of A, so the smallest Ritz value tends to the n-th singular value, zeros included; or "range"
(v_1 = A^T b for a seeded Gaussian b in R^m), which lies in range(A^T) = null(A)^perp, so every Ritz
value tends to a nonzero singular value: the way to get the smallest nonzero singular value of a
matrix with a (large) null space, without knowing that null space.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

Tensor = torch.Tensor

STARTS = ("random", "range")


@dataclass(frozen=True)
class LanczosResult:
    """Ritz estimates of the extreme singular values of A and what they prove (module docstring, 1-4).

    sigma_max = s_1 <= sigma_max(A) and sigma_min = s_k >= sigma_n(A) (interlacing); min_is_zero when
    s_k <= zero_tol * s_1, which proves sigma_n(A) numerically zero. sigma_min_nonzero is the smallest Ritz
    value above zero_tol * s_1; nonzero_bound a proven upper bound on the smallest singular value of A
    above zero_tol * s_1 (inf when none is proven: module docstring, 2 and 3). residual_max and
    residual_min are the residuals of s_1 and of sigma_min_nonzero. exhausted: k = n, so the Ritz values are the
    n singular values of A (module docstring, 3); restarts: how many breakdowns were continued with a
    fresh vector. ``ritz`` / ``residuals``: all k Ritz values
    (descending) and their residuals.
    """

    sigma_max: float
    sigma_min: float
    min_is_zero: bool
    sigma_min_nonzero: float
    nonzero_bound: float
    residual_max: float
    residual_min: float
    iterations: int
    exhausted: bool
    restarts: int
    start: str
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


class _Fresh:
    """Seeded fresh unit vectors orthogonal to a basis, for the start and for restarts after breakdown."""

    def __init__(self, rmatvec: Callable[[Tensor], Tensor], shape: tuple[int, int], start: str, seed: int):
        self.rmatvec, self.shape, self.start = rmatvec, shape, start
        self.generator = torch.Generator().manual_seed(seed)

    def v(self, basis: Tensor, floor: float) -> Tensor | None:
        """A unit vector of R^n orthogonal to ``basis`` (k, n), in range(A^T) for the "range" start; None
        when what is left after orthogonalising is at most ``floor`` times the vector's norm (for "range":
        range(A^T) lies in span(basis))."""
        m, n = self.shape
        w = torch.randn(n, dtype=torch.float64, generator=self.generator)  # (n,)
        if self.start == "range":
            w = self.rmatvec(torch.randn(m, dtype=torch.float64, generator=self.generator))  # (n,) in range(A^T)
        before = float(w.norm())
        w = _orthogonalise(_orthogonalise(w, basis), basis)  # a third pass would change it at the eps level
        after = float(w.norm())
        return None if before == 0.0 or after <= floor * before else w / after

    def u(self, basis: Tensor) -> Tensor:
        """A unit vector of R^m orthogonal to ``basis`` (k, m), k < n <= m."""
        w = torch.randn(self.shape[0], dtype=torch.float64, generator=self.generator)  # (m,)
        w = _orthogonalise(_orthogonalise(w, basis), basis)
        return w / w.norm()


def extreme_singular_values(
    matvec: Callable[[Tensor], Tensor],
    rmatvec: Callable[[Tensor], Tensor],
    shape: tuple[int, int],
    start: str = "random",
    max_iter: int | None = None,
    zero_tol: float = 1e-10,
    seed: int = 0,
) -> LanczosResult:
    """Largest and smallest singular values of A: R^n -> R^m, shape (m, n) with m >= n, from matvec (A v)
    and rmatvec (A^T u), with what they prove (module docstring).

    Runs min(max_iter, n) steps (max_iter None: n, exhaustion), fewer only when the "range" start has
    found an invariant subspace that a fresh A^T b cannot leave (module docstring, 3). Everything runs
    in float64; ``seed`` fixes the start and restart vectors. One SVD of the k x k B_k, at the end.
    """
    m, n = shape
    if m < n:
        raise ValueError(f"extreme_singular_values expects a tall operator (m >= n), got shape {shape}: pass A^T")
    if start not in STARTS:
        raise ValueError(f"start must be one of {STARTS}, got {start!r}")
    if max_iter is not None and max_iter < 1:
        raise ValueError(f"max_iter must be >= 1 (or None: run to exhaustion), got {max_iter}")
    steps = n if max_iter is None else min(max_iter, n)
    breakdown = 256 * torch.finfo(torch.float64).eps
    fresh = _Fresh(rmatvec, shape, start, seed)
    vs = torch.zeros(steps + 1, n, dtype=torch.float64)  # rows: v_1 .. v_{k+1}
    us = torch.zeros(steps, m, dtype=torch.float64)  # rows: u_1 .. u_k
    v = fresh.v(vs[:0], 0.0)
    if v is None:  # A^T b = 0: A = 0
        return _result([0.0], [0.0], 1, start, zero_tol, exhausted=True, restarts=0)
    vs[0] = v
    alphas: list[float] = []
    betas: list[float] = []
    scale, restarts = 0.0, 0  # scale: running estimate of ||A|| for the breakdown tests
    for k in range(1, steps + 1):
        # A v_k = beta_{k-1} u_{k-1} + alpha_k u_k
        p = matvec(vs[k - 1]) - (betas[-1] * us[k - 2] if k > 1 else 0.0)  # (m,)
        p = _orthogonalise(p, us[: k - 1])
        alphas.append(float(p.norm()))
        scale = max(scale, alphas[-1])
        if alphas[-1] <= breakdown * scale:  # A v_k in span(U_{k-1}): any unit u_k orthogonal to U_{k-1}
            alphas[-1], restarts = 0.0, restarts + 1
            us[k - 1] = fresh.u(us[: k - 1])
        else:
            us[k - 1] = p / alphas[-1]
        # A^T u_k = alpha_k v_k + beta_k v_{k+1}
        r = _orthogonalise(rmatvec(us[k - 1]) - alphas[-1] * vs[k - 1], vs[:k])  # (n,)
        betas.append(float(r.norm()))
        scale = max(scale, betas[-1])
        if k == n:  # V_n spans R^n: r = 0 up to rounding
            return _result(alphas, betas, k, start, zero_tol, exhausted=True, restarts=restarts)
        if betas[-1] <= breakdown * scale:  # span(V_k) invariant under A^T A: continue from a fresh v
            betas[-1] = 0.0
            v = fresh.v(vs[:k], breakdown if start == "range" else 0.0)
            if v is None:  # "range" start: range(A^T) lies in span(V_k), up to what A^T b can show
                return _result(alphas, betas, k, start, zero_tol, exhausted=False, restarts=restarts)
            restarts += 1
            vs[k] = v
        else:
            vs[k] = r / betas[-1]
        if k == steps:
            return _result(alphas, betas, k, start, zero_tol, exhausted=False, restarts=restarts)
    raise AssertionError("unreachable: the loop returns at k == steps")


def _result(alphas: list[float], betas: list[float], k: int, start: str, zero_tol: float, exhausted: bool,
            restarts: int) -> LanczosResult:
    """Ritz values of B_k, their residuals |beta_k p_k| and the bounds they prove (module docstring)."""
    b = _bidiagonal(alphas[:k], betas)
    p, s, _ = torch.linalg.svd(b)  # p (k, k) left singular vectors, s (k,) descending
    residuals = (0.0 if exhausted else abs(betas[k - 1])) * p[-1].abs()  # (k,)
    sigma_max, res_max = float(s[0]), float(residuals[0])
    sigma_min = float(s[-1])
    threshold = zero_tol * sigma_max
    min_is_zero = sigma_max == 0.0 or sigma_min <= threshold
    above = (s > threshold).nonzero()
    i_nz = int(above[-1]) if above.numel() else 0
    sigma_nz, res_nz = (float(s[i_nz]), float(residuals[i_nz])) if above.numel() else (0.0, 0.0)
    return LanczosResult(
        sigma_max=sigma_max, sigma_min=sigma_min, min_is_zero=bool(min_is_zero), sigma_min_nonzero=sigma_nz,
        nonzero_bound=_nonzero_bound(s, residuals, threshold, exhausted),
        residual_max=res_max, residual_min=res_nz, iterations=k, exhausted=exhausted, restarts=restarts,
        start=start, ritz=tuple(s.tolist()), residuals=tuple(residuals.tolist()),
    )


def _nonzero_bound(s: Tensor, residuals: Tensor, threshold: float, exhausted: bool) -> float:
    """A proven upper bound on the smallest singular value of A above ``threshold`` (inf: none proven).

    Exhausted: the smallest Ritz value above the threshold (module docstring, 3). Otherwise, from either
    start, min (s_i + r_i) over the Ritz values with s_i - r_i > threshold (module docstring, 2 and 4).
    """
    if exhausted:
        above = s[s > threshold]
        return float(above[-1]) if above.numel() else math.inf
    qualify = s - residuals > threshold  # (k,)
    return float((s + residuals)[qualify].min()) if bool(qualify.any()) else math.inf
