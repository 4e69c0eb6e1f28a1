"""Property tests of the correction math against the theorems it implements (docs/THEORY.md section 2).

Which test checks what:

- Theorem 3.5 (exact correction C = sigma_max U V^T, ``spectral.svd_correction``):
  ``test_svd_correction_*`` -- kappa(W + C) = 2 sigma_max / (sigma_max + sigma_min) <= 2, W + C keeps
  W's singular vectors with singular values S + sigma_max, C agrees with an independent numpy SVD, and
  the correction of W^T is the transpose of the correction of W; plus hand-checked examples.
- Theorem 3.8 as reconstructed (identity correction lam I_k, Weyl bound,
  ``spectral.rectangular_identity`` / ``weyl_identity_bound``): ``test_rectangular_identity_*`` and
  ``test_weyl_*`` -- every singular value of W + lam I_k lies in [lam - sigma_max, lam + sigma_max], so
  kappa(W + lam I_k) <= (lam + sigma_max) / (lam - sigma_max) when lam > sigma_max; the bound refuses
  lam <= sigma_max.
- The condition number itself (docs/THEORY.md section 1, ``spectral.spectrum``): ``test_spectrum_*`` --
  kappa = sigma_max / sigma_min with sigma_min the min(rows, cols)-th singular value; rank-deficient
  matrices report singular=True and kappa=inf; non-2-D input is refused.
- Both theorems at block level (docs/THEORY.md sections 3 and 5, ``correction.SpectralCorrection``):
  ``test_block_*`` -- the identity correction is lam_role times the rectangular identity of each logical
  q/k/v block (not eye(3 * block_out, in)); the svd correction makes every head (or every whole block)
  kappa <= 2; the weight backend (forward) and the activation backend (add_to_output) are the map
  W + C; a role with scale 0 is left untouched. Run for both storages ((out, in) and (in, out)) and
  both arrangements (blocked [q | k | v] and per_head (H, 3, dh)).

Random matrices are float64, square, tall or wide (1 to 24 per side), multiplied by a scale spanning
twelve orders of magnitude. Tolerances are relative and set once below.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from speccond.core.correction import SpectralCorrection
from speccond.core.layout import ProjectionLayout
from speccond.core.spectral import (
    kappa,
    rectangular_identity,
    spectrum,
    svd_corrected_kappa,
    svd_correction,
    weyl_identity_bound,
)

# -- settings and tolerances (float64 throughout) ----------------------------------------------------
PROPERTY = settings(
    max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
EPS = float(np.finfo(np.float64).eps)
KAPPA_RTOL = 1e-9  # kappa against a closed form
KAPPA_TWO_SLACK = 1e-12  # Theorem 3.5: kappa(W + C) <= 2 + this
SV_RTOL = 1e-11  # singular values and entries, relative to the largest magnitude involved
BLOCK_KAPPA_SLACK = 1e-9  # kappa <= 2 + this for the corrections held by SpectralCorrection

MAX_SIDE = 24
FULL_RANK_KINDS = ("gaussian", "graded")
ANY_RANK_KINDS = FULL_RANK_KINDS + ("low_rank", "small_integers")


# -- strategies ----------------------------------------------------------------------------------
@st.composite
def shapes(draw, min_side: int = 1, max_side: int = MAX_SIDE) -> tuple[int, int]:
    """(rows, cols), square, tall (rows > cols) or wide (rows < cols)."""
    kind = draw(st.sampled_from(("square", "tall", "wide")))
    if kind == "square" or min_side == max_side:
        side = draw(st.integers(min_side, max_side))
        return side, side
    short = draw(st.integers(min_side, max_side - 1))
    long = draw(st.integers(short + 1, max_side))
    return (long, short) if kind == "tall" else (short, long)


def _orthonormal_columns(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    q, _ = np.linalg.qr(rng.standard_normal((n, k)))  # (n, k)
    return q


@st.composite
def matrices(draw, kinds: tuple[str, ...] = ANY_RANK_KINDS, min_side: int = 1) -> torch.Tensor:
    """A non-zero float64 (rows, cols) matrix times a scale in [1e-6, 1e6].

    gaussian: i.i.d. normal entries. graded: U diag(s) V^T with s spaced evenly over 0 to 6 decades
    (0 decades: all singular values equal). low_rank: a product of rank below min(rows, cols) where
    possible. small_integers: entries drawn by hypothesis from -2..2 (repeated and zero singular
    values are common).
    """
    rows, cols = draw(shapes(min_side=min_side))
    kind = draw(st.sampled_from(kinds))
    scale = 10.0 ** draw(st.floats(-6.0, 6.0))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    k = min(rows, cols)
    if kind == "gaussian":
        w = rng.standard_normal((rows, cols))
    elif kind == "graded":
        decades = draw(st.floats(0.0, 6.0))
        s = np.logspace(0.0, -decades, k)  # (k,) descending
        w = _orthonormal_columns(rng, rows, k) @ np.diag(s) @ _orthonormal_columns(rng, cols, k).T
    elif kind == "low_rank":
        rank = draw(st.integers(1, max(1, k - 1)))
        w = rng.standard_normal((rows, rank)) @ rng.standard_normal((rank, cols))
    else:
        entries = draw(st.lists(st.integers(-2, 2), min_size=rows * cols, max_size=rows * cols))
        w = np.array(entries, dtype=np.float64).reshape(rows, cols)
        if not w.any():
            w[0, 0] = 1.0
    note(f"kind={kind} shape={(rows, cols)} scale={scale:.3g}")
    return torch.from_numpy(w * scale)


def _svdvals_np(w: torch.Tensor) -> np.ndarray:
    """Singular values by numpy (independent of torch), descending, min(rows, cols) of them."""
    return np.linalg.svd(w.numpy(), compute_uv=False)


def _polar_atol(w: torch.Tensor) -> float:
    """Absolute tolerance for C = sigma_max U V^T: the polar factor is as sensitive as kappa(W)."""
    s = _svdvals_np(w)
    return 1e3 * EPS * (s[0] / s[-1]) * s[0] * max(w.shape)


# -- Theorem 3.5: the exact (SVD) correction ------------------------------------------------------
@PROPERTY
@given(matrices())
def test_svd_correction_kappa_is_theorem_value(w):
    c = svd_correction(w)
    assert c.shape == w.shape and c.dtype == torch.float64
    before, after = spectrum(w), spectrum(w + c)
    theorem = svd_corrected_kappa(before.sigma_max, before.sigma_min)
    assert after.kappa == pytest.approx(theorem, rel=KAPPA_RTOL)
    # The same numbers, computed independently with numpy.
    s, s_corrected = _svdvals_np(w), _svdvals_np(w + c)
    assert s_corrected[0] / s_corrected[-1] == pytest.approx(2 * s[0] / (s[0] + s[-1]), rel=KAPPA_RTOL)
    assert after.kappa <= 2.0 + KAPPA_TWO_SLACK
    assert after.kappa <= before.kappa * (1 + KAPPA_RTOL)  # never worse than W
    if s[-1] > 1e-6 * s[0]:
        assert after.kappa < 2.0  # strictly below 2 when sigma_min > 0


@PROPERTY
@given(matrices())
def test_svd_correction_adds_sigma_max_to_every_singular_value(w):
    c = svd_correction(w)
    s = _svdvals_np(w)
    np.testing.assert_allclose(_svdvals_np(w + c), s + s[0], rtol=SV_RTOL, atol=SV_RTOL * s[0])
    # C itself is sigma_max times a partial isometry with min(rows, cols) unit singular values.
    np.testing.assert_allclose(_svdvals_np(c), np.full_like(s, s[0]), rtol=SV_RTOL, atol=SV_RTOL * s[0])


@PROPERTY
@given(matrices(kinds=FULL_RANK_KINDS))
def test_svd_correction_keeps_singular_vectors(w):
    # Full rank: U V^T is unique, so numpy's thin SVD diagonalises W + C with entries S + sigma_max.
    u, s, vh = np.linalg.svd(w.numpy(), full_matrices=False)  # (r, k), (k,), (k, c)
    c = svd_correction(w).numpy()
    atol = _polar_atol(w) + SV_RTOL * s[0]
    np.testing.assert_allclose(u.T @ (w.numpy() + c) @ vh.T, np.diag(s + s[0]), rtol=0, atol=atol)
    np.testing.assert_allclose(c, s[0] * (u @ vh), rtol=0, atol=atol)


@PROPERTY
@given(matrices(kinds=FULL_RANK_KINDS))
def test_svd_correction_commutes_with_transpose(w):
    torch.testing.assert_close(svd_correction(w.t()), svd_correction(w).t(), rtol=0, atol=_polar_atol(w))


SVD_HAND_CASES = [
    # (W, C, kappa(W + C)): worked by hand.
    ([[3.0, 0.0], [0.0, 1.0]], [[3.0, 0.0], [0.0, 3.0]], 6.0 / 4.0),
    ([[3.0, 0.0], [0.0, -1.0]], [[3.0, 0.0], [0.0, -3.0]], 6.0 / 4.0),  # sign goes into U V^T
    ([[0.0, 2.0], [1.0, 0.0]], [[0.0, 2.0], [2.0, 0.0]], 4.0 / 3.0),  # a permutation
    ([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]], [[2.0, 0.0, 0.0], [0.0, 2.0, 0.0]], 4.0 / 3.0),  # wide
    ([[-5.0]], [[-5.0]], 1.0),
    # Rank 1, sigma = (2, 0) -> (4, 2). C is not unique here (U V^T on the null space is arbitrary).
    ([[1.0, 1.0], [1.0, 1.0]], None, 2.0),
]


@pytest.mark.parametrize("w, expected_c, expected_kappa", SVD_HAND_CASES)
def test_svd_correction_hand_examples(w, expected_c, expected_kappa):
    w = torch.tensor(w, dtype=torch.float64)
    c = svd_correction(w)
    if expected_c is not None:
        torch.testing.assert_close(c, torch.tensor(expected_c, dtype=torch.float64), rtol=0, atol=1e-12)
    assert kappa(w + c) == pytest.approx(expected_kappa, rel=1e-12)
    s = spectrum(w)
    assert svd_corrected_kappa(s.sigma_max, s.sigma_min) == pytest.approx(expected_kappa, rel=1e-12)


def test_svd_correction_of_zero_matrix_is_zero():
    for shape in [(1, 1), (3, 3), (2, 5), (5, 2)]:
        zero = torch.zeros(shape, dtype=torch.float64)
        assert torch.equal(svd_correction(zero), zero)


# -- Theorem 3.8 as reconstructed: lam I_k and the Weyl bound -----------------------------------
@PROPERTY
@given(shapes())
def test_rectangular_identity_has_min_rows_cols_unit_diagonal(shape):
    rows, cols = shape
    eye = rectangular_identity(rows, cols, dtype=torch.float64)
    assert eye.shape == (rows, cols) and eye.dtype == torch.float64
    k = min(rows, cols)
    expected = np.zeros((rows, cols))
    expected[np.arange(k), np.arange(k)] = 1.0
    assert np.array_equal(eye.numpy(), expected)
    assert np.array_equal(_svdvals_np(eye), np.ones(k))  # every singular value of lam I_k is lam


@PROPERTY
@given(matrices(), st.floats(-3.0, 3.0))
def test_weyl_bound_holds_for_identity_correction(w, log_margin):
    rows, cols = w.shape
    sigma_max = float(_svdvals_np(w)[0])
    lam = sigma_max * (1.0 + 10.0**log_margin)  # lam > sigma_max, by a factor 1.001 to 1001
    shifted = w + lam * rectangular_identity(rows, cols, dtype=torch.float64)
    s = _svdvals_np(shifted)
    assert s.shape == (min(rows, cols),)
    slack = SV_RTOL * (lam + sigma_max)
    assert np.all(s >= lam - sigma_max - slack) and np.all(s <= lam + sigma_max + slack)
    bound = weyl_identity_bound(lam, sigma_max)
    assert bound == pytest.approx((lam + sigma_max) / (lam - sigma_max), rel=1e-15)
    assert kappa(shifted) <= bound * (1 + KAPPA_RTOL)


WEYL_HAND_CASES = [
    # (W, lam, kappa(W + lam I_k), bound)
    ([[1.0, 0.0], [0.0, -1.0]], 3.0, 4.0 / 2.0, 4.0 / 2.0),  # the bound is attained
    ([[1.0, 0.0], [0.0, 0.5]], 3.0, 4.0 / 3.5, 4.0 / 2.0),
    ([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], 10.0, 11.0 / 10.0, 11.0 / 9.0),  # lam = 10 at sigma_max = 1
]


@pytest.mark.parametrize("w, lam, expected_kappa, expected_bound", WEYL_HAND_CASES)
def test_weyl_hand_examples(w, lam, expected_kappa, expected_bound):
    w = torch.tensor(w, dtype=torch.float64)
    shifted = w + lam * rectangular_identity(*w.shape, dtype=torch.float64)
    assert kappa(shifted) == pytest.approx(expected_kappa, rel=1e-12)
    assert weyl_identity_bound(lam, spectrum(w).sigma_max) == pytest.approx(expected_bound, rel=1e-12)


@PROPERTY
@given(st.floats(1e-6, 1e6), st.floats(0.0, 1.0))
def test_weyl_bound_refuses_lam_at_or_below_sigma_max(sigma_max, fraction):
    for lam in (sigma_max, sigma_max * fraction, 0.0, -sigma_max):
        with pytest.raises(ValueError, match="lam > sigma_max"):
            weyl_identity_bound(lam, sigma_max)


# -- the condition number --------------------------------------------------------------------------
@PROPERTY
@given(matrices())
def test_spectrum_is_ratio_of_extreme_singular_values(w):
    s = _svdvals_np(w)
    result = spectrum(w)
    assert result.sigma_max == pytest.approx(s[0], rel=SV_RTOL)
    # sigma_min is the min(rows, cols)-th singular value, not the smallest eigenvalue of W^T W.
    assert result.sigma_min == pytest.approx(s[min(w.shape) - 1], rel=1e-6, abs=1e3 * EPS * s[0])
    if not result.singular:
        assert result.kappa == pytest.approx(s[0] / s[-1], rel=1e-6)
        assert kappa(w) == result.kappa
    else:
        assert result.kappa == math.inf


@PROPERTY
@given(matrices(kinds=FULL_RANK_KINDS))
def test_spectrum_of_full_rank_matrix_is_finite(w):
    result = spectrum(w)
    assert not result.singular and math.isfinite(result.kappa) and result.kappa >= 1.0 - 1e-12
    assert spectrum(w.t()).kappa == pytest.approx(result.kappa, rel=1e-9)


@st.composite
def rank_deficient(draw) -> torch.Tensor:
    """rank < min(rows, cols): a product through a narrower inner dimension, or zero."""
    rows, cols = draw(shapes(min_side=2))
    rank = draw(st.integers(0, min(rows, cols) - 1))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = 10.0 ** draw(st.floats(-6.0, 6.0))
    w = rng.standard_normal((rows, rank)) @ rng.standard_normal((rank, cols))  # zeros when rank == 0
    note(f"shape={(rows, cols)} rank={rank}")
    return torch.from_numpy(w * scale)


@PROPERTY
@given(rank_deficient())
def test_spectrum_flags_rank_deficient_matrix(w):
    result = spectrum(w)
    assert result.singular and result.kappa == math.inf


SINGULAR_CASES = [
    ("outer product", torch.outer(torch.tensor([1.0, -2.0, 3.0]), torch.tensor([0.5, 4.0]))),
    ("outer product, wide", torch.outer(torch.tensor([1.0, 2.0]), torch.tensor([3.0, -1.0, 7.0, 0.1]))),
    ("zero 3x3", torch.zeros(3, 3)),
    ("zero 1x1", torch.zeros(1, 1)),
    ("zero 2x5", torch.zeros(2, 5)),
    ("zero column, tall", torch.tensor([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])),
]


@pytest.mark.parametrize("name, w", SINGULAR_CASES, ids=[c[0] for c in SINGULAR_CASES])
def test_spectrum_singular_examples(name, w):
    result = spectrum(w.to(torch.float64))
    assert result.singular and result.kappa == math.inf and kappa(w) == math.inf


def test_spectrum_hand_example():
    result = spectrum(torch.tensor([[3.0, 0.0, 0.0], [0.0, -0.5, 0.0]]))  # wide: sigma = (3, 0.5)
    assert (result.sigma_max, result.sigma_min, result.kappa, result.singular) == (3.0, 0.5, 6.0, False)


@pytest.mark.parametrize("shape", [(), (3,), (2, 3, 4), (1, 1, 1)])
def test_spectrum_refuses_non_2d(shape):
    with pytest.raises(ValueError, match="2-D"):
        spectrum(torch.ones(shape))


# -- both theorems at block level: SpectralCorrection ----------------------------------------------
ROLES = "qkv"
# Exact in float32 (see test_identity_correction_keeps_float64_lam for why that matters).
SCALES = (0.0, 0.25, 1.0, 2.0, 10.0, 37.5)
KINDS = ("identity", "svd/head", "svd/projection")


@st.composite
def block_cases(draw):
    """A qkv layout, a random float64 weight in its stored shape (sometimes square), per-role scales."""
    heads = draw(st.integers(1, 4))
    head_dim = draw(st.integers(1, 6))
    out_features = len(ROLES) * heads * head_dim
    # A square fused weight (in = out) catches transposes.
    in_features = draw(st.one_of(st.integers(1, MAX_SIDE), st.just(out_features)))
    layout = ProjectionLayout(
        roles=ROLES,
        num_heads=heads,
        storage=draw(st.sampled_from(("out_in", "in_out"))),
        arrangement=draw(st.sampled_from(("blocked", "per_head"))),
    )
    shape = (out_features, in_features) if layout.storage == "out_in" else (in_features, out_features)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = 10.0 ** draw(st.floats(-4.0, 4.0))
    weight = torch.from_numpy(rng.standard_normal(shape) * scale)
    scales = {role: draw(st.sampled_from(SCALES)) for role in ROLES}
    note(f"layout={layout} shape={shape} scales={scales}")
    return layout, weight, scales, head_dim


def _role_block(layout: ProjectionLayout, matrix_out_in: torch.Tensor, role: str, head_dim: int):
    """Logical block of ``role`` from an (out, in) matrix, gathered independently of ProjectionLayout."""
    blocks, heads = len(layout.roles), layout.num_heads
    position = layout.roles.index(role)
    if layout.arrangement == "blocked":
        return matrix_out_in.reshape(blocks, heads * head_dim, -1)[position]  # (H * dh, in)
    return matrix_out_in.reshape(heads, blocks, head_dim, -1)[:, position].reshape(heads * head_dim, -1)


def _make_correction(layout, weight, scales, kind: str) -> SpectralCorrection:
    """kind is "identity", "svd/head" or "svd/projection"."""
    kind, _, granularity = kind.partition("/")
    svd_weight = weight if kind == "svd" else None
    granularity = granularity or "head"
    return SpectralCorrection(layout, weight.shape, scales, kind, granularity=granularity, weight=svd_weight)


def _check_role_blocks(layout, stored, head_dim):
    """Our gather agrees with layout.logical_block; return {role: (out_block, in) block}."""
    blocks = {}
    for role in layout.roles:
        ours = _role_block(layout, layout.out_in(stored), role, head_dim)
        assert torch.equal(layout.logical_block(stored, role), ours)
        blocks[role] = ours
    return blocks


@PROPERTY
@given(block_cases())
def test_block_identity_is_lam_times_rectangular_identity_per_role(case):
    layout, weight, scales, head_dim = case
    correction = SpectralCorrection(layout, weight.shape, scales, "identity")
    dense = correction.dense(torch.float64)
    assert dense.shape == weight.shape
    block_out, in_features = layout.num_heads * head_dim, layout.out_in(weight).shape[1]
    for role, block in _check_role_blocks(layout, dense, head_dim).items():
        expected = scales[role] * torch.eye(block_out, in_features, dtype=torch.float64)
        assert torch.equal(block, expected), role
    if scales["k"] or scales["v"]:
        # A single eye over the fused weight corrects only q (docs/THEORY.md section 3).
        wrong = scales["q"] * torch.eye(len(ROLES) * block_out, in_features, dtype=torch.float64)
        assert not torch.equal(correction.dense_out_in(torch.float64), wrong)


BLOCK_HAND_CASES = [
    # H = 2, dh = 1, in = 2, lam = (q 1, k 2, v 3); rows of the (out, in) correction.
    ("blocked", [[1, 0], [0, 1], [2, 0], [0, 2], [3, 0], [0, 3]]),
    # per_head rows are (h0 q, h0 k, h0 v, h1 q, h1 k, h1 v): head h gets column h of its role's eye.
    ("per_head", [[1, 0], [2, 0], [3, 0], [0, 1], [0, 2], [0, 3]]),
]


@pytest.mark.parametrize("arrangement, expected", BLOCK_HAND_CASES)
@pytest.mark.parametrize("storage", ["out_in", "in_out"])
def test_block_identity_hand_examples(arrangement, expected, storage):
    layout = ProjectionLayout(roles="qkv", num_heads=2, storage=storage, arrangement=arrangement)
    shape = (6, 2) if storage == "out_in" else (2, 6)
    correction = SpectralCorrection(layout, torch.Size(shape), {"q": 1.0, "k": 2.0, "v": 3.0}, "identity")
    expected = torch.tensor(expected, dtype=torch.float64)
    assert torch.equal(correction.dense_out_in(torch.float64), expected)
    assert torch.equal(correction.dense(torch.float64), layout.out_in(expected))


@PROPERTY
@given(block_cases(), st.sampled_from(("head", "projection")))
def test_block_svd_conditions_every_head_or_block(case, granularity):
    layout, weight, scales, head_dim = case
    correction = _make_correction(layout, weight, scales, f"svd/{granularity}")
    dense = correction.dense()
    assert dense.dtype == torch.float64 and dense.shape == weight.shape
    w_blocks = _check_role_blocks(layout, weight, head_dim)
    corrected = _check_role_blocks(layout, weight + dense, head_dim)
    for role in layout.roles:
        if scales[role] == 0:
            continue
        width = head_dim if granularity == "head" else layout.num_heads * head_dim  # rows per part
        for start in range(0, layout.num_heads * head_dim, width):
            before = spectrum(w_blocks[role][start : start + width])  # (width, in)
            after = spectrum(corrected[role][start : start + width])
            assert after.kappa <= 2.0 + BLOCK_KAPPA_SLACK, (role, start)
            theorem = svd_corrected_kappa(before.sigma_max, before.sigma_min)
            assert after.kappa == pytest.approx(theorem, rel=KAPPA_RTOL)


@PROPERTY
@given(block_cases(), st.sampled_from(KINDS))
def test_block_weight_and_activation_backends_are_w_plus_c(case, kind):
    layout, weight, scales, head_dim = case
    correction = _make_correction(layout, weight, scales, kind)
    dense = correction.dense(torch.float64)  # stored orientation
    effective = correction(weight)
    assert effective.dtype == weight.dtype
    torch.testing.assert_close(effective, weight + dense, rtol=1e-14, atol=0)
    # right_inverse stores W - C, so assigning W_eff round-trips (up to rounding at the size of C).
    round_trip = correction(correction.right_inverse(weight))
    rounding = 4 * EPS * (weight.abs() + dense.abs()).max().item()
    torch.testing.assert_close(round_trip, weight, rtol=0, atol=rounding)

    w_out_in, c_out_in = layout.out_in(weight), layout.out_in(dense)
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((2, 3, w_out_in.shape[1])))  # (B, N, in)
    y = correction.add_to_output(x, x @ w_out_in.T)  # (B, N, out)
    expected = x @ (w_out_in + c_out_in).T
    atol = 1e-12 * (x.abs() @ (w_out_in.abs() + c_out_in.abs()).T).max().item()
    assert y.shape == expected.shape
    torch.testing.assert_close(y, expected, rtol=0, atol=atol)


@PROPERTY
@given(block_cases(), st.sampled_from(KINDS), st.sampled_from(ROLES))
def test_block_role_with_scale_zero_is_untouched(case, kind, zero_role):
    layout, weight, scales, head_dim = case
    scales = {**scales, zero_role: 0.0}
    correction = _make_correction(layout, weight, scales, kind)
    assert not _check_role_blocks(layout, correction.dense(torch.float64), head_dim)[zero_role].any()
    untouched = layout.logical_block(weight, zero_role)
    assert torch.equal(layout.logical_block(correction(weight), zero_role), untouched)
    w_out_in = layout.out_in(weight)
    x = torch.from_numpy(np.random.default_rng(1).standard_normal((4, w_out_in.shape[1])))  # (N, in)
    y = x @ w_out_in.T  # (N, out)
    rows = layout.block_rows(zero_role, w_out_in.shape[0])
    assert torch.equal(correction.add_to_output(x, y)[:, rows], y[:, rows])


def test_identity_correction_keeps_float64_lam():
    """lam is not rounded before it meets the weight: float64 when no weight is given, else its dtype."""
    layout = ProjectionLayout(roles="qkv", num_heads=1)
    weight = torch.zeros(6, 2, dtype=torch.float64)
    correction = SpectralCorrection(layout, weight.shape, {"q": 0.1, "k": 0.1, "v": 0.1}, "identity")
    assert correction(weight)[0, 0].item() == 0.1
    matched = SpectralCorrection(layout, weight.shape, {"q": 0.1, "k": 0.1, "v": 0.1}, "identity", weight=weight)
    assert matched.values.dtype == torch.float64 and matched(weight)[0, 0].item() == 0.1


def test_spectrum_uses_the_matrix_dtype_to_call_a_value_zero():
    """A rank-1 float32 matrix is singular at float32 precision, though its SVD runs in float64."""
    torch.manual_seed(0)
    rank_one = torch.outer(torch.randn(5), torch.randn(4))  # float32
    assert spectrum(rank_one).singular and spectrum(rank_one).kappa == float("inf")
    assert not spectrum(torch.eye(4) + 0.1 * torch.randn(4, 4)).singular


def test_svd_corrected_kappa_of_zero_weight_is_inf():
    assert svd_corrected_kappa(0.0, 0.0) == float("inf")
