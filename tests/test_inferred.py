"""Inferred layouts (docs/MODELS.md, "Attention no adapter names"): attention no adapter names is conditioned with
the one layout its attributes allow and its forward confirms (speccond.adapters.inferred), or left to the
unrecognised-attention error.

The table families conditioned this way run every table check in tests/test_architectures.py (with equal
lam); here they are checked with unequal lam_q, lam_k, lam_v, so that a k/v (or q/v) swap would show,
against layouts read by hand from each family's forward.
"""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import speccond
from speccond.diagnostics import attention_entropy, projection_spectra
from tests.architectures_hf import CASES as HF_CASES
from tests.architectures_timm import CASES as TIMM_CASES
from tests.models import expected_identity

UNEQUAL = {"q": 1.0, "k": 2.0, "v": 3.0}
INFERRED_CASES = ["hf-codegen", "hf-persimmon", "hf-dbrx", "hf-mpt", "hf-modernbert-decoder", "timm-edgenext"]
pytestmark = pytest.mark.usefixtures("float64_default")


def _apply(model: nn.Module, **fields) -> speccond.SpectralReport:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return speccond.apply(model, speccond.SpectralConfig(**{"lam": 10.0, **fields}))


@pytest.mark.parametrize("name", INFERRED_CASES)
def test_inferred_layout_conditions_exactly_q_k_v_with_unequal_lam(name):
    case = next(c for c in HF_CASES + TIMM_CASES if c.name == name)
    torch.manual_seed(0)
    model = case.build().double().eval()
    before = {n: model.get_parameter(n).detach().clone() for n in case.params}
    report = _apply(model, lam_q=UNEQUAL["q"], lam_k=UNEQUAL["k"], lam_v=UNEQUAL["v"])
    assert {row.module + ".weight" for row in report} == set(case.params)
    found = {a.qualified_name: a for a in speccond.core.backends.attachments(model)}
    for param, layout in case.params.items():
        change = found[param].effective_weight().detach() - before[param]
        torch.testing.assert_close(change, expected_identity(before[param], layout, UNEQUAL), rtol=0, atol=1e-12,
                                   msg=lambda m: f"{param}: {m}")


class PlainAttention(nn.Module):
    """A user's standard attention: fused to_qkv, rows per head (H, 3, dh), softmax(q k^T / sqrt(dh)) v."""

    def __init__(self, dim: int = 16, num_heads: int = 4) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.to_qkv = nn.Linear(dim, 3 * dim)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.to_qkv(x).view(b, n, self.num_heads, 3, d // self.num_heads).unbind(3)  # (B, N, H, dh)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))  # (B, H, N, dh)
        return self.to_out(out.transpose(1, 2).reshape(b, n, d))


def test_an_unnamed_per_head_attention_is_inferred_verified_and_measurable():
    torch.manual_seed(0)
    model = nn.Sequential(PlainAttention(), PlainAttention())
    x = torch.randn(2, 5, 16)
    before = model[0].to_qkv.weight.detach().clone()
    report = _apply(model, lam_q=1.0, lam_k=2.0, lam_v=3.0)
    assert {row.module for row in report} == {"0.to_qkv", "1.to_qkv"}
    layout = speccond.ProjectionLayout("qkv", 4, arrangement="per_head")
    attachment = next(speccond.core.backends.attachments(model))
    assert attachment.correction.layout == layout
    change = attachment.effective_weight().detach() - before
    torch.testing.assert_close(change, expected_identity(before, layout, UNEQUAL), rtol=0, atol=1e-12)
    assert all("q/k/v rows of each head pair up" in r.checks for r in speccond.verify(model, x))
    assert len(projection_spectra(model)) > 0
    with pytest.raises(ValueError, match="its layout was inferred by probing"):
        attention_entropy(model, (x,))


class LinearAttention(nn.Module):
    """No softmax: out = q (k^T v). The output is linear in q, so no candidate passes."""

    def __init__(self, dim: int = 16, num_heads: int = 4) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)  # (B, H, N, dh)
        return self.proj((q @ (k.transpose(-2, -1) @ v)).transpose(1, 2).reshape(b, n, d))


class GatedQueries(nn.Module):
    """q_proj holds [q_h | gate_h] per head (Qwen3-Next's gated attention): q_proj is twice head_dim per head."""

    def __init__(self, dim: int = 16, num_heads: int = 4) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.q_proj = nn.Linear(dim, 2 * dim)
        self.k_proj, self.v_proj, self.o_proj = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, gate = self.q_proj(x).view(b, n, self.num_heads, 2 * self.head_dim).chunk(2, -1)  # (B, N, H, dh) each
        k, v = (p(x).view(b, n, self.num_heads, -1) for p in (self.k_proj, self.v_proj))
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
        return self.o_proj((out * gate.sigmoid()).reshape(b, n, d))


@pytest.mark.parametrize("module", [LinearAttention, GatedQueries])
def test_what_is_not_standard_attention_is_left_to_the_unrecognised_error(module):
    model = nn.Sequential(module())
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="no speccond adapter recognises"):
        _apply(model)
    assert not speccond.is_conditioned(model)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
