"""The adapters: every architecture of the paper (and the wider ecosystem) in one call.

Table-driven over tiny real models built from config (tests/adapter_models.py): timm ViT, DeiT, Swin,
XCiT, DaViT and a ViT with attention pooling; Hugging Face BERT, Nystromformer, RoBERTa, ViT,
DistilBERT and GPT-2; nn.TransformerEncoder. Each case lists by hand the projection weights the adapters
must find and their layouts. Equivalences are checked in float64 (see the ``float64_default`` fixture).
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import re
import warnings
from typing import Optional

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import speccond
from tests.adapter_models import CASE_IDS, CASES, case
from tests.conftest import assert_close
from tests.models import Case, expected_identity, plain_at, reference_at_w_plus_c
from tests.models import build_case as _build
from tests.models import case_inputs as _inputs

LAM = {"q": 10.0, "k": 10.0, "v": 10.0}
pytestmark = pytest.mark.usefixtures("float64_default")
ACTIVATION_CASES = [c for c in CASES if c.activation_ok]
WEIGHT_ONLY_CASES = [c for c in CASES if not c.activation_ok]


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models gain nothing from threads. With 2 threads on this 2-core machine, every parallel op
    waits for a busy core: a float64 depthwise conv (DaViT, XCiT) was seen to take 0.25 s, against 0.2 ms
    with one thread, and this file ran 10x slower."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _config(case: Case, **fields) -> speccond.SpectralConfig:
    return speccond.SpectralConfig(**{"lam": 10.0, **case.config, **fields})


def _stored(model: nn.Module, case: Case) -> dict[str, torch.Tensor]:
    return {name: model.get_parameter(name).detach().clone() for name in case.params}


def _reference(model: nn.Module, case: Case) -> nn.Module:
    """A plain copy of ``model`` with every listed weight set to W + C by hand."""
    return reference_at_w_plus_c(model, case.params, LAM)


def _skip_refused(case: Case, backend: str) -> None:
    if backend == "activation" and not case.activation_ok:
        pytest.skip("activation backend refused for this module (tested below)")


def _quiet_apply(model: nn.Module, config: speccond.SpectralConfig) -> speccond.SpectralReport:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # notes (XCiT) are tested on their own below
        return speccond.apply(model, config)


def _run(model: nn.Module, inputs: tuple) -> torch.Tensor:
    with torch.no_grad():
        return model(*inputs)


# 1. all lam = 0 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_all_lam_zero_leaves_outputs_bit_for_bit(case):
    model, inputs = _build(case), _inputs(case)
    expected = _run(model, inputs)
    report = speccond.apply(model, _config(case, lam=0.0))
    assert len(report) == 0 and not speccond.is_conditioned(model)
    assert torch.equal(_run(model, inputs), expected)


# 2. found where expected, W + C per block, and the same function as a plain model at W + C ----------------
@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_adapters_find_exactly_the_listed_projections_and_add_lam_identity_per_block(case, backend):
    _skip_refused(case, backend)
    model = _build(case)
    before = _stored(model, case)
    report = _quiet_apply(model, _config(case, backend=backend))
    found = {a.qualified_name: a for a in speccond.core.backends.attachments(model)}
    assert set(found) == set(case.params)  # nothing missed, nothing extra (output projections stay plain)
    assert len(report) == sum(len(layout.roles) for layout in case.params.values())
    for name, layout in case.params.items():
        correction = found[name].correction
        assert (correction.layout.roles, correction.layout.storage) == (layout.roles, layout.storage), name
        assert correction.layout.num_heads == layout.num_heads, name
        eff = found[name].effective_weight().detach()
        assert torch.equal(eff - before[name], expected_identity(before[name], layout, LAM)), name


@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_output_equals_plain_model_evaluated_at_w_plus_c(case, backend):
    _skip_refused(case, backend)
    model, inputs = _build(case), _inputs(case)
    reference = _reference(model, case)
    _quiet_apply(model, _config(case, backend=backend))
    assert_close(_run(model, inputs), _run(reference, inputs))


def test_swin_window_attention_by_hand_with_rectangular_blocks():
    """attn_dim = 2 heads x 16 = 32 while dim = 24: each q/k/v block is (32, 24) and gets 10 * eye(32, 24)."""
    from timm.models.swin_transformer import WindowAttention

    torch.manual_seed(0)
    attn = WindowAttention(dim=24, num_heads=2, head_dim=16, window_size=2).eval()
    x = torch.randn(3, 4, 24)  # (B * windows, N, D)
    w, b = attn.qkv.weight.detach().clone(), attn.qkv.bias.detach()  # (96, 24), (96,)
    speccond.apply(attn, speccond.SpectralConfig(lam=10.0))

    w_eff = w + torch.cat([10.0 * torch.eye(32, 24)] * 3)  # (96, 24)
    q, k, v = (x @ w_eff.T + b).reshape(3, 4, 3, 2, 16).permute(2, 0, 3, 1, 4)  # each (B, H, N, dh)
    logits = q @ k.transpose(-2, -1) * 16**-0.5 + attn._get_rel_pos_bias()  # (B, H, N, N)
    expected = attn.proj((logits.softmax(-1) @ v).transpose(1, 2).reshape(3, 4, 32))  # (B, N, D)
    assert_close(_run(attn, (x,)), expected)


def test_xcit_xca_by_hand():
    """Channel attention: per head q, k are (dh, N), L2-normalised over tokens, logits times temperature."""
    from timm.models.xcit import XCA

    torch.manual_seed(0)
    attn = XCA(dim=32, num_heads=4, qkv_bias=True).eval()
    with torch.no_grad():
        attn.temperature.copy_(torch.linspace(0.5, 2.0, 4).view(4, 1, 1))
    x = torch.randn(2, 9, 32)  # (B, N, D)
    w, b = attn.qkv.weight.detach().clone(), attn.qkv.bias.detach()
    with pytest.warns(UserWarning, match="XCA L2-normalises"):
        speccond.apply(attn, speccond.SpectralConfig(lam=10.0))

    w_eff = w + torch.cat([10.0 * torch.eye(32)] * 3)  # (96, 32)
    q, k, v = (x @ w_eff.T + b).reshape(2, 9, 3, 4, 8).permute(2, 0, 3, 4, 1)  # each (B, H, dh, N)
    q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    probs = (q @ k.transpose(-2, -1) * attn.temperature).softmax(-1)  # (B, H, dh, dh)
    expected = attn.proj((probs @ v).permute(0, 3, 1, 2).reshape(2, 9, 32))  # (B, N, D)
    assert_close(_run(attn, (x,)), expected)


def test_davit_channel_attention_by_hand():
    """DaViT v1 mixes q with softmax(k^T v): timm's q block is the one being mixed (docs/THEORY.md's V role)."""
    from timm.models.davit import ChannelAttention

    torch.manual_seed(0)
    attn = ChannelAttention(dim=16, num_heads=2, qkv_bias=True).eval()
    x = torch.randn(2, 5, 16)  # (B, N, D)
    w, b = attn.qkv.weight.detach().clone(), attn.qkv.bias.detach()
    speccond.apply(attn, speccond.SpectralConfig(lam=10.0, lam_k=3.0, lam_v=0.0))

    w_eff = w + torch.cat([10.0 * torch.eye(16), 3.0 * torch.eye(16), torch.zeros(16, 16)])  # (48, 16)
    q, k, v = (x @ w_eff.T + b).reshape(2, 5, 3, 2, 8).permute(2, 0, 3, 1, 4)  # each (B, H, N, dh)
    probs = ((k * 8**-0.5).transpose(-1, -2) @ v).softmax(-1)  # (B, H, dh, dh)
    mixed = (probs @ q.transpose(-1, -2)).transpose(-1, -2)  # (B, H, N, dh)
    expected = attn.proj(mixed.transpose(1, 2).reshape(2, 5, 16))
    assert_close(_run(attn, (x,)), expected)


def test_gpt2_cross_attention_by_hand():
    """Cross-attention GPT2Attention: q_attn (D, D) is q, c_attn (D, 2D) holds k | v, both Conv1D (in, out)."""
    import transformers
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    config = transformers.GPT2Config(n_embd=16, n_head=2, attn_pdrop=0.0, resid_pdrop=0.0)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    attn = GPT2Attention(config, is_cross_attention=True, layer_idx=0).eval()
    x, memory = torch.randn(2, 3, 16), torch.randn(2, 5, 16)  # (B, N, D), (B, M, D)
    wq, bq = attn.q_attn.weight.detach().clone(), attn.q_attn.bias.detach()  # (16, 16)
    wkv, bkv = attn.c_attn.weight.detach().clone(), attn.c_attn.bias.detach()  # (16, 32) = (in, out)
    report = speccond.apply(attn, speccond.SpectralConfig(lam=10.0, lam_k=2.5))
    assert [(r.module, r.role) for r in report] == [("c_attn", "k"), ("c_attn", "v"), ("q_attn", "q")]

    q = x @ (wq + 10.0 * torch.eye(16)) + bq  # (B, N, D)
    k, v = (memory @ (wkv + torch.cat([2.5 * torch.eye(16), 10.0 * torch.eye(16)], dim=1)) + bkv).split(16, -1)
    heads = lambda t: t.reshape(2, -1, 2, 8).transpose(1, 2)  # noqa: E731  (B, H, *, dh)
    probs = (heads(q) @ heads(k).transpose(-2, -1) * 8**-0.5).softmax(-1)  # (B, H, N, M)
    expected = attn.c_proj((probs @ heads(v)).transpose(1, 2).reshape(2, 3, 16))
    with torch.no_grad():
        assert_close(attn(x, encoder_hidden_states=memory)[0], expected)


# 3. preserve ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_preserve_leaves_outputs_unchanged_at_attach_time(case, backend):
    _skip_refused(case, backend)
    model, inputs = _build(case), _inputs(case)
    expected = _run(model, inputs)
    _quiet_apply(model, _config(case, init="preserve", backend=backend))
    assert_close(_run(model, inputs), expected)  # (W - C) + C: equal up to an ulp of lam


# 4. remove ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_remove_merge_keeps_outputs_and_unmerge_restores_weights(case, backend):
    _skip_refused(case, backend)
    model, inputs = _build(case), _inputs(case)
    weights = _stored(model, case)
    classes = [type(m) for m in model.modules()]
    keys = set(model.state_dict())
    _quiet_apply(model, _config(case, backend=backend))
    conditioned = _run(model, inputs)

    merged = speccond.remove(copy.deepcopy(model), merge=True)
    assert [type(m) for m in merged.modules()] == classes and set(merged.state_dict()) == keys
    assert_close(_run(merged, inputs), conditioned)

    speccond.remove(model, merge=False)
    assert [type(m) for m in model.modules()] == classes
    assert all(torch.equal(model.get_parameter(n), w) for n, w in weights.items())


# 5. parameters and gradients --------------------------------------------------------------------------------
def _grads(model: nn.Module, inputs: tuple, names: dict[int, str]) -> dict[str, torch.Tensor | None]:
    """Gradient of each parameter, keyed by its name in the vanilla model."""
    model.zero_grad(set_to_none=True)
    model(*inputs).square().mean().backward()
    return {names[id(p)]: p.grad for p in model.parameters()}


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_parameter_count_unchanged_and_every_parameter_gets_a_gradient(case):
    """The HF wrappers feed the pooler into the output, so every parameter of every case is reached."""
    model, inputs = _build(case), _inputs(case)
    names = {id(p): n for n, p in model.named_parameters()}
    count = sum(p.numel() for p in model.parameters())
    _quiet_apply(model, _config(case))

    assert sum(p.numel() for p in model.parameters()) == count
    assert {id(p) for p in model.parameters()} == set(names)  # the same Parameter objects
    assert all(not b.requires_grad for b in model.buffers())
    grads = _grads(model, inputs, names)
    assert [n for n, g in grads.items() if g is None] == []
    assert all(torch.isfinite(g).all() for g in grads.values()), case.name


# 6. state_dict round trip ----------------------------------------------------------------------------------
@pytest.mark.parametrize("correction", ["identity", "svd"])
@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_state_dict_reloads_into_a_freshly_conditioned_model(case, backend, correction):
    _skip_refused(case, backend)
    config = _config(case, backend=backend, correction=correction)
    trained = _build(case)
    _quiet_apply(trained, config)
    optimizer = torch.optim.SGD(trained.parameters(), lr=0.1)
    trained(*_inputs(case)).square().mean().backward()
    optimizer.step()  # the weights move, so a freshly computed SVD correction would differ from the saved one
    fresh = _build(case, seed=123)
    _quiet_apply(fresh, config)
    fresh.load_state_dict(trained.state_dict())
    inputs = _inputs(case)
    assert torch.equal(_run(fresh, inputs), _run(trained, inputs))


# 7. backends ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ACTIVATION_CASES, ids=[c.name for c in ACTIVATION_CASES])
def test_weight_and_activation_backends_agree_on_outputs_and_gradients(case):
    inputs = _inputs(case)
    outputs, grads = {}, {}
    for backend in ("weight", "activation"):
        model = _build(case)
        names = {id(p): n for n, p in model.named_parameters()}
        _quiet_apply(model, _config(case, backend=backend))
        outputs[backend] = _run(model, inputs)
        grads[backend] = _grads(model, inputs, names)
    assert_close(outputs["activation"], outputs["weight"])
    assert grads["weight"].keys() == grads["activation"].keys()
    for name, grad in grads["weight"].items():
        if grad is None:
            assert grads["activation"][name] is None, name
        else:
            assert_close(grads["activation"][name], grad)


@pytest.mark.parametrize("case", WEIGHT_ONLY_CASES, ids=[c.name for c in WEIGHT_ONLY_CASES])
def test_activation_backend_is_refused_where_the_weight_is_read_directly(case):
    model = _build(case)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"read directly.*backend='weight'"):
        speccond.apply(model, _config(case, backend="activation"))
    assert not speccond.is_conditioned(model)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


# notes ------------------------------------------------------------------------------------------------------
def test_xcit_normalisation_is_reported_and_warned_only_for_xca():
    model = _build(case("timm-xcit"))
    expected = r"blocks\.0\.attn\.qkv\.weight: XCA L2-normalises.*magnitude of the Q/K correction"
    with pytest.warns(UserWarning, match=expected):
        report = speccond.apply(model, speccond.SpectralConfig(lam=10.0))
    noted = {row.module for row in report if row.notes}
    assert noted == {"blocks.0.attn.qkv"}  # ClassAttn has no normalisation
    assert "note: XCA L2-normalises" in str(report)


# 8. unrecognised attention -----------------------------------------------------------------------------------
class HandWrittenAttention(nn.Module):
    """A user's attention no adapter knows: fused to_qkv (blocks q, k, v, heads contiguous)."""

    def __init__(self, dim: int = 16, num_heads: int = 4) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.to_qkv = nn.Linear(dim, 3 * dim)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.to_qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (B, H, N, dh)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])  # (B, H, N, dh)
        return self.to_out(out.transpose(1, 2).reshape(b, n, d))


class SeparateProjections(nn.Module):
    """No "Attention" in the class name, but q, k, v Linears: still looks like attention."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.wq, self.wk, self.wv = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(self.wq(x), self.wk(x), self.wv(x), attn_mask=keep[:, None, :])


class Layer(nn.Module):
    """Attention then an MLP. The attention modules above need the key mask ``keep`` (B, N), which a
    synthetic call cannot make, so speccond cannot probe them to infer their layout
    (speccond.adapters.inferred): they reach the unrecognised-attention error these tests are about."""

    def __init__(self, attn: nn.Module) -> None:
        super().__init__()
        self.attn, self.mlp = attn, nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(x, torch.ones(x.shape[:2], dtype=torch.bool))
        return x + self.mlp(x)


def _declaration(message: str) -> speccond.SpectralConfig:
    """Evaluate the ``SpectralConfig(layouts={...})`` the error message shows, exactly as printed, with the
    identity correction at lam = 10 (what these tests build by hand; the message declares the layouts alone)."""
    text = re.search(r"SpectralConfig\(layouts=\{.*?\n\s*\}\)", message, re.S).group(0)
    identity = functools.partial(speccond.SpectralConfig, lam=10.0)
    return eval(text, {"SpectralConfig": identity, "ProjectionLayout": speccond.ProjectionLayout})


def _filled(message: str, **fields: str) -> str:
    """The message with each ``<...>`` placeholder of ``fields`` filled in as a user would, from the forward."""
    for name, value in fields.items():
        message = re.sub(rf"{name}=<[^>]*>", f"{name}={value}", message)
    return message


def test_unrecognised_attention_is_named_and_the_declaration_shown_conditions_it():
    torch.manual_seed(0)
    model = nn.Sequential(Layer(HandWrittenAttention()), Layer(HandWrittenAttention()))
    x = torch.randn(2, 5, 16)
    with pytest.raises(ValueError) as error:
        speccond.apply(model, speccond.SpectralConfig(lam=10.0))
    message = str(error.value)
    assert "0.attn (tests.test_adapters.HandWrittenAttention): 0.attn.to_qkv.weight (48, 16)" in message
    assert "1.attn (tests.test_adapters.HandWrittenAttention)" in message
    # a fused weight's arrangement cannot be read off its shape: a placeholder, not a guess
    declared = r'r"^\d+\.attn\.to_qkv\.weight$": ProjectionLayout(roles="qkv", num_heads=4, '
    assert declared + 'arrangement=<"blocked" | "per_head">),' in message
    assert "how does the forward split the output of to_qkv?" in message
    assert r'exclude=[r"^\d+\.attn$"]' in message
    assert not speccond.is_conditioned(model)  # raised before anything was attached
    with pytest.raises(SyntaxError):
        _declaration(message)  # pasted unchanged, it cannot condition anything

    config = _declaration(_filled(message, arrangement='"blocked"'))  # its forward: reshape(b, n, 3, H, dh)
    weights = {f"{i}.attn.to_qkv.weight": model[i].attn.to_qkv.weight.detach().clone() for i in range(2)}
    layout = speccond.ProjectionLayout("qkv", 4)
    reference = plain_at(model, {n: w + expected_identity(w, layout, LAM) for n, w in weights.items()})
    report = speccond.apply(model, config)
    assert {row.module for row in report} == {"0.attn.to_qkv", "1.attn.to_qkv"}
    assert_close(_run(model, (x,)), _run(reference, (x,)))


def _pvt_v2():
    """transformers' PvtV2: stage 0 (1 head, spatially reduced keys) is not inferred, stage 1 (2 heads) is."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.PvtV2Config(image_size=32, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                                      hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2],
                                      num_attention_heads=[1, 2], mlp_ratios=[2, 2])
    return transformers.PvtV2Model(config).eval()


def test_a_declaration_pasted_from_the_message_reaches_no_module_beyond_those_it_lists():
    """Generalising every index, the pattern for stage 0's query also matched stage 1's, which the inferred adapter
    conditions with 2 heads; declared layouts come first, so the pasted line re-declared it with 1 head (lam="auto":
    one lam for the block where there is one per head). So did the exclude it offers."""
    model = _pvt_v2()
    with pytest.raises(ValueError) as error:
        speccond.apply(model, speccond.SpectralConfig(lam="auto"))
    message = str(error.value)
    assert r'r"^encoder\.layers\.0\.blocks\.0\.attention\.query\.weight$": ProjectionLayout(roles="q", num_heads=1),' in message
    assert r'exclude=[r"^encoder\.layers\.0\.blocks\.0\.attention$"]' in message
    inferred = _pvt_v2()
    speccond.apply(inferred, speccond.SpectralConfig(lam="auto", exclude=[r"^encoder\.layers\.0\."]))
    pasted = _pvt_v2()
    images = torch.randn(2, 3, 32, 32)
    speccond.apply(pasted, dataclasses.replace(_declaration(message), lam="auto"), verify_with={"pixel_values": images})

    def stage_1(model):
        return {(row.module, row.role): (row.heads, row.head_lams) for row in speccond.describe(model).rows
                if row.module.startswith("encoder.layers.1.")}

    assert stage_1(pasted) == stage_1(inferred) and stage_1(pasted)[("encoder.layers.1.blocks.0.attention.query", "q")][0] == 2


def test_a_model_conditioned_through_declared_layouts_is_described_without_passing_them_again():
    """The spectra (and the monitor) found no attention layer in a model whose every correction came from a
    declared layout unless that config was passed again, and said there was "no attached correction"."""
    torch.manual_seed(0)
    model = nn.Sequential(Layer(HandWrittenAttention()), Layer(HandWrittenAttention()))
    layouts = {r"^\d+\.attn\.to_qkv\.weight$": speccond.ProjectionLayout("qkv", 4)}
    speccond.apply(model, speccond.SpectralConfig(lam=3.0, layouts=layouts))
    rows = speccond.diagnostics.projection_spectra(model, per_head=False)
    again = speccond.diagnostics.projection_spectra(model, speccond.SpectralConfig(lam=10.0, layouts=layouts), per_head=False)
    assert [(row["module"], row["projection"], row["kappa"]) for row in rows] == [
        (row["module"], row["projection"], row["kappa"]) for row in again]
    assert {(row["module"], row["projection"]) for row in rows} == {(f"{i}.attn", role) for i in range(2) for role in "qkv"}
    left = speccond.diagnostics.projection_spectra(model, speccond.SpectralConfig(lam=10.0, exclude=[r"^1\.attn$"]), per_head=False)
    assert {row["module"] for row in left} == {"0.attn"}  # an anchored exclude of the attention leaves its projections out


def test_unrecognised_separate_projections_without_attention_in_the_class_name():
    model = Layer(SeparateProjections())
    # no head count on the module: a placeholder, never a guessed num_heads=1 that pastes and conditions
    # every row as one head
    with pytest.raises(ValueError, match=r"(?s)attn \(tests.test_adapters.SeparateProjections\).*"
                       r'"\^attn\\.wq\\.weight\$": ProjectionLayout\(roles="q", num_heads=<heads>\),.*'
                       r"num_heads: the module keeps no head count"):
        speccond.apply(model, speccond.SpectralConfig(lam=10.0))


def test_excluded_unrecognised_attention_is_not_an_error():
    model = nn.ModuleDict({"vit": _build(case("timm-vit")), "extra": HandWrittenAttention()})
    with pytest.raises(ValueError, match=r"extra \(tests.test_adapters.HandWrittenAttention\)"):
        speccond.apply(model, speccond.SpectralConfig(lam=10.0))
    report = speccond.apply(model, speccond.SpectralConfig(lam=10.0, exclude=r"^extra$"))
    assert {row.module for row in report} == {f"vit.blocks.{i}.attn.qkv" for i in range(2)}
    assert not hasattr(model["extra"].to_qkv, "parametrizations")


@pytest.mark.parametrize("model", [
    pytest.param(lambda: nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)), id="mlp"),
    pytest.param(lambda: nn.ModuleDict({"value": nn.Linear(8, 1), "policy": nn.Linear(8, 4)}), id="value-head"),
])
def test_modules_that_do_not_look_like_attention_are_not_flagged(model):
    from speccond.adapters import unrecognised_attention

    assert unrecognised_attention(model(), speccond.SpectralConfig(lam=10.0)) == []


def test_containers_of_recognised_attention_are_not_flagged():
    """HF BertAttention holds BertSelfAttention + output; timm Block holds .attn: neither is flagged."""
    from speccond.adapters import find_projections, unrecognised_attention

    for name in ("hf-bert", "timm-swin", "hf-gpt2"):
        model, config = _build(case(name)), speccond.SpectralConfig(lam=10.0)
        assert unrecognised_attention(model, config, find_projections(model, config)) == [], name


# 8. verify ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_verify_passes_on_every_architecture(case, backend):
    """The probe confirms each adapter's layout against what the module computes (mis-declared layouts
    failing it: tests/test_verify.py)."""
    _skip_refused(case, backend)
    model = _build(case)
    _quiet_apply(model, _config(case, backend=backend))
    results = speccond.verify(model, *_inputs(case))
    assert {name for r in results for name in r.parameters} == set(case.params)
    for result in results:
        assert "correction takes effect" in result.checks
        if not any("signatures" in s for s in result.skipped):
            assert "values linear, queries and keys not" in result.checks, result


# 9. the unrecognised-attention message never prints a wrong declaration -------------------------------------
class PerHeadAttention(nn.Module):
    """A fused qkv whose rows are laid out per head: (H, 3, dh), as GPT-NeoX and BLOOM do."""

    def __init__(self, dim: int = 16, num_heads: int = 4) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, self.num_heads, 3, self.head_dim).unbind(3)  # (B, N, H, dh) each
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             attn_mask=keep[:, None, None, :])  # (B, H, N, dh)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class GroupedQueryFused(nn.Module):
    """A fused qkv with 4 query heads and 2 key/value heads: rows [q: 4 dh | k: 2 dh | v: 2 dh] (Phi-3)."""

    def __init__(self, dim: int = 16, num_heads: int = 4, kv_heads: int = 2, head_dim: Optional[int] = 4) -> None:
        super().__init__()
        self.num_heads, self.kv_heads = num_heads, kv_heads
        if head_dim is not None:
            self.head_dim = head_dim
        self.dh = dim // num_heads
        self.qkv = nn.Linear(dim, (num_heads + 2 * kv_heads) * self.dh)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).split([self.num_heads * self.dh, self.kv_heads * self.dh, self.kv_heads * self.dh], -1)
        q = q.view(b, n, self.num_heads, self.dh).transpose(1, 2)  # (B, H, N, dh)
        k, v = (t.view(b, n, self.kv_heads, self.dh).transpose(1, 2) for t in (k, v))  # (B, G, N, dh)
        out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True, attn_mask=keep[:, None, None, :])  # (B, H, N, dh)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class GroupedQuerySeparate(nn.Module):
    """Separate q, k, v Linears, k and v half as wide as q (2 key/value heads for 4 query heads), no head_dim."""

    def __init__(self, dim: int = 16, num_heads: int = 4) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(dim, dim), nn.Linear(dim, dim // 2), nn.Linear(dim, dim // 2)
        self.o_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q = self.q_proj(x).view(b, n, self.num_heads, -1).transpose(1, 2)  # (B, H, N, dh)
        k, v = (p(x).view(b, n, self.num_heads // 2, -1).transpose(1, 2) for p in (self.k_proj, self.v_proj))
        out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True, attn_mask=keep[:, None, None, :])  # (B, H, N, dh)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, d))


def _message(module: nn.Module) -> str:
    with pytest.raises(ValueError) as error:
        speccond.apply(Layer(module), speccond.SpectralConfig(lam=10.0))
    return str(error.value)


def test_unrecognised_per_head_fused_weight_gets_no_blocked_declaration():
    """The old message printed arrangement "blocked" (accepted, and wrong rows corrected) for a per-head
    weight; now the arrangement is a placeholder with how to read it, and the declaration the forward
    gives (per_head) conditions the module exactly, as verify confirms."""
    torch.manual_seed(0)
    model, x = Layer(PerHeadAttention()), torch.randn(2, 5, 16)
    message = _message(PerHeadAttention())
    assert 'ProjectionLayout(roles="qkv", num_heads=4, arrangement=<"blocked" | "per_head">)' in message
    assert '.view(B, N, H, 3, dh), or .view(B, N, H, 3 dh).chunk(3)) -> "per_head"' in message
    assert "speccond.verify(model, inputs)" in message
    with pytest.raises(SyntaxError):
        _declaration(message)

    weight = model.attn.qkv.weight.detach().clone()
    layout = speccond.ProjectionLayout("qkv", 4, arrangement="per_head")
    reference = plain_at(model, {"attn.qkv.weight": weight + expected_identity(weight, layout, LAM)})
    _quiet_apply(model, _declaration(_filled(message, arrangement='"per_head"')))
    assert_close(_run(model, (x,)), _run(reference, (x,)))
    assert all("correction takes effect" in r.checks for r in speccond.verify(model, x))

    blocked = Layer(PerHeadAttention())  # what the old message printed: verify catches it
    _quiet_apply(blocked, _declaration(_filled(message, arrangement='"blocked"')))
    with pytest.raises(speccond.VerificationError):
        speccond.verify(blocked, x)


def test_unrecognised_grouped_query_fused_weight_names_its_kv_heads():
    """Unequal blocks: with a head width the module states, num_kv_heads is read off the weight and the
    arrangement choices are blocked or grouped (per_head needs equal heads); filled in as its forward
    splits (blocked), the declaration conditions each block with its own rectangular identity."""
    torch.manual_seed(0)
    model, x = Layer(GroupedQueryFused()), torch.randn(2, 5, 16)
    message = _message(GroupedQueryFused())
    assert 'ProjectionLayout(roles="qkv", num_heads=4, num_kv_heads=2, arrangement=<"blocked" | "grouped">)' in message
    assert "do not divide" not in message
    weight = model.attn.qkv.weight.detach().clone()
    layout = speccond.ProjectionLayout("qkv", 4, num_kv_heads=2)
    reference = plain_at(model, {"attn.qkv.weight": weight + expected_identity(weight, layout, LAM)})
    _quiet_apply(model, _declaration(_filled(message, arrangement='"blocked"')))
    assert_close(_run(model, (x,)), _run(reference, (x,)))


def test_unrecognised_fused_weight_without_a_head_width_asks_for_the_kv_heads():
    """32 output features over 4 heads could be 4 x (8/3) nothing, or q 4 x 4 plus k, v 2 x 4: without a
    head width the message does not guess; it says what the widths are made of."""
    message = _message(GroupedQueryFused(head_dim=None))
    assert 'num_kv_heads=<kv heads>, arrangement=<"blocked" | "per_head" | "grouped">' in message
    assert "q = 4 heads x dh plus k, v = num_kv_heads x dh each" in message
    with pytest.raises(SyntaxError):
        _declaration(message)


def test_unrecognised_separate_grouped_query_projections_get_a_complete_declaration():
    """Separate q, k, v: everything follows from the module (k and v heads = their width over q's head
    width), so the declaration is printed complete, and pasted unchanged it conditions the module exactly."""
    torch.manual_seed(0)
    model, x = Layer(GroupedQuerySeparate()), torch.randn(2, 5, 16)
    message = _message(GroupedQuerySeparate())
    assert 'r"^attn\\.q_proj\\.weight$": ProjectionLayout(roles="q", num_heads=4),' in message
    assert 'r"^attn\\.k_proj\\.weight$": ProjectionLayout(roles="k", num_heads=2),' in message
    assert 'r"^attn\\.v_proj\\.weight$": ProjectionLayout(roles="v", num_heads=2),' in message
    assert "<" not in message.split("SpectralConfig(layouts={")[1].split("})")[0]  # no placeholder
    heads = (("q_proj", "q", 4), ("k_proj", "k", 2), ("v_proj", "v", 2))
    layouts = {f"attn.{n}.weight": speccond.ProjectionLayout(r, h) for n, r, h in heads}
    reference = reference_at_w_plus_c(model, layouts, LAM)
    report = _quiet_apply(model, _declaration(message))
    assert {row.module for row in report} == {"attn.q_proj", "attn.k_proj", "attn.v_proj"}
    found = {a.qualified_name: a.correction.layout for a in speccond.core.backends.attachments(model)}
    assert found == layouts
    assert_close(_run(model, (x,)), _run(reference, (x,)))


def test_attention_whose_q_and_k_are_formed_from_unreadable_projections_is_offered_no_values_only_declaration():
    """Conditional DETR's decoder forms q from q_content_proj + q_pos_proj and k likewise: the message offered a
    declaration of v_proj alone, which apply and verify accepted, conditioning W_V and leaving W_Q, W_K plain."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    backbone = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], out_features=["stage2"],
                                         layer_type="basic")
    config = transformers.ConditionalDetrConfig(
        use_timm_backbone=False, use_pretrained_backbone=False, backbone_config=backbone, num_queries=4,
        encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
        decoder_ffn_dim=64, d_model=32,
    )
    model = transformers.ConditionalDetrModel(config).eval()
    with pytest.raises(ValueError) as error:
        speccond.apply(model, speccond.SpectralConfig(lam=3.0))
    message = str(error.value)
    assert 'self_attn$" cannot be declared' in message and "q_content_proj, q_pos_proj, k_content_proj" in message
    assert "W_V alone is not the paper's correction" in message
    assert "layouts={" not in message and 'roles="v"' not in message
    assert r'exclude=[r"^decoder\.layers\.\d+\.self_attn$", r"^decoder\.layers\.\d+\.encoder_attn$"]' in message
