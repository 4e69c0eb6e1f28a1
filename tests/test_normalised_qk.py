"""Attention that normalises its own q and k, found by probing where no adapter names it (adapters/inferred.py,
``normalisation``): cosine attention (a ``logit_scale``) and q/k norms are confirmed by the module's output not
changing when its q and k rows are scaled, then noted, predicted through by the collapse warning
(speccond.collapse) and refused by the qk-norm peer. A ``logit_scale`` on plain dot-product logits is not taken
for cosine attention."""
from __future__ import annotations

import math
import re
import warnings

import pytest
import torch
import transformers
from torch import nn

import speccond
from speccond import peers
from speccond.adapters import find_projections
from speccond.adapters.base import COSINE_NOTE, QK_COSINE, QK_LAYER_NORM, QK_NORM_NOTE
from speccond.collapse import COLLAPSE_NATS
from speccond.diagnostics.entropy import row_entropy


def _timm_swinv2_cr():
    import timm

    return timm.create_model("swinv2_cr_tiny_ns_224", pretrained=False, embed_dim=48, depths=(1,) * 4,
                             num_heads=(2,) * 4, img_size=128, window_size=4, num_classes=5)


def _hf_swinv2(window: int = 4):
    return transformers.Swinv2Model(transformers.Swinv2Config(
        image_size=8 * window, patch_size=4, embed_dim=32, depths=[1, 1], num_heads=[2, 2], window_size=window))


def _hf_swin2sr():
    return transformers.Swin2SRModel(transformers.Swin2SRConfig(
        image_size=32, embed_dim=32, depths=[1, 1], num_heads=[2, 2], window_size=4))


def _hf_internvl(qk_norm: bool):
    return transformers.InternVLVisionModel(transformers.InternVLVisionConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128, image_size=32,
        patch_size=8, use_qk_norm=qk_norm))


CASES = {
    "timm swinv2_cr (inferred)": (_timm_swinv2_cr, QK_COSINE),
    "transformers Swinv2 (BERT style)": (_hf_swinv2, QK_COSINE),
    "transformers Swin2SR (BERT style)": (_hf_swin2sr, QK_COSINE),
    "transformers InternVL use_qk_norm (inferred)": (lambda: _hf_internvl(True), QK_LAYER_NORM),
    "transformers InternVL plain (inferred)": (lambda: _hf_internvl(False), ""),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_probe_finds_how_each_attention_normalises_q_and_k(case):
    make, expected = CASES[case]
    torch.manual_seed(0)
    sites = find_projections(make(), speccond.SpectralConfig())
    assert sites and {site.qk_normalised for site in sites} == {expected}
    note = {QK_COSINE: COSINE_NOTE, QK_LAYER_NORM: QK_NORM_NOTE}.get(expected)
    assert all((note in site.notes) if note else not site.notes for site in sites)


@pytest.mark.parametrize("case", [c for c, (_, found) in CASES.items() if found])
def test_the_qk_norm_peer_refuses_attention_that_normalises_itself(case):
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="already normalises q and k"):
        peers.qk_norm(CASES[case][0]())


class _ScaledDotAttention(nn.Module):
    """Plain softmax(logit_scale q k^T / sqrt(dh)) v attention that also has a ``logit_scale``: not cosine."""

    def __init__(self, dim: int = 32, num_heads: int = 2):
        super().__init__()
        self.num_heads = num_heads
        self.q, self.k, self.v, self.proj = (nn.Linear(dim, dim) for _ in range(4))
        self.logit_scale = nn.Parameter(torch.zeros(num_heads, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D)
        b, n, d = x.shape
        q, k, v = (p(x).view(b, n, self.num_heads, -1).transpose(1, 2) for p in (self.q, self.k, self.v))  # (B, H, N, dh)
        logits = self.logit_scale.exp() * q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, H, N, N)
        return self.proj((logits.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))


def test_a_logit_scale_on_dot_product_logits_is_not_taken_for_cosine_attention():
    torch.manual_seed(0)
    model = nn.Sequential(_ScaledDotAttention())
    sites = find_projections(model, speccond.SpectralConfig())
    assert {site.source for site in sites} == {"inferred (probed) attention"}
    assert {site.qk_normalised for site in sites} == {""} and not any(site.notes for site in sites)


def _collapse_warnings(model, config) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        speccond.apply(model, config)
    return [str(w.message) for w in caught if "nearly one-hot" in str(w.message)]


@pytest.mark.parametrize("config, collapses", [(dict(lam=10.0), True), (dict(correction="svd"), False)], ids=str)
def test_transformers_swinv2_prediction_agrees_with_its_own_attention_probabilities(config, collapses):
    """The warning, predicted through the cosine logits for 64 unit-variance tokens, against the probabilities
    the module itself returns (output_attentions) on 64 such tokens (one 8 x 8 window)."""
    torch.manual_seed(0)
    model = _hf_swinv2(window=8).eval()
    warned = _collapse_warnings(model, speccond.SpectralConfig(**config))
    attention = model.encoder.layers[0].blocks[0].attention.self
    with torch.no_grad():
        _, p = attention(torch.randn(8, 64, 32), output_attentions=True)  # p: (windows, heads, N, N)
    p = p.double()
    lowest = float(row_entropy(p).mean((0, 2)).min())  # the lowest head's
    assert (lowest < COLLAPSE_NATS) == collapses
    assert len(warned) == int(collapses)
    if collapses:
        predicted = float(re.search(r"down to ([0-9.]+) nats", warned[0]).group(1))
        assert predicted < COLLAPSE_NATS
