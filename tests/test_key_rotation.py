"""SpectralConfig(key_basis="orthogonal"): the identity correction with k's block turned, lam R_h E_h per k head.

E_h is head h's rows of its block's rectangular identity and R_h a fixed random dh x dh orthogonal matrix
(``spectral.key_rotations``); q and v keep lam E_h. R_h E_h has the singular values of E_h, so the Weyl
bound kappa(W + C) <= (lam + sigma_max) / (lam - sigma_max) of Theorem 3.8's identity holds unchanged, and
lam="auto" gives the same lams.

Which test checks what:

- ``test_key_rotations_*``: every R_h is orthogonal, the same on every call, and depends on h and dh only.
- ``test_block_*`` (hypothesis, float64, SpectralCorrection directly): every storage and arrangement,
  grouped-query k, square, tall and wide blocks: C is the hand-built one (q, v: lam E_h; k: lam R_h E_h),
  every added k head and the whole k block have all their singular values lam, kappa(W + C) meets the Weyl
  bound, and both backends compute W + C (``forward``, ``add_to_output``, ``right_inverse``).
- ``test_model_*`` (real models: fused timm qkv, a transformers BERT's separate q/k/v, a per-head
  interleaved qkv, a Conv1D stored (in, out), whose activation backend is a forward hook): lam="auto" at
  target_kappa 5 keeps every head's kappa(W + C) below its Weyl bound, itself 5; outputs and gradients are
  those of the plain model at the hand-built W + C; remove(merge=False) gives back the state and the outputs
  bit for bit, remove(merge=True) the hand-built W + C; a state_dict and save_conditioned /
  load_conditioned round trip reproduce the outputs bit for bit; a checkpoint of the other key_basis is
  refused; refresh re-chooses the lams and keeps R.
- the config: refused with svd and with k uncorrected, round trip through to_dict / from_dict.
"""
from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from torch import nn

import speccond
from speccond.core.backends import attachments
from speccond.core.correction import SpectralCorrection
from speccond.core.layout import ProjectionLayout
from speccond.core.spectral import kappa, key_rotations, weyl_identity_bound
from tests.adapter_models import case as adapter_case
from tests.conftest import assert_close
from tests.models import CASES as CORE_CASES
from tests.models import build_case, case_inputs, plain_at

float64 = pytest.mark.usefixtures("float64_default")
BLOCK_PROPERTY = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
ORTHOGONAL_ATOL = 1e-12  # R_h^T R_h against I, float64
SV_RTOL = 1e-10  # singular values of the added blocks against lam, float64
ROTATED = {"key_basis": "orthogonal"}
TARGET = 5.0

MODEL_CASES = {
    "timm-vit": next(c for c in CORE_CASES if c.name == "timm-vit"),
    "hf-bert": adapter_case("hf-bert"),
    "declared-per-head-interleaved": next(c for c in CORE_CASES if c.name == "declared-per-head-interleaved"),
    "declared-conv1d-in-out": next(c for c in CORE_CASES if c.name == "declared-conv1d-in-out"),
}


# -- the hand-built correction, independent of SpectralCorrection -------------------------------------------
def hand_correction(weight: torch.Tensor, layout: ProjectionLayout, lams: dict[str, torch.Tensor]) -> torch.Tensor:
    """C in the stored orientation and ``weight``'s dtype: for each role and head h, lam_h times the head's rows
    of eye(width, in), and for k lam_h R_h times them. ``lams``: role -> (heads,) lam per head."""
    w = layout.out_in(weight.detach())
    out, inp = w.shape
    head_dim = layout.head_dim(out)
    c = torch.zeros(out, inp, dtype=weight.dtype)
    for role in layout.roles:
        heads = layout.heads(role)
        eye = torch.eye(heads * head_dim, inp, dtype=weight.dtype)  # (width, in): the block's I_k
        rotations = key_rotations(heads, head_dim).to(weight.dtype)  # (heads, dh, dh)
        for head in range(heads):
            rows = layout.head_rows(role, head, out)  # (dh,)
            added = eye[head * head_dim : (head + 1) * head_dim]  # (dh, in): E_h
            lam = lams[role][head].to(weight.dtype)
            c[rows] = lam * (rotations[head] @ added if role == "k" else added)
    return layout.out_in(c)


def auto_lams(weight: torch.Tensor, layout: ProjectionLayout, target: float) -> dict[str, torch.Tensor]:
    """lam per head of every role: sigma_max of the head's rows (numpy) times (t + 1) / (t - 1)."""
    w = layout.out_in(weight.detach()).double()
    lams = {}
    for role in layout.roles:
        heads = [w[layout.head_rows(role, h, w.shape[0])].numpy() for h in range(layout.heads(role))]
        sigma = np.array([np.linalg.norm(part, 2) for part in heads])
        lams[role] = torch.from_numpy(sigma * (target + 1.0) / (target - 1.0))
    return lams


def numeric_lams(layout: ProjectionLayout, lam: float) -> dict[str, torch.Tensor]:
    return {role: torch.full((layout.heads(role),), lam, dtype=torch.float64) for role in layout.roles}


def _apply(model: nn.Module, config: speccond.SpectralConfig) -> speccond.SpectralReport:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # adapter notes and lam <= 2 are tested elsewhere
        return speccond.apply(model, config)


def _config(case, **fields) -> speccond.SpectralConfig:
    return speccond.SpectralConfig(**{**case.config, "lam": "auto", "target_kappa": TARGET, **ROTATED, **fields})


def _run(model: nn.Module, inputs: tuple) -> torch.Tensor:
    with torch.no_grad():
        return model(*inputs)


def _stored(model: nn.Module, case) -> dict[str, torch.Tensor]:
    return {name: model.get_parameter(name).detach().clone() for name in case.params}


# 1. the rotations ------------------------------------------------------------------------------------------
def test_key_rotations_are_orthogonal_fixed_and_depend_on_head_and_width_only():
    rotations = key_rotations(3, 5)  # (heads, dh, dh)
    assert rotations.shape == (3, 5, 5) and rotations.dtype == torch.float64 and rotations.is_contiguous()  # safetensors
    eye = torch.eye(5, dtype=torch.float64).expand(3, 5, 5)
    torch.testing.assert_close(rotations.transpose(1, 2) @ rotations, eye, rtol=0, atol=ORTHOGONAL_ATOL)
    assert torch.equal(key_rotations(3, 5), rotations)
    assert torch.equal(key_rotations(6, 5)[:3], rotations)  # more heads: the first ones unchanged
    assert not torch.allclose(rotations[0], rotations[1]) and not torch.allclose(rotations[0], eye[0])


# 2. one correction, every layout (hypothesis, float64) ------------------------------------------------------
@st.composite
def block_cases(draw):
    """A fused qkv layout (k and v possibly with fewer heads), a float64 weight, lam per role (k's > 0)."""
    arrangement = draw(st.sampled_from(("blocked", "per_head", "grouped")))
    kv_heads = draw(st.integers(1, 3))
    heads = kv_heads * (1 if arrangement == "per_head" else draw(st.integers(1, 2)))
    head_dim = draw(st.integers(1, 6))
    layout = ProjectionLayout("qkv", heads, draw(st.sampled_from(("out_in", "in_out"))), arrangement,
                              kv_heads if heads != kv_heads else None)
    out_features = (heads + 2 * kv_heads) * head_dim
    in_features = draw(st.one_of(st.integers(1, 24), st.just(out_features)))
    shape = (out_features, in_features) if layout.storage == "out_in" else (in_features, out_features)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    weight = torch.from_numpy(rng.standard_normal(shape) * 10.0 ** draw(st.floats(-3.0, 3.0)))
    scales = {"q": draw(st.sampled_from((0.0, 0.5, 10.0))), "k": draw(st.sampled_from((0.5, 3.0, 10.0))),
              "v": draw(st.sampled_from((0.0, 0.5, 10.0)))}
    note(f"layout={layout} shape={shape} scales={scales}")
    return layout, weight, scales


@BLOCK_PROPERTY
@given(block_cases())
def test_block_correction_is_lam_r_on_k_and_lam_i_on_q_v_with_all_singular_values_lam(case):
    layout, weight, scales = case
    correction = SpectralCorrection(layout, weight.shape, scales, "identity", key_basis="orthogonal")
    lams = {role: torch.full((layout.heads(role),), lam, dtype=torch.float64) for role, lam in scales.items()}
    dense = correction.dense(torch.float64)
    assert torch.equal(dense, hand_correction(weight, layout, lams))
    c, out = layout.out_in(dense), correction.out_features
    in_features, head_dim = correction.in_features, layout.head_dim(out)
    lam = scales["k"]
    for head in range(layout.heads("k")):
        added = c[layout.head_rows("k", head, out)]  # (dh, in)
        diagonal = max(0, min(head_dim, in_features - head * head_dim))  # columns of E_h with a 1
        values = torch.linalg.svdvals(added)  # (min(dh, in),)
        expected = torch.tensor([lam] * diagonal + [0.0] * (values.numel() - diagonal), dtype=torch.float64)
        torch.testing.assert_close(values, expected, rtol=SV_RTOL, atol=SV_RTOL * lam)
    block = c[layout.block_rows("k", out)]  # (width_k, in): block diagonal lam R_h, all singular values lam
    width = block.shape[0]
    torch.testing.assert_close(torch.linalg.svdvals(block), torch.full((min(width, in_features),), lam,
                               dtype=torch.float64), rtol=SV_RTOL, atol=0)


@BLOCK_PROPERTY
@given(block_cases())
def test_block_kappa_meets_the_weyl_bound_of_the_identity(case):
    layout, weight, scales = case
    w = layout.out_in(weight)
    out = w.shape[0]
    head_dim = layout.head_dim(out)
    heads = [h for h in range(layout.heads("k")) if (h + 1) * head_dim <= w.shape[1]]  # a full diagonal
    if not heads:
        return
    sigma = max(float(torch.linalg.matrix_norm(w[layout.head_rows("k", h, out)], ord=2)) for h in heads)
    lam = 1.5 * sigma  # lam > sigma_max of every such head: the bound applies (3 x sigma_max + ...: 5)
    correction = SpectralCorrection(layout, weight.shape, {**scales, "k": lam}, "identity", key_basis="orthogonal")
    effective = layout.out_in(correction(weight))
    for head in heads:
        rows = layout.head_rows("k", head, out)
        head_sigma = float(torch.linalg.matrix_norm(w[rows], ord=2))
        assert kappa(effective[rows]) <= weyl_identity_bound(lam, head_sigma) * (1 + 1e-9)


@BLOCK_PROPERTY
@given(block_cases())
def test_block_weight_and_activation_backends_are_w_plus_c(case):
    layout, weight, scales = case
    correction = SpectralCorrection(layout, weight.shape, scales, "identity", key_basis="orthogonal")
    dense = correction.dense(torch.float64)
    assert torch.equal(correction(weight), weight + dense)  # every entry gets one add: exactly W + C
    round_trip = correction(correction.right_inverse(weight))
    rounding = 4 * torch.finfo(torch.float64).eps * (weight.abs() + dense.abs()).max().item()
    torch.testing.assert_close(round_trip, weight, rtol=0, atol=rounding)
    w_out_in, c_out_in = layout.out_in(weight), layout.out_in(dense)
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((2, 3, w_out_in.shape[1])))  # (B, N, in)
    y = correction.add_to_output(x, x @ w_out_in.T)  # (B, N, out)
    atol = 1e-12 * (x.abs() @ (w_out_in.abs() + c_out_in.abs()).T).max().item()
    torch.testing.assert_close(y, x @ (w_out_in + c_out_in).T, rtol=0, atol=atol)


def test_correction_without_k_ignores_key_basis():
    """A separate q or v projection has no k block to turn: its correction and marker are the identity's."""
    layout = ProjectionLayout("q", 2)
    rotated = SpectralCorrection(layout, torch.Size((4, 4)), {"q": 3.0}, "identity", key_basis="orthogonal")
    plain = SpectralCorrection(layout, torch.Size((4, 4)), {"q": 3.0}, "identity")
    assert not rotated.rotates_key and rotated.description() == plain.description()
    assert torch.equal(rotated.dense(), plain.dense())


# 3. real models -------------------------------------------------------------------------------------------
@float64
@pytest.mark.parametrize("name", ["timm-vit", "hf-bert"])
def test_model_auto_at_target_five_bounds_every_head(name):
    case = MODEL_CASES[name]
    model = build_case(case)
    before = _stored(model, case)
    report = _apply(model, _config(case))
    for row in report:
        assert max(row.head_kappas_eff) <= TARGET * (1 + 1e-9), row
        assert row.correction.startswith("rotated lam=auto(" if row.role == "k" else "identity lam=auto(")
    for item in attachments(model):
        layout = item.correction.layout
        w = layout.out_in(before[item.qualified_name])
        effective = layout.out_in(item.effective_weight().detach())
        for role in layout.roles:
            for head, lam in enumerate(item.correction.head_lams(role)):
                rows = layout.head_rows(role, head, w.shape[0])
                bound = weyl_identity_bound(lam, float(torch.linalg.matrix_norm(w[rows], ord=2)))
                assert bound == pytest.approx(TARGET, rel=1e-9)
                assert kappa(effective[rows]) <= bound * (1 + 1e-9)


@float64
@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("name", list(MODEL_CASES))
def test_model_outputs_and_gradients_are_the_plain_model_at_hand_built_w_plus_c(name, backend):
    case = MODEL_CASES[name]
    model, inputs = build_case(case), case_inputs(case)
    before = _stored(model, case)
    hand = {n: hand_correction(w, case.params[n], auto_lams(w, case.params[n], TARGET)) for n, w in before.items()}
    reference = plain_at(model, {n: before[n] + hand[n] for n in case.params})
    _apply(model, _config(case, backend=backend))
    for item in attachments(model):
        assert item.backend == backend
        torch.testing.assert_close(item.effective_weight() - before[item.qualified_name], hand[item.qualified_name],
                                   rtol=1e-12, atol=1e-15)
    assert_close(_run(model, inputs), _run(reference, inputs))
    model(*inputs).square().sum().backward()
    reference(*inputs).square().sum().backward()
    for item in attachments(model):
        assert_close(item.stored_weight().grad, reference.get_parameter(item.qualified_name).grad)


@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("name", ["timm-vit", "hf-bert", "declared-conv1d-in-out"])
def test_model_remove_restores_bit_for_bit_and_merge_bakes_in_hand_built_w_plus_c(name, backend):
    case = MODEL_CASES[name]
    model, inputs = build_case(case), case_inputs(case)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    classes = [type(m) for m in model.modules()]
    plain = _run(model, inputs)
    before = _stored(model, case)
    config = _config(case, lam=3.0, backend=backend)  # numeric: the hand-built lam is C's to the bit
    _apply(model, config)
    conditioned = _run(model, inputs)

    merged = speccond.remove(copy.deepcopy(model), merge=True)
    assert [type(m) for m in merged.modules()] == classes and list(merged.state_dict()) == list(state)
    for n, w in before.items():
        assert torch.equal(merged.get_parameter(n).detach(), w + hand_correction(w, case.params[n],
                                                                                 numeric_lams(case.params[n], 3.0)))
    assert_close(_run(merged, inputs), conditioned)

    speccond.remove(model, merge=False)
    assert [type(m) for m in model.modules()] == classes and list(model.state_dict()) == list(state)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert torch.equal(_run(model, inputs), plain)


@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("name", ["timm-vit", "hf-bert"])
def test_model_state_dict_and_checkpoint_round_trips_are_bit_for_bit(name, backend, tmp_path):
    case = MODEL_CASES[name]
    config = _config(case, backend=backend)
    trained = build_case(case).train()
    _apply(trained, config)
    optimizer = torch.optim.SGD(trained.parameters(), lr=0.5)
    trained(*case_inputs(case)).square().mean().backward()
    optimizer.step()
    speccond.refresh(trained)  # lams from the trained weights: a fresh model's differ
    trained.eval()
    inputs = case_inputs(case)
    expected = _run(trained, inputs)
    state = trained.state_dict()
    assert sum(key.endswith("key_rotations") for key in state) == sum("k" in l.roles for l in case.params.values())

    fresh = build_case(case, seed=123)
    _apply(fresh, config)
    fresh.load_state_dict(state)
    assert torch.equal(_run(fresh, inputs), expected)

    path = speccond.save_conditioned(trained, tmp_path / "model.safetensors")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        loaded = speccond.load_conditioned(build_case(case, seed=7), path)
    assert torch.equal(_run(loaded, inputs), expected)
    assert {item.correction.rotates_key for item in attachments(loaded) if "k" in item.correction.layout.roles} == {True}


@pytest.mark.parametrize("saved, loading", [("orthogonal", "identity"), ("identity", "orthogonal")])
def test_model_checkpoint_of_the_other_key_basis_is_refused(saved, loading):
    case = MODEL_CASES["timm-vit"]
    source, target = build_case(case), build_case(case)
    _apply(source, _config(case, key_basis=saved))
    _apply(target, _config(case, key_basis=loading))
    with pytest.raises(RuntimeError, match=r"key_basis=orthogonal"):
        target.load_state_dict(source.state_dict(), strict=False)  # the marker alone refuses it


@pytest.mark.parametrize("backend", ["weight", "activation"])
def test_model_refresh_rechooses_the_lams_and_keeps_r(backend):
    case = MODEL_CASES["timm-vit"]
    model = build_case(case)
    _apply(model, _config(case, backend=backend))
    found = list(attachments(model))
    rotations = [item.correction.key_rotations.clone() for item in found]
    with torch.no_grad():
        for item in found:
            item.stored_weight().mul_(3.0)  # sigma_max x 3: lam x 3
    assert speccond.refresh(model) == len(found)
    for item, kept in zip(found, rotations):
        assert torch.equal(item.correction.key_rotations, kept)
        stored, layout = item.stored_weight().detach(), item.correction.layout
        expected = hand_correction(stored, layout, auto_lams(stored, layout, TARGET))
        torch.testing.assert_close(item.correction.dense(stored.dtype), expected, rtol=1e-5, atol=1e-6)


def test_model_collapse_advice_offers_settings_without_the_key_basis():
    """apply's collapse advice varies lam_k and the correction (lam_k=0, svd: both refused with key_basis=
    'orthogonal'), so its candidates take the identity's k, as its text says; apply neither fails nor warns
    falsely for that."""
    case = MODEL_CASES["timm-vit"]
    model, inputs = build_case(case), case_inputs(case)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        speccond.apply(model, speccond.SpectralConfig(lam=10.0, **ROTATED), verify_with=inputs)
    assert speccond.is_conditioned(model)


# 4. the config -------------------------------------------------------------------------------------------
BAD_CONFIGS = [
    ({"correction": "svd"}, r"key_basis='orthogonal' turns the identity correction's k block .* correction='svd'"),
    ({"lam_k": 0.0}, r"key_basis='orthogonal' turns k's correction into lam R .* lam_k=0 leaves k uncorrected"),
    ({"key_basis": "rotated"}, r"SpectralConfig.key_basis must be one of \('identity', 'orthogonal'\), got 'rotated'"),
]


@pytest.mark.parametrize("fields, message", BAD_CONFIGS, ids=[str(f) for f, _ in BAD_CONFIGS])
def test_config_refuses_key_basis_where_it_would_not_turn_k(fields, message):
    with pytest.raises(ValueError, match=message):
        speccond.SpectralConfig(**{**ROTATED, **fields})


def test_config_round_trips_its_key_basis():
    config = speccond.SpectralConfig(lam="auto", target_kappa=5.0, **ROTATED)
    assert config.to_dict()["key_basis"] == "orthogonal"
    assert speccond.SpectralConfig.from_dict(config.to_dict()) == config
    assert speccond.SpectralConfig().key_basis == "identity"


@pytest.mark.parametrize("backend", ["weight", "activation"])
def test_model_torch_compile_matches_eager(backend):
    case = MODEL_CASES["timm-vit"]
    model, inputs = build_case(case), case_inputs(case)
    _apply(model, _config(case, backend=backend))
    compiled = torch.compile(model)
    with torch.no_grad():
        assert_close(compiled(*inputs), model(*inputs))
