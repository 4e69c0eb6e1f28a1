"""Theorem 3.4 of the paper, term by term, next to the measured condition number of the Jacobian.

    kappa(J) <= kappa(X)^3 kappa(Lambda) kappa(W_V) (kappa(W_Q) + kappa(W_K)) + kappa(X) kappa(P)

for one sample X (N, D) of A(X) = softmax(X W_Q W_K^T X^T) X W_V (docs/THEORY.md section 2, reconstructed from
summaries). How each term is formed here:

- kappa(X), kappa(W_Q), kappa(W_K), kappa(W_V), kappa(P): ``speccond.core.spectral.spectrum`` of the float64
  matrix (min(rows, cols)-th singular value; inf when it is numerically zero).
- P = the head's softmax matrix for this sample, (N, N) (``probabilities()``: its own scale, biases and
  mask).
- Lambda: the derivative of the row-wise softmax with respect to the logits, d vec(P) / d vec(S), which is
  block diagonal with one (N, N) block Lambda_i = Diag(p_i) - p_i p_i^T per row i of P: an (N^2, N^2)
  matrix. Its singular values are the union of the blocks' eigenvalues. Every block is singular
  (Lambda_i 1 = 0), so with the min(rows, cols) convention kappa(Lambda) = inf and the bound would be
  vacuous; as docs/THEORY.md says, kappa(Lambda) is taken over the nonzero singular values (above rtol times
  the largest). Its rank (N (N - 1) when every p_i is positive) is reported.
- The scale: the theory has no 1/sqrt(dh). Real models compute softmax(scale X W_Q W_K^T X^T); scale is
  folded into W_Q (W_Q' = scale W_Q), which leaves kappa(W_Q) unchanged. The measured J is the theory's,
  d vec(A) / d [vec W_Q', vec W_K, vec W_V] (``ScaleFoldedHead``); it differs from the Jacobian with
  respect to the model's own W_Q by the factor 1 / scale on the W_Q block, which changes its condition
  number (``jacobian_spectrum(head)`` gives that one).
- kappa(J): both conventions of ``SingularSummary``, kappa (min(rows, cols)-th singular value) and
  kappa_nonzero.

**What the checks found (tests/test_jacobian.py).** The bound, as reconstructed, is not a theorem:

1. With the min(rows, cols) convention it fails whenever J is structurally rank deficient (jacobian.py),
   e.g. one sample without biases with N > 3 D - dh: kappa(J) = inf while every term is finite.
2. With kappa_nonzero (J of full rank, no structure involved) it fails on about 3 % of small random
   one-sample instances (N <= 6, D <= 5, unit weight scale), by factors up to about 30; 11 of the 12
   failures in a sweep of 400 had dh = D (N = 4, D = 2, dh = 2, seed 8: kappa(J) = 1.4e4, bound 1.8e3),
   one had N = 2, D = 5, dh = 3 (factor 1.06). On shapes with dh < D < N or N < D as in real heads
   ((8, 8, 4), (16, 8, 4), (9, 16, 4), (17, 16, 4), (17, 32, 8) as (N, D, dh), 18 draws each) the
   smallest margin bound / kappa(J) was 27.
3. The q/k gauge (W_Q, W_K) -> (c W_Q, W_K / c) leaves the function, P, Lambda and every term of the
   bound unchanged (each kappa is scale-free), while it scales J's W_Q block by 1/c and its W_K block
   by c, so kappa(J) grows like c without limit: no bound made of these condition numbers alone can
   hold. It needs a normalisation the summaries do not state (for example ||W_Q|| = ||W_K||), or J is
   meant with respect to something the gauge does not move (such as W_Q W_K^T).

The record reports each term and both kappa(J) so that such comparisons can be made; it does not vouch
for the theorem.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from speccond.core.spectral import spectrum
from speccond.diagnostics.jacobian import HeadLike, SingularSummary, jacobian_spectrum

Tensor = torch.Tensor


@dataclass(frozen=True)
class TheoremBound:
    """Each term of Theorem 3.4 for one sample and one head, the bound, and the measured kappa(J).

    bound = first_term + second_term, first_term = kappa_x^3 kappa_lambda kappa_w_v (kappa_w_q +
    kappa_w_k), second_term = kappa_x kappa_p. holds: kappa_j <= bound; holds_nonzero: kappa_j_nonzero
    <= bound; each decided from kappa(J)'s proven bracket (True when its upper end is within the bound,
    False when its lower end exceeds it), None when an unconverged bracket straddles the bound. within_theorem is False when the head has nonzero projection biases, a logit bias, a causal
    mask, q/k normalisation, a rotary embedding or logit soft-capping, which the theorem does not cover
    (the terms are then formed from the model's P all the same).
    """

    kappa_x: float
    kappa_lambda: float  # over the nonzero singular values of Lambda
    lambda_rank: int
    kappa_w_q: float
    kappa_w_k: float
    kappa_w_v: float
    kappa_p: float
    first_term: float
    second_term: float
    bound: float
    kappa_j: float  # min(rows, cols)-th singular value (inf when singular)
    kappa_j_nonzero: float
    holds: bool | None
    holds_nonzero: bool | None
    within_theorem: bool
    scale: float
    jacobian: SingularSummary  # J in the theory's parametrisation (scale folded into W_Q)


@dataclass(frozen=True, eq=False)
class ScaleFoldedHead:
    """The theory's parametrisation of a head: W_Q' = scale W_Q, so the logits read X W_Q' W_K^T X^T.

    output(x, w_q', w_k, w_v) = head.output(x, w_q' / scale, w_k, w_v): the same function, differentiated
    with respect to W_Q' (its Jacobian's W_Q block is the model's divided by scale). Implements the head
    ``HeadLike`` interface of jacobian.py.
    """

    head: HeadLike
    factor: float

    @property
    def x(self) -> Tensor:
        return self.head.x

    @property
    def w_q(self) -> Tensor:
        return self.factor * self.head.w_q

    @property
    def w_k(self) -> Tensor:
        return self.head.w_k

    @property
    def w_v(self) -> Tensor:
        return self.head.w_v

    @property
    def b_q(self) -> Tensor | None:
        return getattr(self.head, "b_q", None)

    @property
    def q_norm(self):
        return getattr(self.head, "q_norm", None)

    @property
    def k_norm(self):
        return getattr(self.head, "k_norm", None)

    @property
    def rotary(self):
        return getattr(self.head, "rotary", None)

    @property
    def softcap(self):
        return getattr(self.head, "softcap", None)

    def output(self, x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor) -> Tensor:
        return self.head.output(x, w_q / self.factor, w_k, w_v)  # (B, N, dh)

    def double(self) -> ScaleFoldedHead:
        return ScaleFoldedHead(self.head.double(), self.factor)


def _holds(lower: float, upper: float, bound: float) -> bool | None:
    """Whether a kappa known to lie in [lower, upper] is <= bound: decided, or None when undecided."""
    if upper <= bound:
        return True
    if lower > bound:
        return False
    return None


def _absent(term) -> bool:
    """None, or a tensor of zeros (a zero bias changes nothing)."""
    return term is None or (isinstance(term, Tensor) and not bool(term.abs().max() > 0))


def lambda_singular_values(p: Tensor) -> Tensor:
    """Singular values of Lambda = blockdiag_i(Diag(p_i) - p_i p_i^T) for P (N, N): (N*N,), descending."""
    blocks = torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)  # (N, N, N): block i is Lambda_i
    values = torch.linalg.eigvalsh(blocks).abs()  # (N, N): each block is symmetric PSD
    return values.reshape(-1).sort(descending=True).values  # (N*N,)


def theorem_bound(head: HeadLike, method: str = "auto", rtol: float | None = None, **lanczos: float) -> TheoremBound:
    """Theorem 3.4 term by term for a one-sample head (``one_sample(head, b)`` picks sample b of a batch).

    ``head``: an AttentionHead or any ``HeadLike`` (jacobian.py) that also has probabilities() and scale.
    method / lanczos keywords (max_iter, seed) are passed to ``jacobian_spectrum`` for kappa(J); rtol
    is the relative tolerance below which a singular value of Lambda or J counts as zero (default: the
    max(rows, cols) * eps(float64) of jacobian.py; the other kappas use ``spectrum``'s own, alike).
    """
    if head.x.shape[0] != 1:
        raise ValueError(
            f"theorem_bound: the theorem is stated for one sample X (N, D); got a batch of {head.x.shape[0]}. "
            "Pass speccond.diagnostics.jacobian.one_sample(head, b)"
        )
    h = head.double()
    x = h.x[0]  # (N, D)
    p = h.probabilities()[0]  # (N, N)
    lam = lambda_singular_values(p)  # (N*N,)
    lam_tol = (lam.numel() * torch.finfo(torch.float64).eps if rtol is None else rtol) * float(lam[0])
    lam_nonzero = lam[lam > lam_tol]
    kappa_lambda = float(lam_nonzero[0] / lam_nonzero[-1]) if lam_nonzero.numel() else float("inf")

    kx, kq, kk, kv, kp = (spectrum(m).kappa for m in (x, h.w_q, h.w_k, h.w_v, p))
    first = kx**3 * kappa_lambda * kv * (kq + kk)
    second = kx * kp
    bound = first + second

    scale = float(h.scale)
    jac = jacobian_spectrum(ScaleFoldedHead(h, scale), "weights", method=method, rtol=rtol, **lanczos)
    terms = ("b_q", "b_k", "b_v", "logit_bias", "q_norm", "k_norm", "rotary", "softcap")
    within = all(_absent(getattr(h, name, None)) for name in terms)
    within = within and not getattr(h, "causal", False)
    return TheoremBound(
        kappa_x=kx, kappa_lambda=kappa_lambda, lambda_rank=int(lam_nonzero.numel()), kappa_w_q=kq,
        kappa_w_k=kk, kappa_w_v=kv, kappa_p=kp, first_term=first, second_term=second, bound=bound,
        kappa_j=jac.kappa, kappa_j_nonzero=jac.kappa_nonzero, holds=_holds(jac.kappa_lower, jac.kappa_upper, bound),
        holds_nonzero=_holds(jac.kappa_nonzero_lower, jac.kappa_nonzero_upper, bound), within_theorem=within,
        scale=scale, jacobian=jac,
    )
