"""The correction math: condition numbers, the rectangular identity, the SVD correction, the key rotations.

Pure functions on matrices; nothing here knows about modules. All spectra are computed in float64.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Spectrum:
    """Extreme singular values of a matrix and its condition number kappa = sigma_max / sigma_min.

    ``sigma_min`` is the min(rows, cols)-th singular value. ``singular`` is True when it is numerically
    zero (:func:`is_numerically_singular`: within the rounding of the matrix's own dtype or the error of
    the SVD). Then ``kappa`` is ``inf``.
    """

    sigma_min: float
    sigma_max: float
    kappa: float
    singular: bool


def spectrum(matrix: torch.Tensor) -> Spectrum:
    """sigma_min, sigma_max and kappa of a 2-D matrix, computed in float64."""
    if matrix.dim() != 2:
        raise ValueError(f"spectrum() expects a 2-D matrix, got shape {tuple(matrix.shape)}")
    values = torch.linalg.svdvals(matrix.detach().to(torch.float64))  # (min(rows, cols),) descending
    return _spectrum_of(values, tuple(matrix.shape), matrix.dtype)


def spectra(matrices: torch.Tensor) -> list[Spectrum]:
    """:func:`spectrum` of every matrix of a stack (..., rows, cols), flattened over the leading dimensions,
    from one float64 call.

    A matrix and its transpose have the same singular values, so every matrix goes in with its short side
    first. A well-conditioned short-and-wide matrix (:func:`gram_eigen`: kappa <= GRAM_KAPPA_LIMIT, rows
    at most half its columns, such as a head's 64 x 768 rows) takes its values from the eigenvalues of
    W W^T, which costs a fraction of an SVD; the others come from ``svdvals`` of the tall orientation, which
    LAPACK computes about four times faster than the wide one (it reduces a tall matrix by QR first). The
    values agree with :func:`spectrum`'s to about eps kappa^2 relative (under 2e-13 at the limit), not bit
    for bit; square and tall matrices are computed exactly as it does.
    """
    if matrices.dim() < 2:
        raise ValueError(f"spectra() expects a stack of matrices (..., rows, cols), got shape {tuple(matrices.shape)}")
    rows, cols = matrices.shape[-2:]
    stack = matrices.detach().reshape(-1, rows, cols)  # (n, rows, cols)
    values = torch.empty(stack.shape[0], min(rows, cols), dtype=torch.float64, device=stack.device)  # (n, k)
    well = torch.zeros(stack.shape[0], dtype=torch.bool, device=stack.device)  # (n,)
    if _gram_pays(rows, cols):
        eigen, _, well = gram_eigen(stack.mT if rows > cols else stack, vectors=False)  # (n, k) ascending
        values[well] = eigen[well].flip(-1).sqrt()
    if not bool(well.all()):
        tall = stack[~well].mT if rows < cols else stack[~well]  # (m, max, min): the same singular values
        values[~well] = torch.linalg.svdvals(tall.to(torch.float64))  # (m, min(rows, cols)), each descending
    return [_spectrum_of(one, (rows, cols), matrices.dtype) for one in values]


GRAM_KAPPA_LIMIT = 30.0  # gram_eigen's matrices up to this kappa: eps kappa^2 of error, under 2e-13 relative


def _gram_pays(rows: int, cols: int) -> bool:
    """Whether W W^T (short side squared) is so much smaller than W that its eigen-decomposition pays."""
    return 0 < 2 * min(rows, cols) <= max(rows, cols)


def gram_eigen(
    wide: torch.Tensor, vectors: bool = True, dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """The eigen-decomposition of each G = W W^T of a stack of wide matrices (n, r, c), r <= c, in ``dtype``
    (float64; float32 only for what is predicted from and never attached, where eps kappa^2 is under 1e-4):
    eigenvalues ascending (n, r) (the squared singular values of W), eigenvectors (n, r, r) (W's left
    singular vectors; None unless ``vectors``), and which matrices are well enough conditioned to use them, (n,).

    G's eigenvalues carry an absolute error of about eps sigma_max^2, so sigma_min^2 is off by eps kappa^2
    relative: read only where kappa <= GRAM_KAPPA_LIMIT (30: under 2e-13, measured against the SVD on
    64 x 768 heads of kappa 1.5 to 30 in tests/test_gram_route.py); a matrix that is zero, non-finite (not
    decomposed here: the SVD's error names non-finite input, eigh's would not) or worse conditioned is
    marked False and its caller takes the SVD.
    """
    w = wide.to(dtype)
    gram = w @ w.mT  # (n, r, r)
    # G_ii is the sum of row i's squares: non-finite exactly where the row holds a nan or an inf (or overflows)
    finite = torch.isfinite(gram.diagonal(dim1=-2, dim2=-1)).all(-1)  # (n,): the others go to the SVD, which says so
    if bool(finite.all()):
        values, basis = torch.linalg.eigh(gram) if vectors else (torch.linalg.eigvalsh(gram), None)  # (n, r), (n, r, r)
    else:
        values = torch.zeros(gram.shape[:2], dtype=dtype, device=w.device)  # (n, r)
        basis = torch.zeros_like(gram) if vectors else None  # (n, r, r)
        if vectors:
            values[finite], basis[finite] = torch.linalg.eigh(gram[finite])
        else:
            values[finite] = torch.linalg.eigvalsh(gram[finite])
    top = values[:, -1]  # sigma_max^2, (n,)
    well = finite & (top > 0) & (values[:, 0] * GRAM_KAPPA_LIMIT**2 >= top)  # (n,)
    return values, basis, well


def _spectrum_of(values: torch.Tensor, shape: tuple[int, int], dtype: torch.dtype) -> Spectrum:
    """The Spectrum of a matrix of ``shape`` held in ``dtype`` from its float64 singular values (descending)."""
    sigma_max = float(values[0]) if values.numel() else 0.0
    sigma_min = float(values[-1]) if values.numel() else 0.0
    stored = dtype if dtype.is_floating_point else torch.float64
    singular = is_numerically_singular(values, shape, stored, torch.float64)
    kappa = float("inf") if singular else sigma_max / sigma_min
    return Spectrum(sigma_min=sigma_min, sigma_max=sigma_max, kappa=kappa, singular=singular)


def is_numerically_singular(
    values: torch.Tensor, shape: tuple[int, int], stored: torch.dtype, computed: torch.dtype
) -> bool:
    """Whether a matrix's min(rows, cols)-th singular value cannot be told from zero.

    ``values``: all its singular values, descending, (min(rows, cols),); ``shape``: (rows, cols);
    ``stored``: the dtype the matrix is held in; ``computed``: the dtype its SVD ran in.

    Two errors hide a zero singular value, and a singular value at most the larger of them is zero:
    - rounding to ``stored``: a float32 rank-1 outer product has sigma_2 near 1e-8 sigma_max, not 0. Each
      entry moves by up to eps / 2 |w_ij|, uniformly, so the error E is a random matrix with ||E||_F near
      eps ||W||_F / 3.5 and, by the norm of such matrices, ||E||_2 at most about 0.6 eps ||W||_F / sqrt(k),
      k = min(rows, cols). The threshold is eps ||W||_F / sqrt(k), with margin; by Weyl, a sigma_min above
      it is not the rounding of a zero. (For k <= 4 it is at least eps / 2 ||W||_F >= ||E||_F, a proof.)
    - the SVD in ``computed``: about eps * max(rows, cols) * sigma_max.
    Why not eps * max(rows, cols) * sigma_max of ``stored`` for both: in bfloat16 that is 1.5 sigma_max at
    192 columns, which called every bfloat16 weight singular, W + 10 I included (kappa 1.1).
    """
    sigma_max = float(values[0]) if values.numel() else 0.0
    if sigma_max == 0.0:
        return True
    frobenius = float(values.double().square().sum().sqrt())  # ||W||_F from the singular values
    rounding = torch.finfo(stored).eps * frobenius / values.numel() ** 0.5
    svd_error = torch.finfo(computed).eps * max(shape) * sigma_max
    return float(values[-1]) <= max(rounding, svd_error)


def kappa(matrix: torch.Tensor) -> float:
    """Condition number sigma_max / sigma_min (min(rows, cols)-th singular value), float64; inf if singular."""
    return spectrum(matrix).kappa


def rectangular_identity(rows: int, cols: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """I_k of shape (rows, cols): ones at (i, i) for i < min(rows, cols) (Theorem 3.8)."""
    return torch.eye(rows, cols, dtype=dtype)


KEY_ROTATION_SEED = 0  # the seed of key_rotations: every rotated k correction draws the same R_h


def key_rotations(heads: int, head_dim: int, seed: int = KEY_ROTATION_SEED) -> torch.Tensor:
    """R_0, ..., R_{heads-1}: fixed random dh x dh orthogonal matrices, (heads, dh, dh), float64.

    Head after head, a standard-normal dh x dh matrix G_h is drawn from a CPU ``torch.Generator`` seeded with
    ``seed`` (so the same on every machine and device, and R_h depends on h and dh only, not on ``heads``),
    and R_h is the Q of G_h = Q R with the signs that make R's diagonal positive (a Haar-distributed
    rotation). ``SpectralConfig(key_basis="orthogonal")`` corrects each k head by lam R_h E_h instead of
    lam E_h (E_h: the head's rows of the rectangular identity): R_h E_h has the singular values of E_h, so
    the Weyl bound of :func:`weyl_identity_bound` holds unchanged.
    """
    generator = torch.Generator().manual_seed(seed)
    gaussians = torch.stack(
        [torch.randn(head_dim, head_dim, generator=generator, dtype=torch.float64) for _ in range(heads)]
    )  # (heads, dh, dh)
    q, r = torch.linalg.qr(gaussians)  # q, r: (heads, dh, dh)
    signs = torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))  # (heads, dh)
    return (q * signs.unsqueeze(-2)).contiguous()  # column j of each Q times the sign of r_jj; row-major, as saved


def svd_correction(matrix: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """C = sigma_max(W) U V^T from the thin SVD W = U S V^T (Theorem 3.5), in ``dtype`` (float64 unless a
    caller only predicts from C: apply's collapse advice). ``matrix``: (rows, cols), or a stack (..., rows,
    cols) whose every matrix gets its own C (the same values, bit for bit, as one by one).

    U V^T is W's polar factor. For a well-conditioned matrix whose short side is at most half its long side
    (a head's 64 x 768 rows: :func:`gram_eigen`), it is (W W^T)^{-1/2} W, from the eigen-decomposition of
    the small W W^T in float64, about a quarter of the SVD's time. It agrees with the SVD's C to under 2e-13
    relative (eps kappa^2); the float32 C apply stores equals the SVD's but for about one entry in a million,
    off by a unit or a few in the last place (tests/test_gram_route.py measures it on the published models
    at head width 64: one entry of 442,368 in two of them, none in the rest). Every other matrix takes the
    SVD, as before. Below float64 (only predicted from, never attached) the Gram route runs in float32 and a
    wide matrix's SVD is taken transposed, which LAPACK does about four times faster: C of W^T is C^T, up to
    rounding.

    Then W + C = U (S + sigma_max I) V^T, so kappa(W + C) = 2 sigma_max / (sigma_max + sigma_min) <= 2.
    The correction of W^T is the transpose of the correction of W, so it can be computed in either
    storage orientation.
    """
    w = matrix.detach().to(dtype)
    rows, cols = w.shape[-2:]
    if not _gram_pays(rows, cols):
        return _svd_route(w, dtype)
    flat = w.reshape(-1, rows, cols)  # (n, rows, cols)
    wide = flat.mT if rows > cols else flat  # (n, r, c), r < c
    exact = torch.float64 if dtype == torch.float64 else torch.float32  # below float64: only predicted from
    values, vectors, well = gram_eigen(wide, dtype=exact)  # (n, r), (n, r, r), (n,)
    out = torch.empty_like(wide, dtype=exact)  # (n, r, c)
    if bool(well.any()):
        v, q = values[well], vectors[well]  # (m, r), (m, r, r)
        inverse_root = (q * v.rsqrt().unsqueeze(-2)) @ q.mT  # (W W^T)^{-1/2}, (m, r, r)
        out[well] = v[:, -1:].sqrt().unsqueeze(-1) * (inverse_root @ wide[well].to(exact))  # sigma_max U V^T
    out = (out.mT if rows > cols else out).to(dtype)  # (n, rows, cols)
    if not bool(well.all()):
        out[~well] = _svd_route(flat[~well], dtype)
    return out.reshape(w.shape)


def _svd_route(w: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """svd_correction by the thin SVD of each matrix of ``w`` (..., rows, cols), already in ``dtype``."""
    if dtype != torch.float64 and w.shape[-2] < w.shape[-1]:
        return _svd_route(w.mT, dtype).mT
    u, s, vh = torch.linalg.svd(w, full_matrices=False)  # u (..., r, k), s (..., k), vh (..., k, c)
    if s.shape[-1] == 0:
        return torch.zeros_like(w)
    return s[..., :1, None] * (u @ vh)  # sigma_max of each matrix, (..., 1, 1)


def svd_corrected_kappa(sigma_max: float, sigma_min: float) -> float:
    """Theorem 3.5's value of kappa(W + C): 2 sigma_max / (sigma_max + sigma_min); inf for W = 0 (C = 0)."""
    if sigma_max == 0.0:
        return float("inf")
    return 2.0 * sigma_max / (sigma_max + sigma_min)


def weyl_identity_bound(lam: float, sigma_max: float) -> float:
    """Weyl bound kappa(W + lam I_k) <= (lam + sigma_max) / (lam - sigma_max), valid when lam > sigma_max(W).

    Every singular value of W + lam I_k lies within sigma_max(W) of lam, because the singular values of
    lam I_k are all lam and singular values are 1-Lipschitz under additive perturbation.
    """
    if lam <= sigma_max:
        raise ValueError(f"the Weyl bound needs lam > sigma_max(W); got lam={lam}, sigma_max={sigma_max}")
    return (lam + sigma_max) / (lam - sigma_max)


def auto_lam(sigma_max: float | torch.Tensor, target_kappa: float) -> float | torch.Tensor:
    """The smallest lam whose Weyl bound meets ``target_kappa`` = t: lam = sigma_max (t + 1) / (t - 1).

    Solving (lam + sigma_max) / (lam - sigma_max) = t (see :func:`weyl_identity_bound`) for lam gives the
    formula (t = 2: lam = 3 sigma_max). For t > 1 and sigma_max > 0, lam > sigma_max, so the bound applies
    and kappa(W + lam I_k) <= t.

    Rectangular W (m x n, tall or wide): I_k = I_{m,n} has exactly min(m, n) singular values, all 1, and
    Weyl's inequality |sigma_i(W + lam I_k) - sigma_i(lam I_k)| <= sigma_max(W) holds for each of them, so
    all min(m, n) singular values of W + lam I_k lie in [lam - sigma_max, lam + sigma_max]. With kappa
    taken over those min(m, n) values (docs/THEORY.md section 1) the bound and this lam hold for every shape,
    independent of m and n. The argument needs only that the matrix added has min(m, n) singular values
    equal to 1: it holds for a head's row slice of its block's I_k when that slice holds a full diagonal
    (every head does when block_out <= in), and fails for a head whose rows run past the diagonal.

    ``sigma_max`` may be a tensor (one lam per entry).
    """
    if not target_kappa > 1.0:
        raise ValueError(f"auto_lam needs target_kappa > 1 (kappa >= 1 always), got {target_kappa}")
    return sigma_max * (target_kappa + 1.0) / (target_kappa - 1.0)


def rounded_auto_bound(target_kappa: float, eps: float) -> float:
    """The kappa that lam = :func:`auto_lam` still guarantees once lam and W + lam I are stored in a dtype of
    machine epsilon ``eps``: storing lam, then each W_ii + lam, rounds by at most eps / 2 relative each, a
    diagonal perturbation of norm <= g lam with g = eps (1 + r) (first order, r = (t - 1) / (t + 1) =
    sigma_max / lam), so Weyl's inequality gives kappa <= (1 + r + g) / (1 - r - g); inf when g + r >= 1.
    For t near 1 this is about t + eps: a target closer to 1 than a few eps cannot be held in that dtype.
    """
    r = (target_kappa - 1.0) / (target_kappa + 1.0)
    g = eps * (1.0 + r) * (1.0 + eps)
    return float("inf") if r + g >= 1.0 else (1.0 + r + g) / (1.0 - r - g)
