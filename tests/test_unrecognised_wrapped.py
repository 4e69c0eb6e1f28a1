"""Attention whose q/k/v projections are not a child's own matrix is found, not skipped: a wrapper around a Linear
(Gemma 4's ClippableLinear holds ``.linear``) gets a declaration that conditions it exactly (verify probes the
attention that holds the wrapper, and says why it cannot confirm a v that is normalised after projection), and a convolution kernel
(timm's BottleneckAttn: a 1x1 Conv2d qkv; ConvNorm wrappers) is named with why it cannot be declared. Before, both
read as "no attention projections found", and beside attention an adapter knows they were left plain, silently."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import speccond
from speccond import ProjectionLayout, SpectralConfig

timm = pytest.importorskip("timm")
from timm.layers.bottleneck_attn import BottleneckAttn  # noqa: E402

GEMMA4_LAYOUTS = {
    rf"^encoder\.blocks\.\d+\.attn\.{role}_proj\.linear\.weight$": ProjectionLayout(roles=role, num_heads=2)
    for role in "qkv"
}


def gemma4_vision() -> nn.Module:
    torch.manual_seed(0)
    return timm.create_model("gemma4_vit_167m", pretrained=False, num_classes=5, img_size=32, patch_size=8,
                             embed_dim=32, depth=2, num_heads=2, head_dim=16, intermediate_size=64,
                             position_embedding_size=64).eval()


def test_a_wrapped_linear_projection_is_found_and_its_declaration_conditions_it_exactly():
    model = gemma4_vision()
    with pytest.raises(ValueError, match=r"Gemma4Attention\): encoder\.blocks\.0\.attn\.q_proj\.linear\.weight "
                       r"\(32, 32\)(.|\n)*attn\\\.q_proj\\\.linear\\\.weight\$\": ProjectionLayout\(roles=\"q\", num_heads=2\)"):
        speccond.apply(model, SpectralConfig(lam=3.0))
    images = torch.randn(2, 3, 32, 32)
    by_hand = copy.deepcopy(model)
    with torch.no_grad():
        for block in by_hand.encoder.blocks:
            for projection in (block.attn.q_proj, block.attn.k_proj, block.attn.v_proj):
                projection.linear.weight += 3.0 * torch.eye(32)
    with pytest.raises(speccond.VerificationError, match=r"v_proj\.linear\.weight .* act as v: .*or the module "
                       r"transforms v after projecting it \(a norm on v, as Gemma 4's"):
        speccond.apply(model, SpectralConfig(lam=3.0, layouts=GEMMA4_LAYOUTS), verify_with=images)  # its v_norm
    assert not speccond.is_conditioned(model)
    speccond.apply(model, SpectralConfig(lam=3.0, layouts=GEMMA4_LAYOUTS))
    torch.testing.assert_close(model(images), by_hand(images), rtol=1e-5, atol=1e-6)


class KnownBesideConvolutional(nn.Module):
    """A timm Attention (an adapter knows it) beside a BottleneckAttn (qkv: a 1x1 Conv2d)."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = timm.layers.Attention(16, num_heads=2)
        self.grid = BottleneckAttn(16, 16, feat_size=(4, 4), num_heads=2)


def test_attention_with_convolution_kernels_is_refused_by_name_not_left_plain_beside_known_attention():
    model = KnownBesideConvolutional()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"grid \(timm\.layers\.bottleneck_attn\.BottleneckAttn\): grid\.qkv\.weight "
                       r"\(48, 16, 1, 1\)(.|\n)*is a convolution kernel \(48, 16, 1, 1\), not a matrix(.|\n)*"
                       r"exclude=\[r\"\^grid\$\"\]"):
        speccond.apply(model, SpectralConfig(lam=3.0))
    assert all(torch.equal(tensor, before[name]) for name, tensor in model.state_dict().items())
    assert not speccond.is_conditioned(model)
    speccond.apply(model, SpectralConfig(lam=3.0, exclude=[r"^grid$"]))  # left plain on purpose: the rest conditioned
    assert {row.module for row in speccond.describe(model).rows} == {"tokens.qkv"}


def _conformer_attention() -> nn.Module:
    import transformers
    from transformers.models.wav2vec2_conformer.modeling_wav2vec2_conformer import Wav2Vec2ConformerSelfAttention

    return Wav2Vec2ConformerSelfAttention(transformers.Wav2Vec2ConformerConfig(
        hidden_size=16, num_attention_heads=2, position_embeddings_type="rotary"))


def _latent_attention() -> nn.Module:
    import transformers
    from transformers.models.minicpm3.modeling_minicpm3 import MiniCPM3Attention

    return MiniCPM3Attention(transformers.AutoConfig.for_model(
        "minicpm3", hidden_size=16, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=8, kv_lora_rank=8,
        qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8), layer_idx=0)


@pytest.mark.parametrize("make, names, says", [
    (_conformer_attention, r"extra\.linear_q\.weight \(16, 16\), extra\.linear_k\.weight", r"ProjectionLayout\(roles=\"q\", num_heads=2\)"),
    (_latent_attention, r"extra\.q_a_proj\.weight \(8, 16\), extra\.q_b_proj\.weight", r"multi-head latent attention"),
], ids=["conformer linear_q/k/v", "latent attention q_a_proj"])
def test_attention_whose_projections_are_named_otherwise_is_refused_not_left_plain_beside_known_attention(make, names, says):
    """Wav2Vec2-Conformer's linear_q/k/v and multi-head latent attention whose query is low-rank (q_a_proj, q_b_proj,
    kv_a_proj_with_mqa: MiniCPM3, GLM-4 MoE Lite, Mistral 4) were not read as projections, so beside attention
    speccond knows they were left plain without a word."""
    model = nn.Module()
    model.tokens, model.extra = timm.layers.Attention(16, num_heads=2), make()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with pytest.raises(ValueError, match=rf"no speccond adapter recognises(.|\n)*{names}(.|\n)*{says}"):
        speccond.apply(model, SpectralConfig(correction="svd"))
    assert all(torch.equal(tensor, before[name]) for name, tensor in model.state_dict().items())
    assert not speccond.is_conditioned(model)
