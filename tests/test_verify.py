"""speccond.verify passes on every correctly described model and fails on a mis-declared layout."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import speccond
from speccond.verify import VerificationError, verify
from tests.models import CASE_IDS, CASES, InterleavedAttention


@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_verify_passes_on_every_case(case, backend):
    if backend == "activation" and not case.activation_ok:
        pytest.skip("activation backend refused for this module")
    model = case.build().eval()
    speccond.apply(model, speccond.SpectralConfig(backend=backend, **case.config))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    results = verify(model, *case.inputs())
    assert results and all("values linear, queries and keys not" in r.checks for r in results)
    if case.name != "torch-mha-separate-qkv":
        assert all("q/k/v rows of each head pair up" in r.checks for r in results)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # the model is not touched


def test_separate_mha_projections_pair_up_across_parameters():
    case = next(c for c in CASES if c.name == "torch-mha-separate-qkv")
    model = case.build().eval()
    speccond.apply(model, speccond.SpectralConfig())
    (result,) = verify(model, *case.inputs())
    assert "q/k/v rows of each head pair up" in result.checks
    assert sorted(result.parameters) == ["attn.k_proj_weight", "attn.q_proj_weight", "attn.v_proj_weight"]


@pytest.mark.parametrize(
    "layout, message",
    [
        (speccond.ProjectionLayout("qkv", 3, arrangement="blocked"), "act as v.*not linear"),
        (speccond.ProjectionLayout("vkq", 3, arrangement="per_head"), "act as v.*not linear"),
        (speccond.ProjectionLayout("qkv", 1, arrangement="per_head"), "not linear|do not pair"),
    ],
    ids=["blocked-instead-of-per-head", "wrong-role-order", "wrong-head-count"],
)
def test_verify_fails_on_a_mis_declared_layout(layout, message):
    model = InterleavedAttention(dim=24, heads=3).eval()
    speccond.apply(model, speccond.SpectralConfig(layouts={r"to_qkv\.weight": layout}))
    with pytest.raises(VerificationError, match=message):
        verify(model, torch.randn(2, 7, 24))


class ReadsWeightDirectly(nn.Module):
    """Calls F.linear on the weight, bypassing the module (and so any forward hook)."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = F.linear(x, self.qkv.weight, self.qkv.bias).chunk(3, dim=-1)  # each (B, N, D)
        return F.scaled_dot_product_attention(q, k, v)


def test_verify_catches_an_activation_hook_that_never_runs():
    layouts = {r"qkv\.weight": speccond.ProjectionLayout("qkv")}
    model = ReadsWeightDirectly()
    speccond.apply(model, speccond.SpectralConfig(layouts=layouts, backend="activation"))
    with pytest.raises(VerificationError, match="does not change the attention output.*backend='weight'"):
        verify(model, torch.randn(2, 5, 16))
    fixed = ReadsWeightDirectly()
    speccond.apply(fixed, speccond.SpectralConfig(layouts=layouts, backend="weight"))
    assert verify(fixed, torch.randn(2, 5, 16))


def test_verify_needs_a_conditioned_model():
    with pytest.raises(ValueError, match="not spectrally conditioned"):
        verify(InterleavedAttention(), torch.randn(1, 3, 24))


def test_apply_with_verify_undoes_a_wrong_layout():
    model = InterleavedAttention(dim=24, heads=3).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    wrong = speccond.SpectralConfig(layouts={r"to_qkv\.weight": speccond.ProjectionLayout("qkv", 3)})
    with pytest.raises(VerificationError):
        speccond.apply(model, wrong, verify_with=(torch.randn(2, 7, 24),))
    assert not speccond.is_conditioned(model)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    right = speccond.SpectralConfig(
        layouts={r"to_qkv\.weight": speccond.ProjectionLayout("qkv", 3, arrangement="per_head")}
    )
    assert len(speccond.apply(model, right, verify_with=(torch.randn(2, 7, 24),))) == 3
