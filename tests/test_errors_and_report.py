"""Bad input gets a clear error; targets select; the report prints and serialises."""
from __future__ import annotations

import json
import math
import warnings

import pytest
import torch
from torch import nn

import speccond
from tests.models import CASES, InterleavedAttention, timm_vit

BAD_CONFIGS = [
    ({"lam": -1.0}, ValueError, r"lam must be finite and >= 0"),
    ({"lam": float("inf")}, ValueError, r"lam must be finite"),
    ({"lam": float("nan")}, ValueError, r"lam must be finite"),
    ({"lam_v": -0.5}, ValueError, r"lam_v must be finite"),
    ({"lam": "10"}, TypeError, r"lam must be a number"),
    ({"correction": "qr"}, ValueError, r"correction must be one of \('identity', 'svd'\), got 'qr'"),
    ({"backend": "hook"}, ValueError, r"backend must be one of \('weight', 'activation'\)"),
    ({"init": "shift"}, ValueError, r"init must be one of"),
    ({"granularity": "layer"}, ValueError, r"granularity must be one of"),
    ({"targets": "blocks.(0"}, ValueError, r"not a valid regular expression"),
    ({"targets": [3]}, TypeError, r"regular expressions"),
    ({"layouts": {"qkv": "qkv"}}, TypeError, r"must be a speccond.ProjectionLayout"),
]


@pytest.mark.parametrize("fields, error, message", BAD_CONFIGS, ids=[str(f) for f, _, _ in BAD_CONFIGS])
def test_bad_config_is_a_clear_error(fields, error, message):
    with pytest.raises(error, match=message):
        speccond.SpectralConfig(**fields)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"roles": "qkq"}, "distinct letters"),
        ({"roles": "xyz"}, "distinct letters"),
        ({"num_heads": 0}, "positive int"),
        ({"storage": "row"}, "'out_in' or 'in_out'"),
        ({"arrangement": "mixed"}, r"one of \('blocked', 'per_head', 'grouped'\)"),
        ({"num_kv_heads": 0, "num_heads": 4}, "num_kv_heads must be a positive int"),
        ({"num_kv_heads": 3, "num_heads": 4}, r"num_kv_heads \(3\) must divide num_heads \(4\)"),
        ({"roles": "k", "num_heads": 4, "num_kv_heads": 2}, "fused weight holding q"),
        ({"num_heads": 4, "num_kv_heads": 2, "arrangement": "per_head"}, "arrangement='grouped'"),
        ({"roles": "qk", "num_heads": 4, "arrangement": "grouped"}, "defined for roles 'qkv'"),
    ],
)
def test_bad_layout_is_a_clear_error(fields, message):
    with pytest.raises(ValueError, match=message):
        speccond.ProjectionLayout(**fields)


@pytest.mark.parametrize("lam", [0.5, 2.0])
def test_small_lam_warns_citing_the_theorem(lam):
    with pytest.warns(UserWarning, match=r"Theorem 3.8.*lam >= 2.*Weyl"):
        speccond.SpectralConfig(lam=lam)


def test_lam_above_two_or_svd_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        speccond.SpectralConfig(lam=10.0)
        speccond.SpectralConfig(lam=1.0, correction="svd")


def test_targets_matching_nothing_lists_the_attention_modules():
    with pytest.raises(ValueError, match=r"(?s)selected none.*blocks\.0\.attn.*timm Attention.*blocks\.1\.attn"):
        speccond.apply(timm_vit(), speccond.SpectralConfig(targets=r"^decoder\."))


def test_model_without_attention_says_how_to_declare_a_layout():
    with pytest.raises(ValueError, match=r"no attention projections found.*ProjectionLayout"):
        speccond.apply(nn.Sequential(nn.Linear(4, 4)), speccond.SpectralConfig())


def test_non_module_and_non_config_are_type_errors():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        speccond.apply("model", speccond.SpectralConfig())
    with pytest.raises(TypeError, match="SpectralConfig"):
        speccond.apply(timm_vit(), {"lam": 10})


class ThreeDimensional(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Parameter(torch.randn(3, 8, 8))


def test_non_2d_weight_is_a_clear_error():
    config = speccond.SpectralConfig(layouts={"qkv": speccond.ProjectionLayout("qkv")})
    with pytest.raises(ValueError, match=r"qkv: expected a 2-D projection weight, got shape \(3, 8, 8\)"):
        speccond.apply(ThreeDimensional(), config)


def test_block_count_that_does_not_divide_is_a_clear_error():
    model = nn.Sequential(nn.Linear(8, 10))
    config = speccond.SpectralConfig(layouts={r"0\.weight": speccond.ProjectionLayout("qkv")})
    with pytest.raises(ValueError, match=r"0\.weight: the output dimension 10 .* 1 \(q\) \+ 1 \(k\) \+ 1 \(v\) = 3 heads .*3 does not divide 10"):
        speccond.apply(model, config)


def test_head_count_that_does_not_divide_is_a_clear_error():
    """The widths must add up: the message names every block's heads and the total."""
    config = speccond.SpectralConfig(layouts={"to_qkv": speccond.ProjectionLayout("qkv", num_heads=5)})
    with pytest.raises(ValueError, match=r"5 \(q\) \+ 5 \(k\) \+ 5 \(v\) = 15 heads of one width: 15 does not divide 72"):
        speccond.apply(InterleavedAttention(dim=24, heads=3), config)


def test_a_failing_site_leaves_the_model_untouched():
    model = nn.ModuleDict({"good": InterleavedAttention(), "bad": nn.Linear(8, 10)})
    layouts = {
        r"good\.to_qkv": speccond.ProjectionLayout("qkv", 3, arrangement="per_head"),
        r"bad\.weight": speccond.ProjectionLayout("qkv"),
    }
    with pytest.raises(ValueError, match="does not divide"):
        speccond.apply(model, speccond.SpectralConfig(layouts=layouts))
    assert not speccond.is_conditioned(model)


def test_targets_and_exclude_select_attention_modules():
    model = timm_vit()
    report = speccond.apply(model, speccond.SpectralConfig(targets=r"blocks\.\d\.attn", exclude=r"blocks\.1\."))
    assert {row.module for row in report} == {"blocks.0.attn.qkv"}
    assert not hasattr(model.blocks[1].attn.qkv, "parametrizations")


def test_report_rows_print_and_serialise():
    report = speccond.apply(timm_vit(), speccond.SpectralConfig(lam=10.0))
    assert len(report) == 6  # 2 blocks x (q, k, v)
    assert [r.role for r in report][:3] == ["q", "k", "v"]
    row = report.rows[0]
    assert row.shape == (192, 64) and row.block_shape == (64, 64) and row.heads == 4
    assert row.correction == "identity lam=10" and row.scale == 10.0
    assert row.kappa_eff < row.kappa_w  # lam = 10 >> sigma_max at init conditions the block
    text = str(report)
    assert "blocks.0.attn.qkv" in text and "fused qkv, blocked, (out, in)" in text
    data = json.loads(report.to_json())
    assert data["config"]["lam"] == 10.0 and len(data["rows"]) == 6
    assert math.isclose(data["rows"][0]["kappa_eff"], row.kappa_eff)


def test_report_kappa_is_computed_from_the_effective_weight_in_float64():
    model = timm_vit()
    w = model.blocks[0].attn.qkv.weight.detach().clone()
    report = speccond.apply(model, speccond.SpectralConfig(lam=3.0, lam_k=0.0, lam_v=0.0))
    q_eff = (w[:64] + 3.0 * torch.eye(64)).double()
    s = torch.linalg.svdvals(q_eff)
    assert math.isclose(report.rows[0].kappa_eff, float(s[0] / s[-1]), rel_tol=1e-6)
    assert [r.role for r in report] == ["q", "q"]  # k and v untouched in both blocks


def test_qk_norm_is_reported_and_warned():
    import timm

    model = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2,
        qk_norm=True,
    )
    with pytest.warns(UserWarning, match="q/k normalisation"):
        report = speccond.apply(model, speccond.SpectralConfig())
    assert "q/k normalisation" in str(report)


def test_is_conditioned_tracks_apply_and_remove():
    model = CASES[2].build()
    assert not speccond.is_conditioned(model)
    speccond.apply(model, speccond.SpectralConfig())
    assert speccond.is_conditioned(model)
    speccond.remove(model)
    assert not speccond.is_conditioned(model)


def test_apply_leaves_the_report_spectra_for_the_first_read():
    model = timm_vit()
    report = speccond.apply(model, speccond.SpectralConfig(lam=10.0))
    assert len(report) == 6 and "spectra not yet computed" in repr(report)  # len needs no SVD
    assert report.rows == speccond.describe(model).rows  # computed on this read, from the weights as attached
    assert "spectra not yet computed" not in repr(report)


def test_report_read_after_training_refuses_and_compute_keeps_the_figures_at_attach():
    model = timm_vit()
    kept = speccond.apply(model, speccond.SpectralConfig(lam=10.0)).compute()
    at_attach = [r.kappa_eff for r in kept]
    model2 = timm_vit()
    unread = speccond.apply(model2, speccond.SpectralConfig(lam=10.0))
    for m in (model, model2):
        optimiser = torch.optim.SGD(m.parameters(), lr=0.5)
        m(torch.randn(2, 3, 32, 32)).square().mean().backward()
        optimiser.step()
    assert [r.kappa_eff for r in kept] == at_attach
    assert [r.kappa_eff for r in speccond.describe(model)] != at_attach  # training moved W
    with pytest.raises(ValueError, match=r"blocks\.0\.attn\.qkv\.weight has changed since speccond\.apply.*describe\(model\)"):
        unread.rows
    model3 = timm_vit()
    removed = speccond.apply(model3, speccond.SpectralConfig(lam=10.0))
    speccond.remove(model3, merge=False)
    with pytest.raises(ValueError, match="has changed since speccond.apply"):
        str(removed)


def test_a_per_head_correction_reports_every_head_and_says_which_kappa_it_bounds():
    report = speccond.apply(timm_vit(), speccond.SpectralConfig(correction="svd"))
    row = report.rows[0]
    assert row.per_head and len(row.head_kappas_eff) == row.heads == 4
    assert max(row.head_kappas_eff) == row.head_kappa_eff_max <= 2.0 + 1e-6  # Theorem 3.5, head by head
    text = str(report)
    assert "kappa W+C (block)" in text and "kappa W+C per head (max)" in text and "kappa W per head (max)" in text
    assert "sized per head here, so it bounds each head's kappa" in text
    assert json.loads(report.to_json())["rows"][0]["head_kappas_eff"] == list(row.head_kappas_eff)
    plain = speccond.apply(timm_vit(), speccond.SpectralConfig(lam=10.0))
    assert not any(r.per_head for r in plain) and "sized per head" not in str(plain)


@pytest.mark.parametrize("config", [{"correction": "svd", "granularity": "projection"}, {"lam": 10.0}],
                         ids=["svd per block", "lam=10"])
def test_a_block_wide_correction_bounds_every_heads_kappa_too(config):
    """The report's per-head column is what every correction bounds: a head's rows of a block whose singular
    values lie in [a, b] have theirs in [a, b] too (W W^T's principal submatrix interlaces), so the SVD
    correction per block keeps each head within 2, and lam = 10 (above sigma_max(W)) within Weyl's bound."""
    report = speccond.apply(timm_vit(), speccond.SpectralConfig(**config)).compute()
    for row in report:
        assert not row.per_head and row.head_kappa_eff_max <= row.kappa_eff * (1 + 1e-9)
        assert row.head_kappa_eff_max <= (2.0 if "correction" in config else 1.2)
