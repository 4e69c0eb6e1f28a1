"""Diagnostics refuse unrecognised attention: a diagnostic never returns an empty or partial table where there is
attention it does not know; it refuses, naming the modules. Every diagnostic takes the inputs verify takes (a
tensor, a tuple of positional inputs, or a mapping of keyword inputs)."""
from __future__ import annotations

import warnings

import pytest
import torch

from speccond import diagnostics as dx
import speccond
from tests.hidden_attention import Pooled, Router, SdpaMixer, SoftmaxMixer

VOCAB = 64


@pytest.fixture
def without_inference(monkeypatch):
    """MPT's layout is inferred by probing (speccond.adapters.inferred); with inference switched off it stands
    for attention that no adapter recognises and inference cannot decide."""
    from speccond.adapters.inferred import InferredAttentionAdapter

    monkeypatch.setattr(InferredAttentionAdapter, "matches", lambda self, module: False)


def _mpt():
    """MPT: a fused Wqkv no named adapter recognises (transformers 5.24)."""
    import transformers

    config = transformers.MptConfig(d_model=32, n_heads=4, n_layers=2, vocab_size=VOCAB, max_seq_len=64)
    torch.manual_seed(0)
    return transformers.MptModel(config).eval()


def _longt5():
    """LongT5 with transient-global attention: the encoder's attention is unrecognised, the decoder's is
    T5's (recognised), so a table without the refusal would be partial."""
    import transformers

    config = transformers.LongT5Config(
        d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4, vocab_size=VOCAB, local_radius=2,
        global_block_size=4, encoder_attention_type="transient-global", decoder_start_token_id=0,
    )
    torch.manual_seed(0)
    return transformers.LongT5Model(config).eval()


def _ids() -> dict:
    torch.manual_seed(1)
    return {"input_ids": torch.randint(3, VOCAB, (2, 8)), "attention_mask": torch.ones(2, 8, dtype=torch.long)}


@pytest.mark.parametrize("diagnostic", ["attention_entropy", "projection_spectra", "attention_jacobian"])
def test_a_diagnostic_refuses_attention_no_adapter_recognises_naming_it(diagnostic, without_inference):
    model = _mpt()
    call = {
        "attention_entropy": lambda: dx.attention_entropy(model, _ids()),
        "projection_spectra": lambda: dx.projection_spectra(model),
        "attention_jacobian": lambda: dx.attention_jacobian(model, _ids()),
    }[diagnostic]
    with pytest.raises(ValueError, match=r"attention-like modules of MptModel.*blocks\.0\.attn \(MptAttention\)"):
        call()


def test_projection_spectra_refuses_rather_than_leave_out_the_unrecognised_layers(without_inference):
    with pytest.raises(ValueError, match=r"TransientGlobalSelfAttention \(LongT5TransientGlobalAttention\)"):
        dx.projection_spectra(_longt5())


def test_projection_spectra_reads_the_encoder_layer_whose_layout_is_inferred():
    """With one layer, LongT5's transient-global attention holds its own position bias, so inference
    conditions it: the table then has the encoder's layer beside the decoder's, not without it."""
    modules = {row["module"] for row in dx.projection_spectra(_longt5())}
    assert "encoder.block.0.layer.0.TransientGlobalSelfAttention" in modules
    assert "decoder.block.0.layer.0.SelfAttention" in modules


def test_projection_spectra_reads_the_unrecognised_layers_once_their_layouts_are_declared():
    layout = speccond.ProjectionLayout("qkv", 4)  # MptAttention: Wqkv(x).chunk(3): blocked
    config = speccond.SpectralConfig(lam=10.0, layouts={r"^blocks\.\d+\.attn\.Wqkv\.weight$": layout})
    rows = dx.projection_spectra(_mpt(), config, per_head=False)
    assert {(r["module"], r["projection"]) for r in rows} == {(f"blocks.{i}.attn", p) for i in range(2) for p in "qkv"}


def test_every_diagnostic_takes_keyword_inputs_as_verify_does():
    """attention_entropy(model, {"input_ids": ..., "attention_mask": ...}) failed inside the model
    (embedding() got the dict); the mapping is keyword inputs, as for verify."""
    import transformers

    config = transformers.LlamaConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
        vocab_size=VOCAB, pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )
    torch.manual_seed(0)
    model = transformers.LlamaModel(config).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        speccond.apply(model, speccond.SpectralConfig(lam=10.0))
    inputs = _ids()
    inputs["attention_mask"][1, -2:] = 0
    assert speccond.verify(model, **inputs)
    by_mapping = dx.attention_entropy(model, inputs)
    by_tuple = dx.attention_entropy(model, (inputs["input_ids"], inputs["attention_mask"]))
    assert [r["entropy"] for r in by_mapping] == [r["entropy"] for r in by_tuple] and len(by_mapping) == 4
    assert dx.attention_jacobian(model, inputs, method="exact")[0]["kappa"] > 1
    assert dx.theorem_bound(model, inputs)[0]["layer"] == 0


@pytest.mark.parametrize("model", [
    pytest.param(lambda: torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU()), id="no-attention"),
    pytest.param(lambda: torch.nn.Sequential(SdpaMixer(), SdpaMixer()), id="attention-nothing-finds"),
])
@pytest.mark.parametrize("diagnostic", ["attention_entropy", "projection_spectra", "attention_jacobian"])
def test_a_diagnostic_refuses_a_model_in_which_it_finds_no_attention_layer(diagnostic, model):
    model, x = model().eval(), torch.randn(2, 5, 32)
    call = {
        "attention_entropy": lambda: dx.attention_entropy(model, x),
        "projection_spectra": lambda: dx.projection_spectra(model),
        "attention_jacobian": lambda: dx.attention_jacobian(model, x),
    }[diagnostic]
    with pytest.raises(ValueError, match="found no attention layer in Sequential .*what it reports would be empty"):
        call()  # before: an empty table, which reads as "nothing to measure"


# -- attention that runs where no found layer is running (diagnostics/census.py) -----------------------------------
def _vit_with(pool: torch.nn.Module) -> Pooled:
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2, num_classes=3)
    return Pooled(vit, pool).eval()


@pytest.mark.parametrize("extra, where", [
    (lambda: SdpaMixer(192, 3), r"pool \(SdpaMixer, 1 call\)"),
    (lambda: SoftmaxMixer(192, 3), r"pool \(SoftmaxMixer, 1 call\)"),
])
@pytest.mark.parametrize("diagnostic", ["attention_entropy", "attention_jacobian"])
def test_a_diagnostic_refuses_attention_that_runs_outside_every_layer_it_found(diagnostic, extra, where):
    model, images = _vit_with(extra()), torch.randn(2, 3, 32, 32)
    assert len(dx.projection_spectra(model)) > 0  # structure finds the ViT's layers, not the pool's attention
    call = {"attention_entropy": lambda: dx.attention_entropy(model, images),
            "attention_jacobian": lambda: dx.attention_jacobian(model, images)}[diagnostic]
    with pytest.raises(ValueError, match=f"attention ran in {where} of Pooled, outside every attention layer"):
        call()  # before: the ViT's rows alone, the pool's attention left out without a word
    assert not torch.nn.modules.module._global_forward_pre_hooks  # the watch's hooks are gone
    assert not torch.nn.modules.module._global_forward_hooks


def test_a_softmax_that_is_not_attention_is_not_counted():
    model, images = _vit_with(Router()), torch.randn(2, 3, 32, 32)
    rows = dx.attention_entropy(model, images)
    assert {row["layer"] for row in rows} == {0, 1} and len(rows) == 6  # the ViT's 2 layers of 3 heads
