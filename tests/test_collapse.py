"""The collapse warning (docs/GUIDE.md, "A warning where the correction collapses attention"): apply warns, per
module family, when the correction will make the initial token attention nearly one-hot, predicted from the
effective weights (or measured on verify_with inputs), through the module's own normalisation of q and k, and
exempts channel attention."""
from __future__ import annotations

import dataclasses
import re
import warnings

import pytest
import torch
import transformers

import speccond
from speccond.collapse import COLLAPSE_NATS
from speccond.diagnostics.entropy import row_entropy
from speccond.harness.models.timm_family import build_backbone

ONE_HOT = "nearly one-hot"


def _main_job_vit(**timm_kwargs):
    """The main job's model: a 4-layer ViT, width 64, 4 heads of 16, 28 px grey images."""
    torch.manual_seed(0)
    return build_backbone("vit", 28, 1, 10, 64, 4, 4, 4)


def _collapse_warnings(model, config, **kwargs) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        speccond.apply(model, config, **kwargs)
    return [str(w.message) for w in caught if ONE_HOT in str(w.message)]


def _entropy(message: str) -> float:
    return float(re.search(r"down to ([0-9.]+) nats", message).group(1))


def test_lam_10_warns_once_per_family_with_the_predicted_entropy_and_the_way_out():
    (message,) = _collapse_warnings(_main_job_vit(), speccond.SpectralConfig(lam=10.0))
    assert message.startswith("timm Attention:") and "4 module(s)" in message
    assert _entropy(message) < COLLAPSE_NATS and "4.16 for uniform attention" in message
    assert "predicted for 64 unit-variance tokens" in message and "lam='auto'" in message


@pytest.mark.parametrize("config", [dict(lam="auto"), dict(correction="svd"), dict(lam=1.0)], ids=str)
def test_corrections_of_the_weights_size_do_not_warn(config):
    """RESULTS: lam = auto (2.47 nats), SVD (2.7) and lam = 1 (1.91) keep this model's attention spread."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lam = 1 warns about Theorem 3.8's lam >= 2
        assert _collapse_warnings(_main_job_vit(), speccond.SpectralConfig(**config)) == []


def test_with_verify_inputs_the_entropy_is_measured_and_matches_the_diagnostics():
    images = torch.randn(4, 1, 28, 28)
    model = _main_job_vit()
    (message,) = _collapse_warnings(model, speccond.SpectralConfig(lam=10.0), verify_with=images)
    assert "measured on the verify_with inputs" in message
    rows = speccond.diagnostics.attention_entropy(model, (images,))
    assert _entropy(message) == pytest.approx(min(r["entropy"] for r in rows), abs=0.005)


def _width_64_models():
    """The head width users condition (64): timm's ViT-Ti and ViT-B and a BERT-base-shaped encoder, each cut
    to one or two blocks (the head shape, which decides the collapse, is kept) to keep the test fast."""
    import timm
    from transformers import BertConfig, BertModel

    return {
        "vit_tiny_patch16_224": lambda: timm.create_model(
            "vit_tiny_patch16_224", pretrained=False, img_size=32, depth=2, num_classes=10),
        "vit_base_patch16_224": lambda: timm.create_model(
            "vit_base_patch16_224", pretrained=False, img_size=32, depth=1, num_classes=10),
        "BERT-base-shaped": lambda: BertModel(BertConfig(
            hidden_size=768, num_attention_heads=12, num_hidden_layers=1, intermediate_size=3072)),
    }


RECOMMENDED = re.compile(r"SpectralConfig\(([^()]*)\) keeps attention spread: ([0-9.]+) nats predicted")


@pytest.mark.parametrize("model_name", list(_width_64_models()))
@pytest.mark.parametrize("lam", [10.0, "auto"])
def test_the_warning_recommends_only_a_setting_the_same_prediction_keeps_spread(model_name, lam):
    """At head width 64 lam = "auto" collapses as lam = 10 does; the advice must not point there.
    The setting the warning recommends is applied to the same model and must not warn."""
    make = _width_64_models()[model_name]
    torch.manual_seed(0)
    (message,) = _collapse_warnings(make(), speccond.SpectralConfig(lam=lam))
    recommended = RECOMMENDED.search(message)
    assert recommended, message
    if lam == 10.0:  # the README's recommendation is predicted to collapse here too, and the warning says so
        assert re.search(r"it predicts collapse for SpectralConfig\(lam='auto'\) \(0\.\d\d nats\)", message)
    setting = eval(f"speccond.SpectralConfig({recommended.group(1)})")  # noqa: S307 (the message's own text)
    assert float(recommended.group(2)) >= COLLAPSE_NATS
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _collapse_warnings(make(), setting) == [], f"the warning recommended {setting}, which collapses"


@pytest.mark.parametrize("model_name", list(_width_64_models()))
def test_the_default_does_not_collapse_attention_at_head_width_64(model_name):
    """SpectralConfig() is the setting the README recommends (SVD per head): on ViT-Ti, ViT-B and BERT-base it
    does not collapse attention at initialisation (the paper's lam = 10, the default before, did)."""
    torch.manual_seed(0)
    assert speccond.SpectralConfig() == speccond.SpectralConfig(correction="svd")
    assert _collapse_warnings(_width_64_models()[model_name](), speccond.SpectralConfig()) == []
    torch.manual_seed(0)
    assert _collapse_warnings(_width_64_models()[model_name](), speccond.SpectralConfig.paper())  # what it was


def test_the_quick_start_and_the_demo_use_the_recommended_setting():
    from pathlib import Path

    from speccond.harness.cli import build_parser

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    quick_start = readme[readme.index("## Quick start"):readme.index("## What it does")]
    assert "speccond.apply(model, speccond.SpectralConfig())" in quick_start
    demo = build_parser().parse_args(["demo"])
    assert speccond.SpectralConfig(**{k: v for k, v in (("lam", demo.lam), ("correction", demo.correction))
                                      if v is not None}).correction == "svd"


def test_channel_attention_is_exempt():
    """XCiT's XCA mixes channels, not tokens: no token attention to collapse."""
    import timm

    torch.manual_seed(0)
    xcit = timm.create_model("xcit_nano_12_p8_224", pretrained=False, img_size=32, depth=2, cls_attn_layers=0,
                             num_classes=5)
    assert _collapse_warnings(xcit, speccond.SpectralConfig(lam=10.0)) == []


def _qk_norm_vit(embed_dim: int, num_heads: int):
    import timm

    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2,
                             embed_dim=embed_dim, num_heads=num_heads, qk_norm=True, num_classes=5)


@pytest.mark.parametrize("embed_dim, num_heads, collapses", [(192, 3, True), (64, 4, False)], ids=["dh64", "dh16"])
def test_normalised_logits_are_predicted_through_the_norm(embed_dim, num_heads, collapses):
    """timm qk_norm=True bounds the logits, not the collapse: q and k both become the token's own direction, so
    its logit with itself is about sqrt(dh). At head width 64 lam = 10 still makes attention nearly one-hot
    (it was exempt, and apply said nothing); at 16 it does not. The prediction and the head diagnostics'
    measurement on verify_with inputs agree on both."""
    predicted = _collapse_warnings(_qk_norm_vit(embed_dim, num_heads), speccond.SpectralConfig(lam=10.0))
    model = _qk_norm_vit(embed_dim, num_heads)
    images = torch.randn(4, 3, 32, 32)
    measured = _collapse_warnings(model, speccond.SpectralConfig(lam=10.0), verify_with=images)
    lowest = min(r["entropy"] for r in speccond.diagnostics.attention_entropy(model, (images,)))
    assert (lowest < COLLAPSE_NATS) == collapses
    assert len(predicted) == len(measured) == int(collapses)
    if collapses:
        assert "predicted for 64 unit-variance tokens" in predicted[0] and _entropy(predicted[0]) < COLLAPSE_NATS
        assert "measured on the verify_with inputs" in measured[0]
        assert _entropy(measured[0]) == pytest.approx(lowest, abs=0.005)
        (advice,) = RECOMMENDED.findall(predicted[0])  # and what it recommends does not collapse this model
        assert _collapse_warnings(_qk_norm_vit(embed_dim, num_heads), eval(f"speccond.SpectralConfig({advice[0]})")) == []


def _swinv2_window_attention_entropy(config) -> tuple[list[str], float]:
    """(apply's collapse warnings, the lowest head entropy its first window attention's own softmax computes on
    64 unit-variance tokens, one 8 x 8 window): the prediction's input, read off the module, biases included."""
    import timm

    torch.manual_seed(0)
    model = timm.create_model("swinv2_tiny_window8_256", pretrained=False, img_size=64, window_size=8, embed_dim=96,
                              num_heads=(3,) * 4, depths=(1,) * 4, num_classes=5).eval()
    warned = _collapse_warnings(model, config) if config is not None else []
    attention, probabilities = model.layers[0].blocks[0].attn, []
    attention.softmax.register_forward_hook(lambda module, args, output: probabilities.append(output.double()))
    with torch.no_grad():
        attention(torch.randn(8, 64, 96))  # (windows, tokens, channels)
    p = probabilities[0]  # (windows, heads, N, N)
    return warned, float(row_entropy(p).mean((0, 2)).min())  # the lowest head's


@pytest.mark.parametrize("lam", [10.0, 1.0])
def test_cosine_attention_is_predicted_through_its_logit_scale(lam):
    """Swin V2's cosine logits are at most its logit scale (10 at initialisation), but lam = 10, and even 1,
    turns q and k into the token's own direction: its own softmax goes nearly one-hot, and apply now says so
    (it was exempt). SVD per head keeps it spread, and the warning stays silent."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lam = 1 warns about Theorem 3.8's lam >= 2
        warned, entropy = _swinv2_window_attention_entropy(speccond.SpectralConfig(lam=lam))
    assert entropy < COLLAPSE_NATS
    (message,) = warned
    assert message.startswith("timm SwinV2 WindowAttention:") and _entropy(message) < COLLAPSE_NATS
    warned, entropy = _swinv2_window_attention_entropy(speccond.SpectralConfig(correction="svd"))
    assert entropy > 1.0 and warned == []
    assert _swinv2_window_attention_entropy(None)[1] > 1.0


def test_xcit_class_attention_is_not_exempt():
    """XCiT's class-attention blocks are softmax over tokens: the collapse the classification runs met."""
    import timm

    torch.manual_seed(0)
    xcit = timm.create_model("xcit_nano_12_p8_224", pretrained=False, img_size=32, depth=2, cls_attn_layers=1,
                             num_classes=5)
    (message,) = _collapse_warnings(xcit, speccond.SpectralConfig(lam=10.0))
    assert message.startswith("timm ClassAttn:")


def test_the_advices_float32_candidates_predict_what_float64_ones_do():
    """apply's advice builds the candidates it only predicts from (never attaches) in float32 and without v:
    on ViT-B's head shape the predicted entropies equal the float64, v-included ones to 0.01 nats."""
    from speccond import api
    from speccond.adapters import find_projections

    make = _width_64_models()["vit_base_patch16_224"]
    torch.manual_seed(0)
    model = make()
    for candidate in (speccond.SpectralConfig(correction="svd"), speccond.SpectralConfig(lam="auto")):
        sites = find_projections(model, candidate)
        exact = api._predicted_collapse(model, sites, api._build(sites, candidate))
        fast = api._predicted_collapse(model, sites, api._build(sites, dataclasses.replace(candidate, lam_v=0.0),
                                                                torch.float32))
        assert [r.entropy for r in fast] == pytest.approx([r.entropy for r in exact], abs=0.01)


def _olmo2(first_head_gain: float):
    """One OLMo 2 layer (4 heads of 64, q and k RMS-normalised over the whole width) whose first head's norm
    gains are ``first_head_gain``, as a trained norm's may be."""
    torch.manual_seed(0)
    config = transformers.Olmo2Config(hidden_size=256, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4,
                                      intermediate_size=512, vocab_size=100, eos_token_id=0, pad_token_id=0,
                                      attn_implementation="eager")
    model = transformers.Olmo2ForCausalLM(config).eval()
    attention = model.model.layers[0].self_attn
    with torch.no_grad():
        for norm in (attention.q_norm, attention.k_norm):
            norm.weight[:64] = first_head_gain
    return model


@pytest.mark.parametrize("gain, collapses", [(1.0, False), (4.0, True)])
def test_norms_over_the_whole_width_are_predicted_with_their_own_gains(gain, collapses):
    """OLMo 2 normalises q and k over all heads together, with learned gains. The prediction applies the module's
    own norms (a LayerNorm per head without gains said 3.67 nats for SVD per head at gain 4, and nothing was
    warned while the module's own attention went to 0.24): it agrees with the probabilities the module returns
    for 64 unit-variance tokens, without rotation or mask."""
    model = _olmo2(gain)
    warned = _collapse_warnings(model, speccond.SpectralConfig(correction="svd"))
    attention = model.model.layers[0].self_attn
    tokens = torch.randn(1, 64, 256, generator=torch.Generator().manual_seed(1))
    no_rotation = (torch.ones(1, 64, 64), torch.zeros(1, 64, 64))
    with torch.no_grad():
        _, p = attention(tokens, no_rotation, None)  # p: (1, heads, N, N)
    p = p.double()
    lowest = float(row_entropy(p).mean((0, 2)).min())  # the lowest head's
    assert (lowest < COLLAPSE_NATS) == collapses
    assert len(warned) == int(collapses)
    if collapses:
        assert _entropy(warned[0]) == pytest.approx(lowest, abs=0.1)


def _per_head_normed(family: str, first_head_gain: float):
    """One layer (4 heads of 64) normalising q and k per head in the shape its forward calls the norms: StableLM's
    per-head LayerNorms split the heads off (B, H, N, dh) on dim 1, Cohere's one norm carries gains of shape
    (H, dh) over (B, N, H, dh). The first head's gains are ``first_head_gain``."""
    torch.manual_seed(0)
    common = dict(hidden_size=256, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4,
                  intermediate_size=512, vocab_size=100, eos_token_id=0, pad_token_id=0, bos_token_id=1,
                  attn_implementation="eager")
    if family == "stablelm":
        model = transformers.StableLmForCausalLM(transformers.StableLmConfig(qk_layernorm=True, **common)).eval()
        first = [norm.norms[0].weight for norm in (model.model.layers[0].self_attn.q_layernorm,
                                                   model.model.layers[0].self_attn.k_layernorm)]
    else:
        model = transformers.CohereForCausalLM(transformers.CohereConfig(use_qk_norm=True, **common)).eval()
        first = [norm.weight[0] for norm in (model.model.layers[0].self_attn.q_norm,
                                             model.model.layers[0].self_attn.k_norm)]
    with torch.no_grad():
        for gains in first:
            gains.fill_(first_head_gain)
    return model


@pytest.mark.parametrize("family", ["stablelm", "cohere"])
@pytest.mark.parametrize("gain, collapses", [(1.0, False), (4.0, True)])
def test_norms_per_head_are_called_in_the_shape_the_module_calls_them(family, gain, collapses):
    """apply raised the norms' RuntimeError on StableLM and Cohere: the prediction called a per-head norm on one
    head's (N, dh) or the whole (N, H dh), shapes these two norms do not take. It now calls each norm in the shape
    it accepts, and agrees with the module's own probabilities for 64 unit-variance tokens, without rotation or
    mask, warning exactly when they collapse."""
    model = _per_head_normed(family, gain)
    warned = _collapse_warnings(model, speccond.SpectralConfig(correction="svd"))
    attention = model.model.layers[0].self_attn
    tokens = torch.randn(1, 64, 256, generator=torch.Generator().manual_seed(1))
    cos, sin = model.model.rotary_emb(tokens, torch.arange(64)[None])
    with torch.no_grad():
        _, p = attention(hidden_states=tokens, position_embeddings=(torch.ones_like(cos), torch.zeros_like(sin)),
                         attention_mask=None)  # p: (1, heads, N, N)
    lowest = float(row_entropy(p.double()).mean((0, 2)).min())  # the lowest head's
    assert (lowest < COLLAPSE_NATS) == collapses
    assert len(warned) == int(collapses)
    if collapses:
        assert _entropy(warned[0]) == pytest.approx(lowest, abs=0.1)
