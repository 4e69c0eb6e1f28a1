"""The core contract: the correction lands where it should, and attaching/removing keeps its promises.

Table-driven over real models (tests/models.py): timm ViT and DeiT, nn.TransformerEncoder,
nn.MultiheadAttention with separate q/k/v, and user modules with declared layouts.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import speccond
from speccond.core.spectral import kappa
from tests.conftest import assert_close
from tests.models import CASE_IDS, CASES, Case, expected_identity, reference_at_w_plus_c

LAM = {"q": 10.0, "k": 10.0, "v": 10.0}
# Equivalences (vs hand-written references, merge, reload) are checked in float64; backend agreement,
# compile and autocast run in float32 as users run them.
float64 = pytest.mark.usefixtures("float64_default")


def _config(case: Case, **fields) -> speccond.SpectralConfig:
    return speccond.SpectralConfig(**{"lam": 10.0, **case.config, **fields})


def _build(case: Case) -> nn.Module:
    torch.manual_seed(0)
    return case.build().eval()


def _stored(model: nn.Module, case: Case) -> dict[str, torch.Tensor]:
    return {name: model.get_parameter(name).detach().clone() for name in case.params}


def _effective(model: nn.Module, case: Case) -> dict[str, torch.Tensor]:
    """W_eff as the model reads it: the attribute, or W + C for the activation backend."""
    found = {a.qualified_name: a for a in speccond.core.backends.attachments(model)}
    return {name: found[name].effective_weight().detach() for name in case.params}


# 1. identity correction -------------------------------------------------------------------------------
@float64
@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_identity_correction_is_lam_times_rectangular_identity_per_block(case, backend):
    if backend == "activation" and not case.activation_ok:
        pytest.skip("activation backend refused for this module (tested below)")
    model = _build(case)
    before = _stored(model, case)
    speccond.apply(model, _config(case, backend=backend))
    for name, eff in _effective(model, case).items():
        layout = case.params[name]
        assert torch.equal(eff - before[name], expected_identity(before[name], layout, LAM)), name
        if layout.fused:  # the wrong reading: one eye over the whole fused weight corrects q only
            wrong = layout.out_in(torch.eye(*layout.out_in(before[name]).shape)) * 10.0
            assert not torch.equal(eff - before[name], wrong)


@float64
@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_output_equals_plain_model_evaluated_at_w_plus_c(case, backend):
    if backend == "activation" and not case.activation_ok:
        pytest.skip("activation backend refused for this module")
    model = _build(case)
    inputs = case.inputs()
    reference = reference_at_w_plus_c(model, case.params, LAM)
    speccond.apply(model, _config(case, backend=backend))
    with torch.no_grad():
        assert_close(model(*inputs), reference(*inputs))


@float64
def test_timm_attention_matches_hand_written_forward_with_w_plus_c():
    from timm.layers import Attention

    torch.manual_seed(0)
    attn = Attention(dim=32, num_heads=4, qkv_bias=True).eval()
    x = torch.randn(2, 9, 32)  # (B, N, D)
    w, b = attn.qkv.weight.detach().clone(), attn.qkv.bias.detach()
    speccond.apply(attn, speccond.SpectralConfig(lam=10.0))

    w_eff = w + torch.cat([10.0 * torch.eye(32)] * 3)  # (3D, D): q, k, v blocks each + 10 I
    qkv = (x @ w_eff.T + b).reshape(2, 9, 3, 4, 8).permute(2, 0, 3, 1, 4)  # (3, B, H, N, dh)
    q, k, v = qkv
    probs = (q @ k.transpose(-2, -1) * 8**-0.5).softmax(-1)  # (B, H, N, N)
    expected = attn.proj((probs @ v).transpose(1, 2).reshape(2, 9, 32))
    with torch.no_grad():
        assert_close(attn(x), expected)


def test_per_head_interleaved_layout_by_hand():
    """rows of head h are [q_h | k_h | v_h]; head h's q rows get lam at columns h*dh .. h*dh + dh."""
    from tests.models import InterleavedAttention

    model = InterleavedAttention(dim=12, heads=3)
    w = model.to_qkv.weight.detach().clone()  # (36, 12) = (H * 3 * dh, D)
    layout = speccond.ProjectionLayout("qkv", num_heads=3, arrangement="per_head")
    speccond.apply(model, speccond.SpectralConfig(lam=2.5, layouts={"to_qkv": layout}))
    expected = torch.zeros(36, 12)
    for head in range(3):
        for position in range(3):  # q, k, v
            for j in range(4):
                expected[head * 12 + position * 4 + j, head * 4 + j] = 2.5
    assert torch.equal(model.to_qkv.weight.detach() - w, expected)


def test_per_role_overrides_and_zero_leaves_a_projection_untouched():
    model = _build(CASES[0])
    w = model.blocks[0].attn.qkv.weight.detach().clone()
    speccond.apply(model, speccond.SpectralConfig(lam=10.0, lam_k=0.0, lam_v=3.0))
    diff = model.blocks[0].attn.qkv.weight.detach() - w  # (3 * 64, 64)
    assert torch.equal(diff[:64], 10.0 * torch.eye(64))
    assert torch.equal(diff[64:128], torch.zeros(64, 64))
    assert torch.equal(diff[128:], 3.0 * torch.eye(64))


# 2. SVD correction -----------------------------------------------------------------------------------
@float64
@pytest.mark.parametrize("granularity", ["head", "projection"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_svd_correction_bounds_kappa_by_two(case, granularity):
    model = _build(case)
    speccond.apply(model, _config(case, correction="svd", granularity=granularity))
    for name, eff in _effective(model, case).items():
        layout = case.params[name]
        for role in layout.roles:
            block = layout.logical_block(eff, role)  # (block_out, in)
            if granularity == "projection":
                assert kappa(block) <= 2 + 1e-9, (name, role)
                continue
            head_rows = block.shape[0] // layout.num_heads
            for head in range(layout.num_heads):
                assert kappa(block[head * head_rows : (head + 1) * head_rows]) <= 2 + 1e-9, (name, role, head)


def test_refresh_recomputes_svd_correction_after_weights_move():
    model = _build(CASES[0]).double()
    speccond.apply(model, speccond.SpectralConfig(correction="svd", granularity="projection"))
    stored = model.blocks[0].attn.qkv.parametrizations.weight.original
    with torch.no_grad():
        stored.mul_(torch.linspace(0.01, 5.0, stored.shape[1], dtype=stored.dtype))  # skew the spectrum
    q_block = lambda: model.blocks[0].attn.qkv.weight[:64].detach()  # noqa: E731
    assert kappa(q_block()) > 2.0  # the old correction no longer bounds the moved weight
    assert speccond.refresh(model) == 2  # one fused qkv per block, two blocks
    assert kappa(q_block()) <= 2 + 1e-9


def test_refresh_leaves_identity_correction_alone():
    model = _build(CASES[0])
    speccond.apply(model, speccond.SpectralConfig(lam=10.0))
    before = model.blocks[0].attn.qkv.weight.detach().clone()
    assert speccond.refresh(model) == 0
    assert torch.equal(model.blocks[0].attn.qkv.weight, before)


# 3. gradients and parameters -------------------------------------------------------------------------
@float64
@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_gradient_at_stored_weight_equals_plain_gradient_at_w_eff(case, backend):
    if backend == "activation" and not case.activation_ok:
        pytest.skip("activation backend refused for this module")
    model = _build(case)
    inputs = case.inputs()
    reference = reference_at_w_plus_c(model, case.params, LAM)
    params_before = {id(p) for p in model.parameters()}
    count_before = sum(p.numel() for p in model.parameters())
    speccond.apply(model, _config(case, backend=backend))

    assert {id(p) for p in model.parameters()} == params_before  # same Parameter objects: optimisers keep working
    assert sum(p.numel() for p in model.parameters()) == count_before
    assert all(not b.requires_grad for b in model.buffers())
    model(*inputs).square().sum().backward()
    reference(*inputs).square().sum().backward()
    stored = {a.qualified_name: a.stored_weight() for a in speccond.core.backends.attachments(model)}
    for name in case.params:
        assert_close(stored[name].grad, reference.get_parameter(name).grad)


def test_optimizer_built_before_apply_trains_the_stored_weight():
    model = _build(CASES[0]).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    speccond.apply(model, speccond.SpectralConfig(lam=10.0))
    stored = model.blocks[0].attn.qkv.parametrizations.weight.original
    before = stored.detach().clone()
    model(*CASES[0].inputs()).sum().backward()
    optimizer.step()
    assert not torch.equal(stored, before)
    assert_close(model.blocks[0].attn.qkv.weight - stored, expected_identity(stored, CASES[0].params["blocks.0.attn.qkv.weight"], LAM))


# 4. preserve and no-op ----------------------------------------------------------------------------------
@float64
@pytest.mark.parametrize("correction", ["identity", "svd"])
@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_preserve_leaves_outputs_unchanged_at_attach_time(case, backend, correction):
    if backend == "activation" and not case.activation_ok:
        pytest.skip("activation backend refused for this module")
    model = _build(case)
    inputs = case.inputs()
    with torch.no_grad():
        expected = model(*inputs)
    speccond.apply(model, _config(case, backend=backend, init="preserve", correction=correction))
    with torch.no_grad():
        # (W - C) + C differs from W by an ulp of lam (float64 here), so not bit for bit.
        assert_close(model(*inputs), expected)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_all_lam_zero_leaves_model_bit_for_bit_unchanged(case):
    model = _build(case)
    inputs = case.inputs()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    classes = [type(m) for m in model.modules()]
    with torch.no_grad():
        expected = model(*inputs)
    report = speccond.apply(model, _config(case, lam=0.0))
    assert len(report) == 0 and not speccond.is_conditioned(model)
    assert [type(m) for m in model.modules()] == classes
    assert model.state_dict().keys() == state.keys()
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    with torch.no_grad():
        assert torch.equal(model(*inputs), expected)


# 5. remove ---------------------------------------------------------------------------------------------
@float64
@pytest.mark.parametrize("correction", ["identity", "svd"])
@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_remove_merge_and_unmerge(case, backend, correction):
    if backend == "activation" and not case.activation_ok:
        pytest.skip("activation backend refused for this module")
    model = _build(case)
    inputs = case.inputs()
    weights = _stored(model, case)
    classes = [type(m) for m in model.modules()]
    keys = list(model.state_dict())
    speccond.apply(model, _config(case, backend=backend, correction=correction))
    with torch.no_grad():
        conditioned = model(*inputs)

    merged = speccond.remove(copy.deepcopy(model), merge=True)
    assert not speccond.is_conditioned(merged)
    assert [type(m) for m in merged.modules()] == classes
    assert list(merged.state_dict()) == keys  # exactly the vanilla keys, in the vanilla order
    with torch.no_grad():
        assert_close(merged(*inputs), conditioned)

    speccond.remove(model, merge=False)
    assert [type(m) for m in model.modules()] == classes
    assert list(model.state_dict()) == keys
    assert all(torch.equal(model.get_parameter(n), w) for n, w in weights.items())


def test_apply_twice_and_remove_unconditioned_raise():
    model = _build(CASES[0])
    with pytest.raises(ValueError, match="not spectrally conditioned"):
        speccond.remove(model)
    speccond.apply(model, speccond.SpectralConfig(lam=10.0))
    with pytest.raises(ValueError, match="already spectrally conditioned.*speccond.remove"):
        speccond.apply(model, speccond.SpectralConfig(lam=10.0))


# 6. backends agree; state_dict round trips -----------------------------------------------------------------
@pytest.mark.parametrize("correction", ["identity", "svd"])
@pytest.mark.parametrize("case", [c for c in CASES if c.activation_ok], ids=[c.name for c in CASES if c.activation_ok])
def test_weight_and_activation_backends_agree(case, correction):
    inputs = case.inputs()
    models = {}
    for backend in ("weight", "activation"):
        models[backend] = _build(case).train()
        speccond.apply(models[backend], _config(case, backend=backend, correction=correction))
        models[backend](*inputs).square().mean().backward()
    with torch.no_grad():
        assert_close(models["weight"](*inputs), models["activation"](*inputs))
    grads = {
        b: {n: p.grad for n, p in m.named_parameters() if p.grad is not None} for b, m in models.items()
    }
    by_value = lambda g: sorted(g.values(), key=lambda t: (t.numel(), float(t.abs().sum())))  # noqa: E731
    assert len(grads["weight"]) == len(grads["activation"]) == len(list(models["weight"].parameters()))
    for a, b in zip(by_value(grads["weight"]), by_value(grads["activation"])):
        assert_close(a, b)


@pytest.mark.parametrize("case", [c for c in CASES if not c.activation_ok], ids=[c.name for c in CASES if not c.activation_ok])
def test_activation_backend_refused_where_the_weight_is_read_directly(case):
    model = _build(case)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="read directly.*backend='weight'"):
        speccond.apply(model, _config(case, backend="activation"))
    assert not speccond.is_conditioned(model)  # nothing half-applied
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


@float64
@pytest.mark.parametrize("correction", ["identity", "svd"])
@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_state_dict_reloads_into_a_freshly_conditioned_model(case, backend, correction):
    if backend == "activation" and not case.activation_ok:
        pytest.skip("activation backend refused for this module")
    config = _config(case, backend=backend, correction=correction)
    trained = _build(case).train()
    speccond.apply(trained, config)
    optimizer = torch.optim.SGD(trained.parameters(), lr=0.5)
    trained(*case.inputs()).square().mean().backward()
    optimizer.step()  # weights move, so a fresh SVD correction would differ from the saved one
    torch.manual_seed(123)
    fresh = case.build().eval()
    speccond.apply(fresh, config)
    fresh.load_state_dict(trained.state_dict())
    trained.eval()
    inputs = case.inputs()
    with torch.no_grad():
        assert torch.equal(fresh(*inputs), trained(*inputs))


# 7. compile, autocast, deepcopy, pickle --------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["weight", "activation"])
def test_torch_compile_matches_eager(backend):
    model = _build(CASES[0])
    speccond.apply(model, speccond.SpectralConfig(lam=10.0, backend=backend))
    inputs = CASES[0].inputs()
    compiled = torch.compile(model)
    with torch.no_grad():
        assert_close(compiled(*inputs), model(*inputs))


@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("case", [CASES[0], CASES[2]], ids=[CASES[0].name, CASES[2].name])
def test_bf16_autocast_matches_plain_model_at_w_plus_c_under_autocast(case, backend):
    """Under bf16 the diagonal of W + 10 I is resolved to 10 * 2^-8, so compare like with like."""
    if backend == "activation" and not case.activation_ok:
        pytest.skip("activation backend refused for this module")
    model = _build(case)
    reference = reference_at_w_plus_c(model, case.params, LAM)
    speccond.apply(model, _config(case, backend=backend))
    inputs = case.inputs()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        actual, expected = model(*inputs), reference(*inputs)
    assert actual.dtype == torch.bfloat16
    if backend == "weight":  # W + C is formed in float32 and cast, exactly as the plain model's weight
        assert torch.equal(actual, expected)
    assert_close(actual.float(), expected.float(), dtype=torch.bfloat16)


@pytest.mark.parametrize("backend", ["weight", "activation"])
def test_deepcopy_is_independent(backend):
    model = _build(CASES[0])
    speccond.apply(model, speccond.SpectralConfig(lam=10.0, backend=backend))
    inputs = CASES[0].inputs()
    clone = copy.deepcopy(model)
    with torch.no_grad():
        expected = model(*inputs)
        assert torch.equal(clone(*inputs), expected)
    speccond.remove(clone, merge=False)  # removing from the copy must not touch the original
    assert speccond.is_conditioned(model)
    with torch.no_grad():
        assert torch.equal(model(*inputs), expected)


def test_activation_backend_pickles_and_weight_backend_says_why_not():
    import pickle

    inputs = CASES[0].inputs()
    model = _build(CASES[0])
    speccond.apply(model, speccond.SpectralConfig(lam=10.0, backend="activation"))
    restored = pickle.loads(pickle.dumps(model))
    assert speccond.is_conditioned(restored)
    with torch.no_grad():
        assert torch.equal(restored(*inputs), model(*inputs))

    weighted = _build(CASES[0])
    speccond.apply(weighted, speccond.SpectralConfig(lam=10.0, backend="weight"))
    with pytest.raises(RuntimeError, match="state_dict"):  # torch's parametrize: save the state_dict instead
        pickle.dumps(weighted)


@float64
def test_transformer_encoder_fast_path_in_eval():
    """nn.TransformerEncoder's fused inference path (eval, no grad) reads the parametrized in_proj_weight."""
    case = CASES[2]
    model = _build(case)
    reference = reference_at_w_plus_c(model, case.params, LAM)
    speccond.apply(model, speccond.SpectralConfig(lam=10.0))
    x = case.inputs()[0]
    with torch.inference_mode():
        fast = model(x)
        assert_close(fast, reference(x))
    model.train()  # slow path (no dropout in this case): same function
    with torch.no_grad():
        assert_close(model(x), fast)


def _saved_bytes(model: nn.Module, inputs: tuple) -> int:
    """Bytes autograd keeps for backward during one forward (each storage counted once)."""
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(*inputs).sum()
    return sum(seen.values())


def test_identity_correction_keeps_nothing_extra_for_backward():
    """Memory target: the activation backend adds lam * x in place on the projection's output and the
    weight backend saves W + C where the plain model saves W, so autograd keeps only the small lam and
    index buffers beyond the plain model (no (B, N, 3D) activation, no second weight)."""
    inputs = (torch.randn(8, 3, 32, 32),)
    plain = _saved_bytes(_build(CASES[0]).train(), inputs)
    one_activation = 8 * 17 * 3 * 64 * 4  # a (B, N, 3D) float32 qkv output
    for backend in ("activation", "weight"):
        model = _build(CASES[0]).train()
        speccond.apply(model, speccond.SpectralConfig(lam=10.0, backend=backend))
        extra = _saved_bytes(model, inputs) - plain
        assert extra < 16 * 1024 < one_activation, (backend, extra)
