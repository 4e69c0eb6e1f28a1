"""speccond.verify on real transformers models called the way a user calls them.

Each case is a tiny model built from its config (no download), called with the model's own defaults: a
decoder builds its KV cache (use_cache=True), masks carry padding, encoder-decoder models pass their
encoder states to the decoder's cross-attention. verify must pass on every correctly conditioned model,
leave it (and its outputs) as it was, and still catch a wrongly declared grouped-query layout.
"""
from __future__ import annotations

import inspect
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # built from config only: nothing to fetch

import warnings
from dataclasses import dataclass
from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import speccond
from speccond.adapters import attention_modules
from speccond.verify import VerificationError, verify

transformers = pytest.importorskip("transformers")

TOKENS = dict(vocab_size=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
DECODER = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64
)
SEQ2SEQ = dict(
    d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
    encoder_ffn_dim=64, decoder_ffn_dim=64,
)
CONDITIONED = speccond.SpectralConfig(lam=10.0)


@dataclass(frozen=True)
class ModelCase:
    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[], dict]  # keyword inputs, as a user passes them
    cross_attention: bool = False  # the decoder's cross-attention (k, v from the encoder) is probed too
    out_projection: bool = True  # the attention module calls its output projection (observed at its input)
    cache: bool = True  # its default call builds a KV cache (use_cache=True), which verify must not grow


def _ids(length: int = 8) -> torch.Tensor:
    return torch.randint(3, 64, (2, length))  # (B, N), clear of the pad/bos/eos ids


def _padded() -> dict:
    """Two sequences of 8 tokens, the second padded after 6."""
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 6:] = 0
    return {"input_ids": _ids(), "attention_mask": mask}


def _seq2seq() -> dict:
    return {**_padded(), "decoder_input_ids": _ids(5)}


def _whisper_inputs() -> dict:
    # input_features: (B, num_mel_bins, 2 * max_source_positions); the encoder's conv halves the length
    return {"input_features": torch.randn(2, 8, 16), "decoder_input_ids": _ids(5)}


def _llama(kv_heads: int) -> nn.Module:
    return transformers.LlamaModel(transformers.LlamaConfig(**DECODER, num_key_value_heads=kv_heads, **TOKENS))


CASES = [
    ModelCase("llama-gqa", lambda: _llama(2), _padded),
    ModelCase("llama-mqa", lambda: _llama(1), _padded),
    ModelCase(
        "mistral-sliding-window",
        lambda: transformers.MistralModel(
            transformers.MistralConfig(**DECODER, num_key_value_heads=2, sliding_window=4, **TOKENS)
        ),
        _padded,
    ),
    ModelCase(
        "qwen2",
        lambda: transformers.Qwen2Model(transformers.Qwen2Config(**DECODER, num_key_value_heads=2, **TOKENS)),
        _padded,
    ),
    ModelCase(
        "gemma2",
        lambda: transformers.Gemma2Model(
            transformers.Gemma2Config(**DECODER, num_key_value_heads=2, head_dim=8, sliding_window=4, **TOKENS)
        ),
        _padded,
    ),
    ModelCase(
        "gpt2",
        lambda: transformers.GPT2Model(
            transformers.GPT2Config(
                n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=64, bos_token_id=1, eos_token_id=2
            )
        ),
        _padded,
    ),
    ModelCase(
        "opt",
        lambda: transformers.OPTModel(
            transformers.OPTConfig(
                hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64,
                word_embed_proj_dim=32, **TOKENS,
            )
        ),
        _padded,
    ),
    ModelCase(
        "bart",
        lambda: transformers.BartModel(
            transformers.BartConfig(**SEQ2SEQ, max_position_embeddings=64, decoder_start_token_id=2, **TOKENS)
        ),
        _seq2seq,
        cross_attention=True,
    ),
    ModelCase(
        "whisper",
        lambda: transformers.WhisperModel(
            transformers.WhisperConfig(
                **SEQ2SEQ, num_mel_bins=8, max_source_positions=8, max_target_positions=64, decoder_start_token_id=1,
                **TOKENS,
            )
        ),
        _whisper_inputs,
        cross_attention=True,
    ),
    ModelCase(
        "clip-text",
        lambda: transformers.CLIPTextModel(transformers.CLIPTextConfig(**DECODER, **TOKENS)),
        _padded,
        cache=False,
    ),
    ModelCase(
        "bert-padded",
        lambda: transformers.BertModel(
            transformers.BertConfig(
                hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=64, vocab_size=64, pad_token_id=0,
            )
        ),
        _padded,
        out_projection=False,  # BertSelfAttention stops before the output projection (BertSelfOutput)
        cache=False,
    ),
]
PARAMS = [pytest.param(c, id=c.name) for c in CASES] + [
    pytest.param(None, id="t5", marks=pytest.mark.skip(reason="T5Attention is not adapted yet")),
]


def _build(case: ModelCase) -> tuple[nn.Module, dict]:
    torch.manual_seed(0)
    model = case.build().eval()
    torch.manual_seed(1)
    return model, case.inputs()


def _apply(model: nn.Module, config: speccond.SpectralConfig = CONDITIONED, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the adapters' notes (qk-norm, ...) are not under test
        return speccond.apply(model, config, **kwargs)


def _hidden(model: nn.Module, inputs: dict) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs).last_hidden_state  # (B, N, D): the model's default call, cache and all


@pytest.mark.parametrize("case", PARAMS)
def test_verify_passes_with_the_models_defaults_and_changes_nothing(case):
    model, inputs = _build(case)
    _apply(model)
    with torch.no_grad():
        assert (getattr(model(**inputs), "past_key_values", None) is not None) == case.cache
    before = _hidden(model, inputs)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    results = verify(model, **inputs)
    probed = {r.attention for r in results}
    assert probed == {name for name, _, _ in attention_modules(model)}  # every attention module, once
    for result in results:
        assert "correction takes effect" in result.checks
        assert "values linear, queries and keys not" in result.checks
        assert "q/k/v rows of each head pair up" in result.checks, (result.attention, result.skipped)
        assert ("output projection" in result.observed) == case.out_projection, result.observed
    if case.cross_attention:
        assert any(r.attention.endswith("encoder_attn") for r in results)
    assert not model.training
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert torch.equal(_hidden(model, inputs), before)  # the same outputs after verify as before


def test_multi_query_skips_the_crossed_checks_and_says_why():
    model, inputs = _build(CASES[1])
    _apply(model)
    for result in verify(model, **inputs):
        assert "q/k/v rows of each head pair up" in result.checks
        assert any("multi-query" in s for s in result.skipped)
        assert any("one value head" in s for s in result.skipped)


@pytest.mark.parametrize("case", PARAMS)
def test_apply_verify_with_keyword_inputs_keeps_the_model_conditioned(case):
    model, inputs = _build(case)
    report = _apply(model, verify_with=inputs)
    assert speccond.is_conditioned(model) and len(report) > 0


@pytest.mark.parametrize("form", ["tuple", "tensor", "list"])
def test_apply_verify_with_positional_inputs(form):
    model, inputs = _build(CASES[-1])  # BERT: forward(input_ids, attention_mask, ...)
    given = {
        "tuple": (inputs["input_ids"], inputs["attention_mask"]),
        "tensor": inputs["input_ids"],
        "list": [inputs["input_ids"]],
    }[form]
    _apply(model, verify_with=given)
    assert speccond.is_conditioned(model)


def test_a_cache_passed_in_is_not_written_and_a_filled_one_is_refused():
    model, inputs = _build(CASES[0])
    _apply(model)
    # transformers renamed past_key_values to cache (5.x); pass it under the name this version takes
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    cache = transformers.DynamicCache()
    verify(model, **inputs, **{name: cache})
    assert cache.get_seq_length() == 0
    with torch.no_grad():
        filled = model(**inputs).past_key_values  # 8 positions cached
    with pytest.raises(ValueError, match="already holds 8 positions.*starts a sequence"):
        verify(model, input_ids=inputs["input_ids"][:, :1], **{name: filled})
    assert filled.get_seq_length() == 8


def test_swapped_key_and_value_projections_on_a_real_gqa_model_are_caught():
    model, inputs = _build(CASES[0])  # 4 query heads, 2 key/value heads
    layouts = {
        r"k_proj\.weight$": speccond.ProjectionLayout("v", 2),
        r"v_proj\.weight$": speccond.ProjectionLayout("k", 2),
    }
    with pytest.raises(VerificationError, match=r"k_proj\.weight.*act as v.*not linear"):
        _apply(model, speccond.SpectralConfig(lam=10.0, layouts=layouts), verify_with=inputs)
    assert not speccond.is_conditioned(model)


class GroupedQueryAttention(nn.Module):
    """A user's grouped-query attention: one fused Linear, rows [q | k | v] blocked, ``heads`` query heads
    and ``kv_heads`` key/value heads of width dh. Query head h reads key/value head h // (heads / kv_heads)
    (``repeat_interleave``, as transformers does), or h % kv_heads with ``kv_of_query="modulo"``."""

    def __init__(self, dim: int = 32, heads: int = 4, kv_heads: int = 2, kv_of_query: str = "divide") -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.kv_of_query = heads, kv_heads, dim // heads, kv_of_query
        self.qkv = nn.Linear(dim, (heads + 2 * kv_heads) * self.head_dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        dh, g = self.head_dim, self.heads // self.kv_heads
        q, k, v = self.qkv(x).split([self.heads * dh, self.kv_heads * dh, self.kv_heads * dh], dim=-1)
        q = q.reshape(b, n, self.heads, dh).transpose(1, 2)  # (B, H, N, dh)
        k, v = (t.reshape(b, n, self.kv_heads, dh).transpose(1, 2) for t in (k, v))  # each (B, G, N, dh)
        if self.kv_of_query == "divide":
            k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)  # each (B, H, N, dh)
        else:
            k, v = k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1)  # each (B, H, N, dh)
        out = F.scaled_dot_product_attention(q, k, v)  # (B, H, N, dh)
        return self.out(out.transpose(1, 2).reshape(b, n, -1))  # (B, N, D)


def _declared(layout: speccond.ProjectionLayout) -> speccond.SpectralConfig:
    return speccond.SpectralConfig(lam=10.0, layouts={r"qkv\.weight$": layout})


@pytest.mark.parametrize("kv_heads", [2, 1], ids=["gqa", "mqa"])
def test_a_hand_written_gqa_module_declared_right_passes(kv_heads):
    model = GroupedQueryAttention(kv_heads=kv_heads).eval()
    _apply(model, _declared(speccond.ProjectionLayout("qkv", 4, num_kv_heads=kv_heads)))
    (result,) = verify(model, torch.randn(2, 7, 32))
    assert "q/k/v rows of each head pair up" in result.checks
    assert any("multi-query" in s for s in result.skipped) == (kv_heads == 1)


@pytest.mark.parametrize(
    "kv_of_query, layout",
    [
        ("divide", speccond.ProjectionLayout("qkv", 4, num_kv_heads=2, arrangement="grouped")),
        ("modulo", speccond.ProjectionLayout("qkv", 4, num_kv_heads=2)),
        ("divide", speccond.ProjectionLayout("qkv", 8, num_kv_heads=4)),
    ],
    ids=["grouped-instead-of-blocked", "query-heads-read-kv-head-h-mod-g", "head-width-halved"],
)
def test_a_wrong_gqa_declaration_is_caught(kv_of_query, layout):
    model = GroupedQueryAttention(kv_of_query=kv_of_query).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(VerificationError, match=r"qkv\.weight"):
        _apply(model, _declared(layout), verify_with=torch.randn(2, 7, 32))
    assert not speccond.is_conditioned(model)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_a_module_whose_own_code_fails_in_float64_is_refused_in_one_line_and_left_plain():
    """verify probes a float64 copy; XGLM's attention builds float64's minimum into a float32 tensor there, which
    raised transformers' RuntimeError out of apply with no word of what to do."""
    import transformers

    torch.manual_seed(0)
    model = transformers.XGLMModel(transformers.XGLMConfig(
        d_model=32, num_layers=2, attention_heads=2, ffn_dim=64, max_position_embeddings=64, vocab_size=100,
        attn_implementation="eager")).eval()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with pytest.raises(VerificationError, match=r"^layers\.0\.self_attn \(XGLMAttention\): verify runs a float64 copy.*"
                       r"RuntimeError: value cannot be converted.*exclude=\[r\"\^layers\\\.\\d\+\\\.self_attn\$\"\]\)$"):
        speccond.apply(model, speccond.SpectralConfig(correction="svd"), verify_with={"input_ids": torch.randint(3, 60, (2, 8))})
    assert all(torch.equal(tensor, before[name]) for name, tensor in model.state_dict().items())
    assert not speccond.is_conditioned(model)
    speccond.apply(model, speccond.SpectralConfig(correction="svd"))  # without verify_with: the adapter's layout
    assert speccond.is_conditioned(model)
