"""The library under hostile numbers (docs/RELIABILITY_LIBRARY.md, "What numeric input is refused"):
non-finite weights, lams the weight's dtype cannot
hold, targets closer to 1 than its precision, numpy scalars. Each is refused with the number and the range
that works, before anything is written, or accepted and right."""
from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import speccond
from speccond.core.backends import attachments

LAYOUT = speccond.ProjectionLayout("qkv", num_heads=2)
DECLARED = {r"qkv\.weight$": LAYOUT}


def build(dtype=torch.float32) -> nn.Module:
    torch.manual_seed(0)
    return nn.ModuleDict({"qkv": nn.Linear(8, 24)}).to(dtype)


def config(**fields) -> speccond.SpectralConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return speccond.SpectralConfig(layouts=DECLARED, **fields)


def apply(model, **fields):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the collapse warning of large lams
        return speccond.apply(model, config(**fields))


def snapshot(model: nn.Module) -> dict:
    return {key: value.clone() for key, value in model.state_dict().items()}


def unchanged(model: nn.Module, before: dict) -> bool:
    after = model.state_dict()
    return after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)


# -- refresh of an SVD correction when W holds inf or NaN --------------------------------------------------
@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_refresh_of_an_svd_correction_refuses_non_finite_weights_and_writes_nothing(bad):
    model = build()
    apply(model, correction="svd")
    stored = model["qkv"].parametrizations.weight.original
    correction = next(attachments(model)).correction
    before = correction.matrix.clone()
    saved = stored.detach().clone()
    with torch.no_grad():
        stored[0, 0] = bad
    with pytest.raises(ValueError, match=r"speccond.refresh: qkv.weight: .*q block .*non-finite.*repair"):
        speccond.refresh(model)
    assert torch.equal(correction.matrix, before)  # no NaN written into C
    with torch.no_grad():
        stored.copy_(saved)  # W repaired: the model works again
    assert speccond.refresh(model) == 1
    assert torch.isfinite(model["qkv"](torch.randn(2, 8))).all()


def test_apply_of_an_svd_correction_refuses_non_finite_weights():
    model = build()
    with torch.no_grad():
        model["qkv"].weight[9, 3] = float("inf")  # a k row
    before = snapshot(model)
    with pytest.raises(ValueError, match=r"qkv.weight .*k block .*non-finite"):
        apply(model, correction="svd")
    assert not speccond.is_conditioned(model) and unchanged(model, before)


# -- lams the weight's dtype cannot hold -------------------------------------------------------------------
@pytest.mark.parametrize("lam", [1e20, 1e39])
def test_a_lam_too_large_for_float32_is_refused_with_the_range_that_works(lam):
    model = build(torch.float32)
    before = snapshot(model)
    with pytest.raises(ValueError) as error:
        apply(model, lam=lam)
    message = str(error.value)
    assert f"{lam:g}" in message and "float32" in message
    assert not speccond.is_conditioned(model) and unchanged(model, before)
    largest = float(re.search(r"lam below ([0-9.e+]+)", message).group(1))
    apply(model, lam=largest / 2)  # the range it names works: finite outputs
    assert torch.isfinite(model["qkv"](torch.randn(2, 8))).all()


def test_a_lam_that_rounds_away_the_weights_diagonal_is_refused():
    """lam = 1e8 stays finite in float32, but lam's spacing (8) dwarfs every W_ii (|W_ii| < 0.36): W + lam I
    would read lam on the whole diagonal, the model's own weights there lost."""
    model = build(torch.float32)
    with pytest.raises(ValueError, match=r"lam_q=1e\+08: W \+ lam I rounds every diagonal entry .*float32.*lam below"):
        apply(model, lam=1e8)
    apply(model, lam=1e4)  # spacing 0.001: W's diagonal still counts
    assert speccond.is_conditioned(model)


# -- lam="auto" with a target closer to 1 than the dtype resolves ------------------------------------------
def test_auto_reaches_a_target_near_1_in_float64_and_says_the_float32_limit():
    target = 1.0000001
    model64 = build(torch.float64)
    report = apply(model64, lam="auto", target_kappa=target)
    assert max(row.head_kappa_eff_max for row in report.rows) <= target
    model32 = build(torch.float32)
    before = snapshot(model32)
    with pytest.raises(ValueError, match=r"target_kappa=1.0000001 .*float32.*eps.*target_kappa >= ([0-9.]+)") as error:
        apply(model32, lam="auto", target_kappa=target)
    assert unchanged(model32, before) and not speccond.is_conditioned(model32)
    reachable = float(re.search(r"target_kappa >= ([0-9.]+)", str(error.value)).group(1))
    report = apply(model32, lam="auto", target_kappa=reachable)
    assert max(row.head_kappa_eff_max for row in report.rows) <= reachable


# -- numpy scalars -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("scalar", [np.float32, np.float64, np.int64, np.int32])
def test_numpy_scalars_are_accepted_like_python_numbers(scalar):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        given = speccond.SpectralConfig(
            lam=scalar(10), lam_q=scalar(20), lam_k=scalar(0), lam_v=scalar(5), target_kappa=scalar(3),
        )
    plain = speccond.SpectralConfig(lam=10.0, lam_q=20.0, lam_k=0.0, lam_v=5.0, target_kappa=3.0)
    assert given.to_dict() == plain.to_dict()
    assert all(type(v) in (float, int) for v in given.to_dict().values() if not isinstance(v, (str, dict, type(None))))
    json.dumps(given.to_dict())  # the run directory's config.json holds it
    layout = speccond.ProjectionLayout("qkv", num_heads=np.int64(4), num_kv_heads=np.int64(2))
    assert layout == speccond.ProjectionLayout("qkv", num_heads=4, num_kv_heads=2)
    assert type(layout.num_heads) is int and type(layout.num_kv_heads) is int


@pytest.mark.parametrize("value", [np.float32("nan"), np.float64("inf"), np.int64(-1), np.bool_(True)])
def test_bad_numpy_scalars_are_refused_like_python_ones(value):
    with pytest.raises((ValueError, TypeError), match=re.escape(repr(value)) + "|" + re.escape(str(value))):
        speccond.SpectralConfig(lam=value)


def test_numpy_integers_are_accepted_by_the_diagnostics():
    from speccond import diagnostics as dx

    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)
    probe = (torch.randn(2, 5, 16),)
    assert dx.Tracker(model, probe, every=np.int64(10)).every == 10
    rows = dx.theorem_bound(model, probe, layer=np.int64(0), head=np.int64(1), method="exact")
    assert rows.rows[0]["layer"] == 0 and rows.rows[0]["head"] == 1
