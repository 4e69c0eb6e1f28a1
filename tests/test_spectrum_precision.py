"""kappa of weights held in float32, bfloat16 and float16: a matrix is called singular when its smallest
singular value cannot be told from the rounding of its dtype (speccond.core.spectral.is_numerically_singular),
and not merely because its dtype is coarse. The rule once called every bfloat16 weight of width 192 singular,
W + 10 I included, so describe(), projection_spectra and the monitor reported kappa(W + C) = inf for a
bfloat16 model conditioned as the paper says."""
from __future__ import annotations

import math
from contextlib import nullcontext

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import speccond
from speccond import diagnostics as dx
from speccond.core.spectral import spectrum
from speccond.monitor import Monitor

HALF_AND_SINGLE = [torch.float32, torch.bfloat16, torch.float16]


def stored_kappa(matrix: torch.Tensor) -> float:
    """sigma_max / sigma_min of the values as stored, by numpy in float64 (independent of torch's SVD)."""
    values = np.linalg.svd(matrix.double().numpy(), compute_uv=False)
    return float(values[0] / values[-1])


@st.composite
def rounded_rank_deficient(draw) -> torch.Tensor:
    """A float64 product through an inner dimension below min(rows, cols), rounded to a training dtype."""
    rows, cols = draw(st.integers(2, 96)), draw(st.integers(2, 96))
    rank = draw(st.integers(1, min(rows, cols) - 1))
    dtype = draw(st.sampled_from(HALF_AND_SINGLE))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = 10.0 ** draw(st.floats(-2.0, 2.0))  # float16 holds the products without overflow or underflow
    w = rng.standard_normal((rows, rank)) @ rng.standard_normal((rank, cols)) * scale / math.sqrt(rank)
    note(f"shape={(rows, cols)} rank={rank} dtype={dtype} scale={scale:.3g}")
    return torch.from_numpy(w).to(dtype)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rounded_rank_deficient())
def test_a_rank_deficient_matrix_rounded_to_its_dtype_is_singular(w):
    assert spectrum(w).singular and spectrum(w).kappa == math.inf


@pytest.mark.parametrize("dtype", HALF_AND_SINGLE, ids=str)
@pytest.mark.parametrize("width", [64, 192, 768])
def test_w_plus_lam_identity_has_the_kappa_of_its_stored_values(dtype, width):
    """W at a ViT's initial scale plus the paper's 10 I: kappa near 1, in every dtype, at every head width."""
    w = 0.02 * torch.randn(width, width, generator=torch.Generator().manual_seed(width))
    corrected = (w + 10.0 * torch.eye(width)).to(dtype)
    result = spectrum(corrected)
    assert not result.singular and result.kappa == pytest.approx(stored_kappa(corrected), rel=1e-9)
    assert 1.0 < result.kappa < 1.2


def test_an_ordinary_float16_weight_keeps_its_kappa():
    """A random 192 x 192 block (kappa about 500) rounded to float16: the rounding moves sigma_min by well under
    its size, so the stored values' kappa is reported, within 1 % of the float32 original's (392.0 against 391.3)."""
    w = 0.02 * torch.randn(192, 192, generator=torch.Generator().manual_seed(0))
    half = w.to(torch.float16)
    result = spectrum(half)
    assert not result.singular and result.kappa == pytest.approx(stored_kappa(half), rel=1e-9)
    assert result.kappa == pytest.approx(spectrum(w).kappa, rel=0.01)


timm = pytest.importorskip("timm")


@pytest.mark.parametrize("dtype, correction", [(torch.bfloat16, {"lam": 10.0}), (torch.float16, {"correction": "svd"})],
                         ids=["bfloat16-lam10", "float16-svd"])
def test_a_half_precision_model_reports_and_logs_the_kappa_of_its_corrected_weights(tmp_path, dtype, correction):
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2).to(dtype)
    with pytest.warns(UserWarning) if "lam" in correction else nullcontext():  # lam = 10 collapses: apply says so
        speccond.apply(model, speccond.SpectralConfig(**correction))
    rows = [row for row in dx.projection_spectra(model) if row["head"] is not None]  # per head: what C conditions
    assert rows and all(math.isfinite(row["kappa"]) and row["kappa"] <= 2.0 for row in rows)
    monitor = Monitor(model.eval(), writer=tmp_path / "m.csv", every=1, entropy=False)
    with monitor.step(0):
        model(torch.randn(2, 3, 32, 32, dtype=dtype))
    for row in rows:
        logged = monitor.last[f"speccond/kappa/layer{row['layer']}/{row['projection']}/head{row['head']}"]
        assert logged == pytest.approx(row["kappa"], rel=1e-4)  # the monitor's float32 SVD against float64


def test_describe_says_what_kappa_inf_means_when_it_shows_it():
    """A bfloat16 ViT-Ti at initialisation: its q and k blocks' stored kappas (about 610 and 460) are more than
    bfloat16's rounding resolves, v's (194) is not, so describe() shows inf for q and k, 194 for v, and says what
    inf means; in float32 it shows all three, with no note."""
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=1)
    half = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=1)
    half.load_state_dict(model.state_dict())
    half = half.to(torch.bfloat16)
    with pytest.warns(UserWarning):  # lam = 10 collapses attention: apply says so
        speccond.apply(model, speccond.SpectralConfig(lam=10.0))
        speccond.apply(half, speccond.SpectralConfig(lam=10.0))
    weight = half.blocks[0].attn.qkv.parametrizations.weight.original.detach()  # (3 * 192, 192), bfloat16
    stored = [stored_kappa(block) for block in weight.split(192)]  # q, k, v: about 610, 460 and 194
    shown = str(speccond.describe(half))
    assert [math.isinf(row.kappa_w) for row in speccond.describe(half).rows] == [k > 300 for k in stored] == [True, True, False]
    assert "note: kappa inf: sigma_min cannot be told from zero within the rounding" in shown
    assert "kappa inf" not in str(speccond.describe(model))
    assert all(math.isfinite(row.kappa_w) for row in speccond.describe(model).rows)
