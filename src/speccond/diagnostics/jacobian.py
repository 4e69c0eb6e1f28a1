"""The attention Jacobian of one head, exactly (materialised) or as an operator (jvp / vjp), and its spectrum.

One head of attention in the paper's layout (PAPER.md section 1), an ``AttentionHead`` (attention_head.py,
where its forward is written), with the model's own scale, optional projection biases, q/k normalisation
n_Q, n_K and an additive logit bias (relative positions, masks):

    A(X) = softmax(scale n_Q(X W_Q + b_Q) n_K(X W_K + b_K)^T + logit_bias) (X W_V + b_V)      W_* (D, dh)

Two Jacobians, both in float64 (PAPER.md section 1; issue 4):

- ``wrt="weights"``, the paper's J: d vec(A) / d [vec W_Q, vec W_K, vec W_V], biases excluded.
  Rows B*N*dh (vec(A) is the row-major flatten of A (B, N, dh)); columns 3*D*dh (blocks q, k, v in that
  order, each the row-major flatten of W (D, dh)). Singular values do not depend on these orderings.
- ``wrt="input"``: d vec(A) / d vec(X). A sample's output depends only on its own input, so for a batch
  this Jacobian is block diagonal with one (N*dh, N*D) block per sample. ``input_jacobian`` returns the
  blocks (B, N*dh, N*D); the spectrum of the full (B*N*dh, B*N*D) matrix is the union of the blocks'
  spectra, and its min(rows, cols)-th singular value is the smallest of the blocks' last ones. The
  matrix-free operator acts on the whole batch, which is the same block-diagonal matrix.

Condition numbers (``SingularSummary``): ``kappa = sigma_max / sigma_min`` with sigma_min the min(rows,
cols)-th singular value (PAPER.md section 1), and ``kappa_nonzero = sigma_max / sigma_min_nonzero`` over the
singular values above ``rtol * sigma_max`` (default rtol = max(rows, cols) * eps(float64), numpy's
matrix_rank convention). Inputs are cast to float64 and taken as exact: a float32 LayerNorm output
whose rows sum to zero only up to float32 rounding has full rank at this tolerance, and the directions
that rounding separates from the null space show up as singular values near 1e-7 sigma_max; pass a
larger rtol (e.g. 1e-5) to count them as zero.

**The weight Jacobian is structurally rank deficient.** Three families of directions leave A unchanged
to first order (``structural_null_dim`` counts them from the data, as a lower bound on dim null(J)):

1. the q/k gauge: for any dh x dh matrix G, (dW_Q, dW_K, dW_V) = (W_Q G, -W_K G^T, 0) gives
   dS = X W_Q G W_K^T X^T - X W_Q G W_K^T X^T = 0 (integrate it: (W_Q M, W_K M^-T) is the same
   function). dh^2 directions when X W_Q and X W_K have full column rank dh; with a query bias b_Q
   only those G with G^T b_Q = 0 survive (dh^2 - dh);
2. the softmax shift, Lambda(p) 1 = 0: if the all-ones vector is in the column space of X (X u = 1,
   stacked over the batch), then dW_K = u c^T adds q_i^T c to every logit of row i: dh directions;
3. the null space of X (stacked over the batch): dW = u c^T with X u = 0, in each of the three blocks:
   3 dh (D - rank X) directions. LayerNorm without affine (timm at init) gives X 1_D = 0, so this
   family is present in real models at initialisation.

So rank(J) <= min(rows, cols - structural_null_dim). When that is below min(rows, cols) the
min(rows, cols)-th singular value is exactly zero and kappa = inf by structure. For generic inputs
without biases this happens exactly when B N > 3 D - dh (B N > 3 D - dh + 1 with a nonzero query
bias): always when
rows >= cols, and for one sample when N > 3 D - dh. The rows grow with the batch and the columns do not:
a ViT head (D = 192, dh = 64, N = 65) is structurally singular from B = 8 on (33280 rows, rank at most
36864 - 4096). On every generic random case checked (tests/test_jacobian.py) the rank equals this
bound, so kappa is finite exactly when rows <= cols - structural_null_dim; repeated tokens (padding,
identical patches without position embedding) add null directions the count does not know, which the
exact and matrix-free methods then detect numerically. Otherwise ``kappa_nonzero`` is the informative
number.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from typing import Callable, Protocol

import torch
from torch.func import jacfwd, jacrev, jvp, vjp

from speccond.diagnostics.attention_head import AttentionHead, head_attention, one_sample  # noqa: F401 (re-exported)
from speccond.diagnostics.lanczos import extreme_singular_values

Tensor = torch.Tensor

# method="auto" materialises J when it has at most this many entries (float64: 16 MiB; the SVD of a
# 544 x 3072 J takes about 0.6 s here, of a 1024 x 9216 one about 13 s).
AUTO_EXACT_MAX_ENTRIES = 2_000_000


class HeadLike(Protocol):
    """What the functions here accept: an AttentionHead (built by hand or by heads.head_cases from a model),
    or a wrapper with its interface (bound.ScaleFoldedHead).

    Required: x (B, N, D); w_q, w_k, w_v (D, dh) in the paper's layout; output(x, w_q, w_k, w_v) -> A
    (B, N, dh), differentiable with torch.func in x and the weights, seeing x only through x W_Q, x W_K,
    x W_V; double() -> the same head in float64. theorem_bound also needs probabilities() -> P (B, N, N)
    and scale. Read when present: b_q (dh,) and q_norm / k_norm (None when q and k are not normalised),
    by structural_null_dim; logit_bias, by one_sample.
    """

    x: Tensor
    w_q: Tensor
    w_k: Tensor
    w_v: Tensor

    def output(self, x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor: ...

    def double(self) -> HeadLike: ...


def _dims(head: HeadLike) -> tuple[int, int, int, int]:
    """(B, N, D, dh) of a head."""
    b, n, d = head.x.shape
    return b, n, d, head.w_q.shape[1]


def _weights_fn(head: HeadLike) -> Callable[[Tensor], Tensor]:
    """vec(W) (3*D*dh,) -> vec(A) (B*N*dh,); vec(W) stacks q, k, v, each the row-major flatten of (D, dh)."""
    _, _, d, dh = _dims(head)

    def f(flat: Tensor) -> Tensor:
        w = flat.reshape(3, d, dh)  # (3, D, dh): blocks q, k, v
        return head.output(head.x, w[0], w[1], w[2]).reshape(-1)  # (B, N, dh) -> (B*N*dh,)

    return f


def _weights_point(head: HeadLike) -> Tensor:
    return torch.stack([head.w_q, head.w_k, head.w_v]).reshape(-1)  # (3, D, dh) -> (3*D*dh,)


def _input_fn(head: HeadLike) -> Callable[[Tensor], Tensor]:
    """vec(X) (B*N*D,) -> vec(A) (B*N*dh,): the whole batch (block diagonal over samples)."""
    shape = head.x.shape

    def f(flat: Tensor) -> Tensor:
        out = head.output(flat.reshape(shape), head.w_q, head.w_k, head.w_v)  # (B, N, dh)
        return out.reshape(-1)  # (B*N*dh,)

    return f


WRT = ("weights", "input")


def _check_wrt(wrt: str) -> None:
    if wrt not in WRT:
        raise ValueError(f"wrt must be one of {WRT}, got {wrt!r}")


def jacobian_shape(head: HeadLike, wrt: str = "weights") -> tuple[int, int]:
    """(rows, cols) of J: (B*N*dh, 3*D*dh) for weights, (B*N*dh, B*N*D) for the (block-diagonal) input J."""
    _check_wrt(wrt)
    b, n, d, dh = _dims(head)
    return (b * n * dh, 3 * d * dh) if wrt == "weights" else (b * n * dh, b * n * d)


def weight_jacobian(head: HeadLike) -> Tensor:
    """The paper's J = d vec(A) / d [vec W_Q, vec W_K, vec W_V], float64, (B*N*dh, 3*D*dh) (biases excluded)."""
    h = head.double()
    rows, cols = jacobian_shape(h, "weights")
    jac = jacrev if rows <= cols else jacfwd  # fewer basis vectors
    return jac(_weights_fn(h))(_weights_point(h))  # (B*N*dh, 3*D*dh)


def input_jacobian(head: HeadLike) -> Tensor:
    """d vec(A_b) / d vec(X_b) per sample, float64, (B, N*dh, N*D): the diagonal blocks of the batch J."""
    h = head.double()
    b, n, d, dh = _dims(h)
    blocks = []
    for index in range(b):
        if is_dataclass(h) and "x" in {field.name for field in fields(h)}:
            f = _input_fn(one_sample(h, index))  # (N*D,) -> (N*dh,)
        else:  # a head that cannot be sliced: differentiate its whole-batch output at sample ``index``
            def f(flat: Tensor, index: int = index) -> Tensor:
                x = torch.cat([h.x[:index], flat.reshape(1, n, d), h.x[index + 1 :]])  # (B, N, D)
                return h.output(x, h.w_q, h.w_k, h.w_v)[index].reshape(-1)  # (N*dh,)
        jac = jacrev if dh <= d else jacfwd
        blocks.append(jac(f)(h.x[index].reshape(-1)))  # (N*dh, N*D)
    return torch.stack(blocks)  # (B, N*dh, N*D)


def jacobian_operator(head: HeadLike, wrt: str = "weights") -> tuple[Callable, Callable, tuple[int, int]]:
    """J as an operator, never materialised: (matvec v -> J v, rmatvec u -> J^T u, (rows, cols)), float64.

    matvec is a forward-mode jvp (torch.func.jvp; it recomputes the forward, which costs less here than
    torch.func.linearize's tracing for a few hundred products), rmatvec a vjp whose backward graph is
    built once and reused.
    """
    _check_wrt(wrt)
    h = head.double()
    f, point = (_weights_fn(h), _weights_point(h)) if wrt == "weights" else (_input_fn(h), h.x.reshape(-1))
    _, vjp_fn = vjp(f, point)
    return (lambda v: jvp(f, (point,), (v,))[1]), (lambda u: vjp_fn(u)[0]), jacobian_shape(h, wrt)


def _default_rtol(shape: tuple[int, int]) -> float:
    return max(shape) * torch.finfo(torch.float64).eps


def _rank(matrix: Tensor, rtol: float | None = None) -> int:
    values = torch.linalg.svdvals(matrix.detach().to(torch.float64))  # (min(rows, cols),) descending
    if values.numel() == 0 or values[0] == 0:
        return 0
    tol = _default_rtol(tuple(matrix.shape)) if rtol is None else rtol
    return int((values > tol * values[0]).sum())


def structural_null_dim(head: HeadLike, wrt: str = "weights", rtol: float | None = None) -> int:
    """A lower bound on dim null(J), from the directions known to leave A unchanged (module docstring).

    weights: the null space of the stacked X (3 dh (D - rank X)); without q/k normalisation also the
    q/k gauge (dh^2, or dh^2 - dh with a nonzero query bias) and the softmax shift (dh, when 1 is in the
    column space of the stacked X), both counted when X W_Q and X W_K have full column rank, which also
    makes the three families independent. input: dX = c u^T with u orthogonal to the columns of W_Q,
    W_K and W_V (B N (D - rank [W_Q W_K W_V])). Both assume the head sees x only through x W_Q, x W_K,
    x W_V. Ranks count singular values above rtol * sigma_max (default: the module docstring's, per
    matrix).
    """
    _check_wrt(wrt)
    h = head.double()
    b, n, d, dh = _dims(h)
    if wrt == "input":
        return b * n * (d - _rank(torch.cat([h.w_q, h.w_k, h.w_v], dim=1), rtol))  # (D, 3*dh)
    x = h.x.reshape(b * n, d)  # (B*N, D): the weights are shared by all samples
    null = 3 * dh * (d - _rank(x, rtol))
    normalised = getattr(h, "q_norm", None) is not None or getattr(h, "k_norm", None) is not None
    if not normalised and _rank(x @ h.w_q, rtol) == dh and _rank(x @ h.w_k, rtol) == dh:
        b_q = getattr(h, "b_q", None)
        null += dh * dh - (dh if b_q is not None and bool(b_q.abs().max() > 0) else 0)  # the gauge
        ones = torch.ones(b * n, 1, dtype=torch.float64)  # (B*N, 1)
        u = torch.linalg.lstsq(x, ones).solution  # (D, 1): X u = 1 if 1 is in range(X)
        if float((x @ u - ones).norm()) <= 1e-8 * (b * n) ** 0.5:
            null += dh  # the softmax shift
    return null


def gauge_direction(w_q: Tensor, w_k: Tensor, g: Tensor) -> Tensor:
    """vec of (W_Q G, -W_K G^T, 0), the q/k gauge direction for a (dh, dh) matrix G: J times it is 0."""
    return torch.stack([w_q @ g, -w_k @ g.T, torch.zeros_like(w_q)]).reshape(-1)  # (3, D, dh) -> (3*D*dh,)


@dataclass(frozen=True)
class SingularSummary:
    """Extreme singular values and condition numbers of a Jacobian (module docstring for the definitions).

    sigma_min is the min(rows, cols)-th singular value and kappa = sigma_max / sigma_min (inf when
    ``singular``: sigma_min <= rtol * sigma_max). sigma_min_nonzero is the smallest singular value above
    rtol * sigma_max and kappa_nonzero = sigma_max / sigma_min_nonzero. rank is the numerical rank
    (exact method only); rank_bound = min(rows, cols - structural_null_dim) bounds it from above.

    Matrix-free: sigma_max and sigma_min_nonzero are Lanczos Ritz values, which lie inside the spectrum
    (Cauchy interlacing), so the kappas are lower bounds until ``converged``. residual_max / residual_min
    are ||J^T z - sigma y|| for the corresponding Ritz pair (a singular value of J lies within that
    distance; ``converged`` means both are <= tol * sigma). When rank_bound < min(rows, cols), sigma_min
    = 0 is proven by structure and not estimated; otherwise it is the smallest Ritz value of the
    min(rows, cols)-sided Gram matrix from a random start, and ``singular`` requires it certified below
    rtol * sigma_max.
    """

    wrt: str
    method: str  # "exact" or "matrix-free"
    shape: tuple[int, int]
    sigma_max: float
    sigma_min: float
    kappa: float
    singular: bool
    sigma_min_nonzero: float
    kappa_nonzero: float
    rtol: float
    rank: int | None
    rank_bound: int
    iterations: int | None = None
    converged: bool | None = None
    residual_max: float | None = None
    residual_min: float | None = None


def summarize(values: Tensor, shape: tuple[int, int], wrt: str, rank_bound: int,
              rtol: float | None = None) -> SingularSummary:
    """A SingularSummary from all min(rows, cols) singular values of J (exact method)."""
    values = values.sort(descending=True).values
    rtol = _default_rtol(shape) if rtol is None else rtol
    sigma_max = float(values[0])
    nonzero = values[values > rtol * sigma_max]
    sigma_min = float(values[-1])
    singular = bool(sigma_min <= rtol * sigma_max)
    sigma_nz = float(nonzero[-1]) if nonzero.numel() else 0.0
    return SingularSummary(
        wrt=wrt, method="exact", shape=shape, sigma_max=sigma_max, sigma_min=sigma_min,
        kappa=float("inf") if singular else sigma_max / sigma_min, singular=singular,
        sigma_min_nonzero=sigma_nz, kappa_nonzero=sigma_max / sigma_nz if sigma_nz > 0 else float("inf"),
        rtol=rtol, rank=int(nonzero.numel()), rank_bound=rank_bound,
    )


def exact_singular_values(head: HeadLike, wrt: str = "weights") -> Tensor:
    """All min(rows, cols) singular values of J, float64, descending (input: union over the sample blocks)."""
    _check_wrt(wrt)
    if wrt == "weights":
        return torch.linalg.svdvals(weight_jacobian(head))  # (min(rows, cols),)
    blocks = torch.linalg.svdvals(input_jacobian(head))  # (B, N*min(dh, D))
    return blocks.reshape(-1).sort(descending=True).values  # (B*N*min(dh, D),) = min(rows, cols) of the batch J


def jacobian_spectrum(
    head: HeadLike,
    wrt: str = "weights",
    method: str = "auto",
    rtol: float | None = None,
    max_iter: int = 50,
    tol: float = 1e-2,
    seed: int = 0,
) -> SingularSummary:
    """sigma_max, sigma_min, kappa (and the nonzero variants) of J w.r.t. the weights or the input.

    method: "exact" (materialise J in float64, svdvals), "matrix-free" (Golub-Kahan-Lanczos on the
    Gram matrix of the smaller side through jvp / vjp, lanczos.py; max_iter, tol and seed apply), or
    "auto" (exact when J has at most AUTO_EXACT_MAX_ENTRIES entries). rtol: the relative tolerance for
    "numerically zero" (module docstring).

    Matrix-free: when structural_null_dim proves rank(J) < min(rows, cols), sigma_min = 0 is reported
    without iterating and Lanczos starts in the range of J (or J^T), so that its smallest Ritz value
    tends to sigma_min_nonzero; otherwise it starts from a seeded random vector and the smallest Ritz
    value tends to sigma_min, zero included. sigma_max converges in a few dozen iterations; sigma_min
    needs on the order of kappa iterations, up to min(rows, cols) (exhaustion: then exact). The default
    max_iter = 50 keeps a ViT-sized head (J 33280 x 36864) near 1.2 s here (benchmarks/jacobian.py);
    read ``converged`` before trusting sigma_min.
    """
    _check_wrt(wrt)
    if method not in ("auto", "exact", "matrix-free"):
        raise ValueError(f"method must be 'auto', 'exact' or 'matrix-free', got {method!r}")
    shape = jacobian_shape(head, wrt)
    rank_bound = min(shape[0], shape[1] - structural_null_dim(head, wrt, rtol))
    if method == "auto":
        method = "exact" if shape[0] * shape[1] <= AUTO_EXACT_MAX_ENTRIES else "matrix-free"
    if method == "exact":
        return summarize(exact_singular_values(head, wrt), shape, wrt, rank_bound, rtol)

    rtol = _default_rtol(shape) if rtol is None else rtol
    matvec, rmatvec, _ = jacobian_operator(head, wrt)
    proven_singular = rank_bound < min(shape)
    # Lanczos on A^T A with A the tall one of J, J^T: the Gram matrix of the smaller side, whose
    # eigenvalues are the min(rows, cols) squared singular values, zeros included.
    tall = (matvec, rmatvec, shape) if shape[0] >= shape[1] else (rmatvec, matvec, shape[::-1])
    result = extreme_singular_values(
        tall[0], tall[1], tall[2], start="range" if proven_singular else "random",
        max_iter=max_iter, tol=tol, zero_tol=rtol, seed=seed,
    )
    if proven_singular:
        sigma_min, singular = 0.0, True
    else:
        sigma_min, singular = result.sigma_min, result.min_is_zero
    sigma_max = result.sigma_max
    sigma_nz = result.sigma_min_nonzero
    return SingularSummary(
        wrt=wrt, method="matrix-free", shape=shape, sigma_max=sigma_max, sigma_min=sigma_min,
        kappa=float("inf") if singular else sigma_max / sigma_min, singular=singular,
        sigma_min_nonzero=sigma_nz, kappa_nonzero=sigma_max / sigma_nz if sigma_nz > 0 else float("inf"),
        rtol=rtol, rank=None, rank_bound=rank_bound, iterations=result.iterations,
        converged=result.converged, residual_max=result.residual_max, residual_min=result.residual_min,
    )
