"""The attention Jacobian of one head, exactly (materialised) or as an operator (vjp), and its spectrum.

One head of attention in the paper's layout (docs/THEORY.md section 1), an ``AttentionHead`` (attention_head.py,
where its forward is written), with the model's own scale, optional projection biases, q/k normalisation
n_Q, n_K and an additive logit bias (relative positions, masks):

    A(X) = softmax(scale n_Q(X W_Q + b_Q) n_K(X W_K + b_K)^T + logit_bias) (X W_V + b_V)      W_* (D, dh)

Two Jacobians, both in float64 (docs/THEORY.md section 1; tests/test_jacobian.py):

- ``wrt="weights"``, the paper's J: d vec(A) / d [vec W_Q, vec W_K, vec W_V], biases excluded.
  Rows B*N*dh (vec(A) is the row-major flatten of A (B, N, dh)); columns 3*D*dh (blocks q, k, v in that
  order, each the row-major flatten of W (D, dh)). Singular values do not depend on these orderings.
- ``wrt="input"``: d vec(A) / d vec(X). A sample's output depends only on its own input, so for a batch
  this Jacobian is block diagonal with one (N*dh, N*D) block per sample. ``input_jacobian`` returns the
  blocks (B, N*dh, N*D); the spectrum of the full (B*N*dh, B*N*D) matrix is the union of the blocks'
  spectra, and its min(rows, cols)-th singular value is the smallest of the blocks' last ones. The
  matrix-free operator acts on the whole batch, which is the same block-diagonal matrix.

Condition numbers (``SingularSummary``): ``kappa = sigma_max / sigma_min`` with sigma_min the min(rows,
cols)-th singular value (docs/THEORY.md section 1), and ``kappa_nonzero = sigma_max / sigma_min_nonzero`` over the
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

import math
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Callable, Protocol

import torch
from torch.func import jacfwd, jacrev, vjp

from speccond.diagnostics.attention_head import AttentionHead, head_attention, one_sample  # noqa: F401 (re-exported)
from speccond.diagnostics.jacobian_gram import can_structure, gram_extremes, structured_gram
from speccond.diagnostics.lanczos import LanczosResult, extreme_singular_values

Tensor = torch.Tensor

# method="auto" materialises J when it has at most this many entries (float64: 16 MiB; the SVD of a
# 544 x 3072 J takes about 0.6 s here, of a 1024 x 9216 one about 13 s).
AUTO_EXACT_MAX_ENTRIES = 2_000_000
# matrix-free with max_iter=None: run to exhaustion (exact values) when min(rows, cols) is at most this
# (1024 x 9216: 12-18 s here), else DEFAULT_MAX_ITER steps (a ViT-sized head: 1.1-1.6 s, where only the
# lower ends of the brackets are finite).
EXHAUST_MAX_DIM = 1024
DEFAULT_MAX_ITER = 50


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

    rmatvec is a vjp whose backward graph is built once and reused. matvec transposes it by reverse
    mode again: u -> J^T u is linear, so the vjp of rmatvec (at u = 0, any point would do) maps v to
    (J^T)^T v = J v. That costs one backward pass through the backward graph, 1-1.5 ms on the tiny-ViT
    head here against 3.5-10 ms for a forward-mode jvp (torch.func.jvp recomputes the forward, and its
    forward-mode rules fall back to decompositions) and 1.5-1.8 ms for torch.func.linearize.
    """
    _check_wrt(wrt)
    h = head.double()
    f, point = (_weights_fn(h), _weights_point(h)) if wrt == "weights" else (_input_fn(h), h.x.reshape(-1))
    out, vjp_fn = vjp(f, point)

    def rmatvec(u: Tensor) -> Tensor:
        return vjp_fn(u)[0]  # (rows,) -> (cols,)

    _, transpose_fn = vjp(rmatvec, torch.zeros_like(out))
    return (lambda v: transpose_fn(v)[0]), rmatvec, jacobian_shape(h, wrt)


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
    # A rotary embedding turns q and k by position, so neither a generic gauge G nor a key shift u c^T
    # (it reaches key j as R_j c) leaves the logits alone; soft-capping keeps the gauge but not the shift.
    rotary = getattr(h, "rotary", None) is not None
    capped = getattr(h, "softcap", None) is not None
    if not (normalised or rotary) and _rank(x @ h.w_q, rtol) == dh and _rank(x @ h.w_k, rtol) == dh:
        b_q = getattr(h, "b_q", None)
        null += dh * dh - (dh if b_q is not None and bool(b_q.abs().max() > 0) else 0)  # the gauge
        ones = torch.ones(b * n, 1, dtype=torch.float64)  # (B*N, 1)
        u = torch.linalg.lstsq(x, ones).solution  # (D, 1): X u = 1 if 1 is in range(X)
        if not capped and float((x @ u - ones).norm()) <= 1e-8 * (b * n) ** 0.5:
            null += dh  # the softmax shift
    return null


def gauge_direction(w_q: Tensor, w_k: Tensor, g: Tensor) -> Tensor:
    """vec of (W_Q G, -W_K G^T, 0), the q/k gauge direction for a (dh, dh) matrix G: J times it is 0."""
    return torch.stack([w_q @ g, -w_k @ g.T, torch.zeros_like(w_q)]).reshape(-1)  # (3, D, dh) -> (3*D*dh,)


@dataclass(frozen=True)
class SingularSummary:
    """Extreme singular values and condition numbers of a Jacobian, each with a proven bracket.

    Definitions (module docstring): sigma_min is the min(rows, cols)-th singular value and kappa =
    sigma_max / sigma_min (inf when ``singular``: sigma_min <= rtol * sigma_max); sigma_min_nonzero is the
    smallest singular value above rtol * sigma_max and kappa_nonzero = sigma_max / sigma_min_nonzero. rank
    is the numerical rank; rank_bound = min(rows, cols - structural_null_dim) bounds it from above.

    **A value field holds the value or nan, never an estimate.** sigma_max, sigma_min, sigma_min_nonzero,
    kappa, kappa_nonzero, rank (None) and singular (None) are filled when the method determines them:
    "exact" always; "matrix-free" when the Krylov space is exhausted (k = min(rows, cols): the Ritz values
    are the singular values), and otherwise only sigma_min = 0, kappa = inf, singular = True when that is
    proven (by structure, rank_bound < min(rows, cols), or by a Ritz value s_k <= rtol * s_1).
    ``converged`` says the values are filled: True for exact and for an exhausted Krylov space.

    The brackets are always filled and proven (lanczos.py, 1-3), up to a rounding margin delta =
    ``rounding_margin`` = max(rows, cols) eps sigma_max on each small singular value:

        sigma_max_lower <= sigma_max,   sigma_min <= sigma_min_upper,
        sigma_min_nonzero <= sigma_min_nonzero_upper,
        kappa_lower <= kappa <= kappa_upper,   kappa_nonzero_lower <= kappa_nonzero <= kappa_nonzero_upper

    Exact or exhausted: sigma_max_lower = sigma_max, sigma_min_upper = sigma_min + delta, kappa in
    [sigma_max / (sigma_min + delta), sigma_max / (sigma_min - delta)] (upper inf when sigma_min <=
    delta), kappa_nonzero alike: the width is rounding, 2 delta / sigma_min relative. Matrix-free after k <
    min(rows, cols) steps, with Ritz values s_1 >= ... >= s_k and residuals r_i: sigma_max_lower = s_1
    and sigma_min_upper = s_k + delta (interlacing), kappa_lower = s_1 / (s_k + delta);
    sigma_min_nonzero_upper = min (s_i + r_i) + delta over the Ritz values with s_i - r_i > rtol * s_1
    (residual bound; inf if none qualifies), kappa_nonzero_lower = max(1, s_1 / sigma_min_nonzero_upper);
    kappa_upper = kappa_nonzero_upper = inf, because no Krylov method can exclude an unseen singular
    value below s_k without exhausting the space. The one caveat: the residual bound counts "nonzero"
    above rtol * s_1 <= rtol * sigma_max, so kappa_nonzero_lower is proven for the definition above
    unless J has a singular value in (rtol * s_1, rtol * sigma_max] (s_1 converges first, to ~1e-10).
    The kappa_nonzero bound is much weaker than s_1 / s_k (14 against the unproven 114 on the ViT-sized
    head of benchmarks/jacobian.py at 50 steps).

    iterations, residual_max, residual_min (||J^T z - s y|| of the Ritz pairs of s_1 and of the smallest
    Ritz value above rtol * s_1): matrix-free only.
    """

    wrt: str
    method: str  # "exact", "matrix-free" or "gram"
    shape: tuple[int, int]
    sigma_max: float
    sigma_min: float
    kappa: float
    singular: bool | None
    sigma_min_nonzero: float
    kappa_nonzero: float
    rtol: float
    rank: int | None
    rank_bound: int
    converged: bool
    sigma_max_lower: float
    sigma_min_upper: float
    sigma_min_nonzero_upper: float
    kappa_lower: float
    kappa_upper: float
    kappa_nonzero_lower: float
    kappa_nonzero_upper: float
    iterations: int | None = None
    residual_max: float | None = None
    residual_min: float | None = None


def _ratio(top: float, bottom: float) -> float:
    """top / bottom with x / 0 = inf (a condition number)."""
    return top / bottom if bottom > 0 else math.inf


def rounding_margin(shape: tuple[int, int], sigma_max: float) -> float:
    """delta = max(rows, cols) * eps(float64) * sigma_max: the absolute error allowed for rounding in a
    computed singular value of J (a dense SVD, or Lanczos, of a float64 J: backward error O(eps ||J||)),
    by which the small ends of the brackets are widened (SingularSummary)."""
    return _default_rtol(shape) * sigma_max


def _kappa_bracket(sigma_max: float, small: float, delta: float) -> tuple[float, float]:
    """[sigma_max / (small + delta), sigma_max / (small - delta)] for a small singular value computed to
    within delta (upper inf when small <= delta)."""
    return _ratio(sigma_max, small + delta), (_ratio(sigma_max, small - delta) if small > delta else math.inf)


def summarize(values: Tensor, shape: tuple[int, int], wrt: str, rank_bound: int,
              rtol: float | None = None, method: str = "exact") -> SingularSummary:
    """A SingularSummary from all min(rows, cols) singular values of J (exact, or an exhausted Krylov space):
    the values, and brackets that widen the small ends by ``rounding_margin``."""
    values = values.sort(descending=True).values
    rtol = _default_rtol(shape) if rtol is None else rtol
    sigma_max = float(values[0])
    nonzero = values[values > rtol * sigma_max]
    sigma_min = float(values[-1])
    singular = bool(sigma_min <= rtol * sigma_max)
    sigma_nz = float(nonzero[-1]) if nonzero.numel() else 0.0
    delta = rounding_margin(shape, sigma_max)
    kappa = math.inf if singular else sigma_max / sigma_min
    kappa_bracket = (math.inf, math.inf) if singular else _kappa_bracket(sigma_max, sigma_min, delta)
    kappa_nz = _ratio(sigma_max, sigma_nz)
    kappa_nz_bracket = _kappa_bracket(sigma_max, sigma_nz, delta) if sigma_nz > 0 else (math.inf, math.inf)
    return SingularSummary(
        wrt=wrt, method=method, shape=shape, sigma_max=sigma_max, sigma_min=sigma_min, kappa=kappa,
        singular=singular, sigma_min_nonzero=sigma_nz, kappa_nonzero=kappa_nz, rtol=rtol,
        rank=int(nonzero.numel()), rank_bound=rank_bound, converged=True,
        sigma_max_lower=sigma_max, sigma_min_upper=sigma_min + delta, sigma_min_nonzero_upper=sigma_nz + delta,
        kappa_lower=kappa_bracket[0], kappa_upper=kappa_bracket[1],
        kappa_nonzero_lower=kappa_nz_bracket[0], kappa_nonzero_upper=kappa_nz_bracket[1],
    )


def exact_singular_values(head: HeadLike, wrt: str = "weights") -> Tensor:
    """All min(rows, cols) singular values of J, float64, descending (input: union over the sample blocks)."""
    _check_wrt(wrt)
    if wrt == "weights":
        return torch.linalg.svdvals(weight_jacobian(head))  # (min(rows, cols),)
    blocks = torch.linalg.svdvals(input_jacobian(head))  # (B, N*min(dh, D))
    return blocks.reshape(-1).sort(descending=True).values  # (B*N*min(dh, D),) = min(rows, cols) of the batch J


def matrix_free_steps(shape: tuple[int, int], max_iter: int | None = None) -> int:
    """Lanczos steps for J of ``shape``: max_iter if given, else min(rows, cols) (exhaustion: exact values)
    when that is at most EXHAUST_MAX_DIM, else DEFAULT_MAX_ITER; never more than min(rows, cols)."""
    if max_iter is not None and max_iter < 1:
        raise ValueError(f"max_iter must be >= 1 (or None for the default), got {max_iter}")
    side = min(shape)
    if max_iter is None:
        return side if side <= EXHAUST_MAX_DIM else DEFAULT_MAX_ITER
    return min(max_iter, side)


METHODS = ("auto", "exact", "matrix-free", "gram")


def jacobian_spectrum(
    head: HeadLike,
    wrt: str = "weights",
    method: str = "auto",
    rtol: float | None = None,
    max_iter: int | None = None,
    seed: int = 0,
) -> SingularSummary:
    """sigma_max, sigma_min, kappa (and the nonzero variants) of J w.r.t. the weights or the input, each
    with a proven bracket (``SingularSummary``).

    method: "exact" (materialise J in float64, svdvals), "matrix-free" (Golub-Kahan-Lanczos on the
    Gram matrix of the smaller side through vjp, lanczos.py; max_iter and seed apply), "gram" (weights
    only, J of full row rank: J J^T formed in closed form and its extreme eigenvalues read exactly or by
    Cholesky and shift-invert Lanczos, jacobian_gram.py; the method for a real head: ViT-Ti or ViT-S at
    224 px, one image, in well under a minute, where matrix-free gives only a lower bound), or
    "auto" (exact when J has at most AUTO_EXACT_MAX_ENTRIES entries, else matrix-free). rtol: the
    relative tolerance for "numerically zero" (module docstring). Whatever the method, a value field is
    the value or nan: an unconverged matrix-free run reports kappa = nan, converged = False and the
    bracket [kappa_lower, kappa_upper].

    Matrix-free runs ``matrix_free_steps(shape, max_iter)`` steps: by default min(rows, cols) when that
    is at most EXHAUST_MAX_DIM, which exhausts the Krylov space and gives the exact values (converged),
    else DEFAULT_MAX_ITER. Short of exhaustion only the lower ends of the kappa brackets are finite:
    sigma_max converges in a few dozen steps, the small end needs on the order of kappa steps. When
    structural_null_dim proves rank(J) < min(rows, cols), sigma_min = 0 and kappa = inf are reported
    as proven and, short of exhaustion, Lanczos starts in the range of J^T (or J) so that its small Ritz
    values tend to sigma_min_nonzero; otherwise it starts from a seeded random vector. Times (one
    thread, 2 shared cores, benchmarks/jacobian.py): the tiny-ViT head of the README (J 272 x 3072,
    kappa 2.8e4) exhausts in 0.75 s (1.2-2.5 s on busy cores) and meets the exact kappa to 6e-14; J 1024 x
    9216 (min side = EXHAUST_MAX_DIM) in 12-18 s, against 13-20 s for exact; a ViT-sized head (J 33280 x
    36864) takes 1.1-1.6 s at DEFAULT_MAX_ITER = 50 and gives kappa = inf (structure) and kappa_nonzero
    in [14, inf).
    """
    _check_wrt(wrt)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method == "gram" and wrt != "weights":
        raise ValueError("method='gram' is for wrt='weights'; use 'exact' or 'matrix-free' for the input Jacobian")
    shape = jacobian_shape(head, wrt)
    rank_bound = min(shape[0], shape[1] - structural_null_dim(head, wrt, rtol))
    if method == "gram":
        return _gram_spectrum(head, shape, rank_bound, _default_rtol(shape) if rtol is None else rtol, seed)
    if method == "auto":
        method = "exact" if shape[0] * shape[1] <= AUTO_EXACT_MAX_ENTRIES else "matrix-free"
    if method == "exact":
        return summarize(exact_singular_values(head, wrt), shape, wrt, rank_bound, rtol)
    return _matrix_free(head, wrt, shape, rank_bound, _default_rtol(shape) if rtol is None else rtol,
                        matrix_free_steps(shape, max_iter), seed)


def _matrix_free(head: HeadLike, wrt: str, shape: tuple[int, int], rank_bound: int, rtol: float, steps: int,
                 seed: int) -> SingularSummary:
    """jacobian_spectrum's matrix-free branch: Lanczos, then the values it determines and the brackets."""
    matvec, rmatvec, _ = jacobian_operator(head, wrt)
    proven_singular = rank_bound < min(shape)
    exhaust = steps >= min(shape)
    # Lanczos on A^T A with A the tall one of J, J^T: the Gram matrix of the smaller side, whose
    # eigenvalues are the min(rows, cols) squared singular values, zeros included.
    tall = (matvec, rmatvec, shape) if shape[0] >= shape[1] else (rmatvec, matvec, shape[::-1])
    result = extreme_singular_values(
        tall[0], tall[1], tall[2], start="range" if proven_singular and not exhaust else "random",
        max_iter=steps, zero_tol=rtol, seed=seed,
    )
    lanczos = dict(iterations=result.iterations, residual_max=result.residual_max, residual_min=result.residual_min)
    if result.exhausted:  # k = min(rows, cols): the Ritz values are all the singular values
        exact = summarize(torch.tensor(result.ritz, dtype=torch.float64), shape, wrt, rank_bound, rtol,
                          method="matrix-free")
        if proven_singular and not exact.singular:  # structure outranks rounding in the smallest Ritz value
            exact = replace(exact, sigma_min=0.0, singular=True, kappa=math.inf, kappa_lower=math.inf,
                            kappa_upper=math.inf)
        return replace(exact, **lanczos)
    return _bracketed(result, wrt, shape, rank_bound, rtol, proven_singular, lanczos)


def _bracketed(result: LanczosResult, wrt: str, shape: tuple[int, int], rank_bound: int, rtol: float,
               proven_singular: bool, lanczos: dict) -> SingularSummary:
    """A SingularSummary from Ritz values that are not all min(rows, cols) singular values: the brackets of
    SingularSummary, nan for every value except kappa = inf (singular = True) when sigma_min = 0 is proven."""
    s_max = result.sigma_max  # <= sigma_max (interlacing)
    delta = rounding_margin(shape, s_max)
    singular = True if proven_singular or result.min_is_zero else None
    sigma_min_upper = 0.0 if proven_singular else result.sigma_min + delta  # sigma_min <= s_k (interlacing)
    sigma_nz_upper = result.nonzero_bound + delta  # residual bound (lanczos.py, 2)
    return SingularSummary(
        wrt=wrt, method="matrix-free", shape=shape, sigma_max=math.nan,
        sigma_min=0.0 if proven_singular else math.nan, kappa=math.inf if singular else math.nan,
        singular=singular, sigma_min_nonzero=math.nan, kappa_nonzero=math.nan, rtol=rtol, rank=None,
        rank_bound=rank_bound, converged=False, sigma_max_lower=s_max, sigma_min_upper=sigma_min_upper,
        sigma_min_nonzero_upper=sigma_nz_upper, kappa_lower=math.inf if singular else _ratio(s_max, sigma_min_upper),
        kappa_upper=math.inf,  # short of exhaustion nothing keeps sigma_min away from 0
        kappa_nonzero_lower=max(1.0, _ratio(s_max, sigma_nz_upper)), kappa_nonzero_upper=math.inf, **lanczos,
    )


def weight_gram(head: HeadLike) -> Tensor:
    """J J^T of the weight Jacobian, (R, R) float64 with R = B N dh, rows in vec(A)'s order: in closed form
    (jacobian_gram.structured_gram) when the head allows it, else from the materialised J."""
    h = head.double()
    if can_structure(h):
        return structured_gram(h)
    jac = weight_jacobian(h)  # (R, C)
    return jac @ jac.T  # (R, R)


def _gram_spectrum(head: HeadLike, shape: tuple[int, int], rank_bound: int, rtol: float, seed: int = 0):
    """jacobian_spectrum(method="gram"): a SingularSummary of the weight Jacobian from J J^T (jacobian_gram.py).

    The values are filled (converged) when lmin is determined and above the rounding margin dl of the
    Gram matrix; then J has full row rank, kappa = kappa_nonzero and rank = R. Otherwise they are nan and
    the bracket says what is known."""
    rows, cols = shape
    if rank_bound < rows:
        raise ValueError(
            f"method='gram' needs a weight Jacobian of full row rank, and this one ({rows} x {cols}) has rank at most "
            f"{rank_bound} by structure (jacobian.structural_null_dim), so kappa = inf: use method='matrix-free' or "
            "'exact' for kappa_nonzero, or fewer probe samples (the rows grow with the batch, the columns do not)"
        )
    ext = gram_extremes(weight_gram(head), seed)  # jacobian_gram.py
    # dl: rounding in the Gram matrix (each entry a sum of N + dh products) and in its eigenvalues (backward
    # error of order R eps lmax): R eps lmax, R = rows <= cols the Gram matrix's own dimension
    margin = rows * torch.finfo(torch.float64).eps * ext["lmax_lower"]
    lmin_floor = ext["lmin_lower"] - margin
    known = not math.isnan(ext["lmin"]) and not math.isnan(ext["lmax"]) and ext["lmin"] > margin
    kappa = math.sqrt(ext["lmax"] / ext["lmin"]) if known else math.nan
    sigma_max = math.sqrt(ext["lmax"]) if known else math.nan
    sigma_min = math.sqrt(ext["lmin"]) if known else math.nan
    lmin_upper = ext["lmin_upper"] if not math.isnan(ext["lmin_upper"]) else ext["lmax_lower"]
    kappa_lower = max(1.0, math.sqrt(ext["lmax_lower"] / (lmin_upper + margin)))
    kappa_upper = math.sqrt((ext["lmax_upper"] + margin) / lmin_floor) if lmin_floor > 0 else math.inf
    return SingularSummary(
        wrt="weights", method="gram", shape=shape, sigma_max=sigma_max, sigma_min=sigma_min, kappa=kappa,
        singular=False if lmin_floor > 0 else None, sigma_min_nonzero=sigma_min, kappa_nonzero=kappa, rtol=rtol,
        rank=rows if known else None, rank_bound=rank_bound, converged=known,
        sigma_max_lower=math.sqrt(ext["lmax_lower"]), sigma_min_upper=math.sqrt(lmin_upper + margin),
        sigma_min_nonzero_upper=math.sqrt(lmin_upper + margin), kappa_lower=kappa_lower, kappa_upper=kappa_upper,
        kappa_nonzero_lower=kappa_lower, kappa_nonzero_upper=kappa_upper, iterations=ext["iterations"],
    )
