"""lam="auto" (beyond the paper; docs/GUIDE.md, "Scale-aware lam"): lam chosen per corrected block from its sigma_max.

For each corrected part P of a q/k/v block (one head's rows with granularity="head", the whole block with
"projection") speccond picks lam_P = sigma_max(W_P) (t + 1) / (t - 1), t = target_kappa, so that the
Weyl bound kappa(W_P + lam_P E_P) <= (lam_P + sigma_max) / (lam_P - sigma_max) equals t, where E_P is
P's slice of the block's rectangular identity (docs/THEORY.md section 2, ``spectral.auto_lam``).

Which test checks what:

- ``test_auto_lam_*``: the formula, by hand, and that it meets the Weyl bound.
- ``test_block_auto_*`` (hypothesis, float64, SpectralCorrection directly): every storage and arrangement,
  square, tall and wide blocks: each part's lam is the formula, meets the bound, and kappa(W_P + C_P) <= t.
- ``test_model_auto_*`` (hypothesis, float64, real models with random weights): the same on fused timm
  qkv (blocked, (out, in)), separate Hugging Face q/k/v Linears, GPT-2's fused Conv1D ((in, out)) and
  Swin's rectangular (32 x 24) blocks.
- equivalence, refresh, state_dict, merge: the conditioned model is the plain model at the hand-built
  W + lam_P I per part; refresh() re-chooses lam from the current W and nothing else does; a state_dict
  reload reproduces the outputs; remove(merge=True) bakes W + C in.
- errors and the report.
"""
from __future__ import annotations

import copy
import functools
import json
import re
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
from speccond.core.spectral import auto_lam, kappa, weyl_identity_bound
from tests.adapter_models import case as adapter_case
from tests.conftest import assert_close
from tests.models import CASES as CORE_CASES
from tests.models import build_case as _build
from tests.models import case_inputs as _inputs
from tests.models import Case, plain_at

float64 = pytest.mark.usefixtures("float64_default")

# -- tolerances (float64), set once --------------------------------------------------------------------
LAM_RTOL = 1e-12  # lam against the formula with an independently computed (numpy) sigma_max
KAPPA_SLACK = 1e-9  # kappa(W_P + C_P) <= t (1 + this): the Weyl bound can be attained
BLOCK_PROPERTY = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
# Fewer examples on whole models: each one is an apply on a fresh copy (two busy CPU cores).
MODEL_PROPERTY = settings(
    max_examples=12, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
TARGETS = st.floats(1.01, 50.0)

# Real models: fused timm qkv, separate HF q/k/v, fused (in, out) Conv1D, rectangular 32 x 24 blocks
# (Swin: 2 heads x 16 over width 24, so per-head "auto" is refused there; see the errors below).
MODEL_CASES = {
    "timm-vit": next(c for c in CORE_CASES if c.name == "timm-vit"),
    "declared-per-head-interleaved": next(c for c in CORE_CASES if c.name == "declared-per-head-interleaved"),
    "hf-bert": adapter_case("hf-bert"),
    "hf-gpt2": adapter_case("hf-gpt2"),
    "timm-swin": adapter_case("timm-swin"),
}
RECTANGULAR = {"timm-swin"}  # block_out > in_features: per-head "auto" is refused
# (case, granularity) pairs that apply; the equivalence tests run on each.
APPLICABLE = [
    (name, granularity)
    for name in MODEL_CASES
    for granularity in ("head", "projection")
    if not (name in RECTANGULAR and granularity == "head")
]
APPLICABLE_IDS = [f"{name}-{granularity}" for name, granularity in APPLICABLE]


# -- independent reference: gather, sigma_max by numpy, the formula ---------------------------------------
def _rows(layout: ProjectionLayout, out_features: int, role: str) -> np.ndarray:
    """Output rows of ``role``'s logical block, heads in order, gathered without ProjectionLayout."""
    blocks, heads = len(layout.roles), layout.num_heads
    block_out = out_features // blocks
    head_dim = block_out // heads
    position = layout.roles.index(role)
    if layout.arrangement == "blocked":
        return position * block_out + np.arange(block_out)
    return np.concatenate([h * blocks * head_dim + position * head_dim + np.arange(head_dim) for h in range(heads)])


def _parts(layout: ProjectionLayout, granularity: str) -> int:
    return layout.num_heads if granularity == "head" else 1


def hand_lams(weight: torch.Tensor, layout: ProjectionLayout, role: str, granularity: str, target: float) -> np.ndarray:
    """lam of every part of ``role``'s block: sigma_max (t + 1) / (t - 1), sigma_max by numpy. (parts,)"""
    w = layout.out_in(weight.detach()).double().numpy()  # (out, in)
    block = w[_rows(layout, w.shape[0], role)]  # (block_out, in)
    parts = _parts(layout, granularity)
    sigma = np.array([np.linalg.norm(p, 2) for p in np.split(block, parts)])  # (parts,)
    return sigma * (target + 1.0) / (target - 1.0)


def hand_correction(
    weight: torch.Tensor, layout: ProjectionLayout, granularity: str, target: float, numeric: dict | None = None
) -> torch.Tensor:
    """C in the stored orientation: each part's lam times its rows of eye(block_out, in), per role
    (``numeric``: roles with a fixed lam instead)."""
    numeric = numeric or {}
    w = layout.out_in(weight.detach())
    out, inp = w.shape
    block_out = out // len(layout.roles)
    c = torch.zeros(out, inp, dtype=torch.float64)
    for role in layout.roles:
        if role in numeric:
            per_row = torch.full((block_out,), numeric[role], dtype=torch.float64)
        else:
            lams = hand_lams(weight, layout, role, granularity, target)
            per_row = torch.from_numpy(np.repeat(lams, block_out // len(lams)))  # (block_out,)
        rows = torch.from_numpy(_rows(layout, out, role))
        c[rows] = per_row[:, None] * torch.eye(block_out, inp, dtype=torch.float64)  # (block_out, in)
    return layout.out_in(c).to(weight.dtype)


def _config(case: Case, **fields) -> speccond.SpectralConfig:
    return speccond.SpectralConfig(**{**case.config, "lam": "auto", **fields})


def _apply(model: nn.Module, config: speccond.SpectralConfig) -> speccond.SpectralReport:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # adapter notes are tested elsewhere
        return speccond.apply(model, config)


def _run(model: nn.Module, inputs: tuple) -> torch.Tensor:
    with torch.no_grad():
        return model(*inputs)


def _check_parts(layout, stored, effective, granularity, target, role, chosen) -> None:
    """Each part of ``role``: lam is the formula, meets the Weyl bound, and kappa(W_P + C_P) <= t."""
    expected = hand_lams(stored, layout, role, granularity, target)
    parts = len(expected)
    heads_per_part = layout.num_heads // parts
    w = layout.out_in(stored.detach()).double()
    eff = layout.out_in(effective.detach()).double()
    rows = torch.from_numpy(_rows(layout, w.shape[0], role))
    head_out = len(rows) // layout.num_heads
    on_diagonal = [h * head_out < min(len(rows), w.shape[1]) for h in range(layout.num_heads)]
    # A head whose rows all lie past a tall block's diagonal carries no lam (reported as 0.0).
    assert [lam != 0 for lam in chosen] == on_diagonal
    for part, (w_part, eff_part) in enumerate(zip(w[rows].chunk(parts), eff[rows].chunk(parts))):
        lam = chosen[part * heads_per_part]
        in_part = chosen[part * heads_per_part : (part + 1) * heads_per_part]
        assert {x for x in in_part if x != 0} == {lam}  # one lam per part
        assert lam == pytest.approx(float(expected[part]), rel=LAM_RTOL), (role, part)
        sigma_max = float(torch.linalg.matrix_norm(w_part, ord=2))
        assert weyl_identity_bound(lam, sigma_max) <= target * (1 + LAM_RTOL), (role, part)
        assert kappa(eff_part) <= target * (1 + KAPPA_SLACK), (role, part)


# 1. the formula ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "sigma_max, target, expected",
    [(1.0, 2.0, 3.0), (0.5, 2.0, 1.5), (2.0, 3.0, 4.0), (1.0, 1.5, 5.0), (1.0, 11.0, 1.2)],
)
def test_auto_lam_hand_examples(sigma_max, target, expected):
    assert auto_lam(sigma_max, target) == pytest.approx(expected, rel=1e-15)
    assert weyl_identity_bound(auto_lam(sigma_max, target), sigma_max) == pytest.approx(target, rel=1e-12)


@BLOCK_PROPERTY
@given(st.floats(1e-8, 1e8), TARGETS)
def test_auto_lam_meets_the_weyl_bound(sigma_max, target):
    lam = auto_lam(sigma_max, target)
    assert lam > sigma_max
    assert weyl_identity_bound(lam, sigma_max) == pytest.approx(target, rel=1e-9)


@pytest.mark.parametrize("target", [1.0, 0.5, -2.0])
def test_auto_lam_refuses_target_at_or_below_one(target):
    with pytest.raises(ValueError, match="target_kappa > 1"):
        auto_lam(1.0, target)


def test_auto_lam_rectangular_diagonal_example():
    """W = diag(s, -s) padded to 3 x 2 (tall) and 2 x 3 (wide): W + lam I_k has singular values lam + s and
    lam - s, so kappa is exactly the bound, t."""
    for shape in ((3, 2), (2, 3)):
        w = torch.zeros(shape, dtype=torch.float64)
        w[0, 0], w[1, 1] = 0.7, -0.7
        lam = auto_lam(0.7, 2.0)  # 2.1
        assert kappa(w + lam * torch.eye(*shape, dtype=torch.float64)) == pytest.approx(2.0, rel=1e-12)


# 2. property: every part of every block, SpectralCorrection directly ------------------------------------------
@st.composite
def auto_block_cases(draw):
    """A qkv layout, a float64 weight (square, tall or wide blocks; rows scaled unevenly), "auto" or numeric
    lam per role, a granularity and a target."""
    heads = draw(st.integers(1, 4))
    head_dim = draw(st.integers(1, 6))
    block_out = heads * head_dim
    in_features = draw(st.integers(1, 24))
    granularity = draw(st.sampled_from(("head", "projection")))
    if granularity == "head" and heads > 1:
        in_features = max(in_features, block_out)  # per-head "auto" needs every head on the diagonal
    layout = ProjectionLayout(
        roles="qkv",
        num_heads=heads,
        storage=draw(st.sampled_from(("out_in", "in_out"))),
        arrangement=draw(st.sampled_from(("blocked", "per_head"))),
    )
    out_features = 3 * block_out
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(("gaussian", "graded rows", "low rank")))
    if kind == "low rank":
        w = rng.standard_normal((out_features, 1)) @ rng.standard_normal((1, in_features))
    else:
        w = rng.standard_normal((out_features, in_features))
    if kind == "graded rows":  # heads and blocks at very different scales
        w *= 10.0 ** rng.uniform(-3, 3, size=(out_features, 1))
    w *= 10.0 ** draw(st.floats(-4.0, 4.0))
    weight = torch.from_numpy(w if layout.storage == "out_in" else w.T.copy())
    scales = {role: draw(st.sampled_from(("auto", "auto", 0.0, 4.0))) for role in "qkv"}
    target = draw(TARGETS)
    note(f"layout={layout} in={in_features} kind={kind} scales={scales} granularity={granularity} t={target}")
    return layout, weight, scales, granularity, target


@BLOCK_PROPERTY
@given(auto_block_cases())
def test_block_auto_lam_meets_target_for_every_part(case):
    layout, weight, scales, granularity, target = case
    correction = SpectralCorrection(
        layout, weight.shape, scales, "identity", granularity, weight=weight, target_kappa=target
    )
    effective = correction(weight)
    for role, lam in scales.items():
        if lam == "auto":
            _check_parts(layout, weight, effective, granularity, target, role, correction.head_lams(role))
    numeric = {role: lam for role, lam in scales.items() if lam != "auto"}
    torch.testing.assert_close(
        correction.dense(), hand_correction(weight, layout, granularity, target, numeric), rtol=LAM_RTOL, atol=0
    )
    # The activation backend is the same map (per-head lams along contiguous rows or by index).
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((2, 3, layout.out_in(weight).shape[1])))
    w_out_in = layout.out_in(weight)
    y = correction.add_to_output(x, x @ w_out_in.T)  # (B, N, out)
    expected = x @ layout.out_in(effective).T
    atol = 1e-12 * (x.abs() @ layout.out_in(effective).abs().T).max().item()
    torch.testing.assert_close(y, expected, rtol=0, atol=atol)


# 3. property: real models with random weights -------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _float64_model(name: str) -> nn.Module:
    torch.manual_seed(0)
    return MODEL_CASES[name].build().double().eval()


@pytest.mark.parametrize("name, granularity", APPLICABLE, ids=APPLICABLE_IDS)
@MODEL_PROPERTY
@given(
    seed=st.integers(0, 2**32 - 1), log_scale=st.floats(-3.0, 3.0), target=TARGETS,
    lam_v=st.sampled_from((None, 0.0, 5.0)),
)
def test_model_auto_lam_meets_target_for_every_block_and_head(name, granularity, seed, log_scale, target, lam_v):
    case = MODEL_CASES[name]
    model = copy.deepcopy(_float64_model(name))
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for param in case.params:
            weight = model.get_parameter(param)
            rows = 10.0 ** rng.uniform(-2, 2, size=(weight.shape[0], 1))  # uneven heads and blocks
            weight.copy_(torch.from_numpy(rng.standard_normal(tuple(weight.shape)) * rows * 10.0**log_scale))
    _apply(model, _config(case, granularity=granularity, target_kappa=target, lam_v=lam_v))
    found = {a.qualified_name: a for a in attachments(model)}
    corrected = {p for p, layout in case.params.items() if layout.roles != "v" or lam_v != 0.0}
    assert set(found) == corrected
    for param, item in found.items():
        layout = case.params[param]
        for role in "qk" + ("v" if lam_v is None else ""):
            if role in layout.roles:
                _check_parts(layout, item.stored_weight(), item.effective_weight(), granularity, target, role,
                             item.correction.head_lams(role))
        if lam_v is not None and "v" in layout.roles:
            assert item.correction.scales["v"] == lam_v


# 4. equivalence with the hand-built W + lam_P I --------------------------------------------------------------
@float64
@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("name, granularity", APPLICABLE, ids=APPLICABLE_IDS)
def test_output_equals_plain_model_at_hand_built_w_plus_lam_i(name, granularity, backend):
    case = MODEL_CASES[name]
    if backend == "activation" and not case.activation_ok:
        pytest.skip("activation backend refused for this module")
    model, inputs = _build(case), _inputs(case)
    before = {n: model.get_parameter(n).detach().clone() for n in case.params}
    hand = {n: hand_correction(w, case.params[n], granularity, 2.0) for n, w in before.items()}
    reference = plain_at(model, {n: before[n] + hand[n] for n in case.params})
    _apply(model, _config(case, granularity=granularity, backend=backend))
    for item in attachments(model):
        layout = item.correction.layout
        torch.testing.assert_close(item.effective_weight() - before[item.qualified_name], hand[item.qualified_name],
                                   rtol=LAM_RTOL, atol=0)
        # Still the sparse representation: one value per diagonal entry of each q/k/v block, no dense C.
        assert not hasattr(item.correction, "matrix")
        diagonals = [min(item.correction.block_widths[r], item.correction.in_features) for r in layout.roles]
        assert item.correction.values.numel() == sum(diagonals)
    assert_close(_run(model, inputs), _run(reference, inputs))


# 5. refresh: lam follows the weights only when asked ------------------------------------------------------------
@float64
@pytest.mark.parametrize("backend", ["weight", "activation"])
def test_lam_stays_fixed_while_training_and_refresh_rechooses_it(backend):
    case = MODEL_CASES["timm-vit"]
    model, inputs = _build(case).train(), _inputs(case)
    _apply(model, _config(case, backend=backend, lam_v=4.0))
    found = list(attachments(model))
    chosen = [item.correction.values.clone() for item in found]
    assert all(not item.correction.values.requires_grad for item in found)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model(*inputs).square().mean().backward()
    optimizer.step()
    with torch.no_grad():
        for item in found:
            item.stored_weight().mul_(7.0)  # sigma_max x 7: a fresh lam would be 7x larger
    for item, values in zip(found, chosen):  # nothing but refresh moves lam: C is fixed in between
        assert torch.equal(item.correction.values, values)
        stored = item.stored_weight().detach()
        assert torch.equal(item.effective_weight().detach(), stored + item.correction.dense(stored.dtype))

    assert speccond.refresh(model) == 2  # one fused qkv per block, two blocks
    for item in found:
        layout, stored = item.correction.layout, item.stored_weight().detach()
        expected = hand_correction(stored, layout, "head", 2.0, {"v": 4.0})
        torch.testing.assert_close(item.correction.dense(), expected, rtol=LAM_RTOL, atol=0)
        for role in "qk":
            _check_parts(layout, stored, item.effective_weight(), "head", 2.0, role, item.correction.head_lams(role))
        assert set(item.correction.head_lams("v")) == {4.0}  # numeric lams are not re-chosen


def test_refresh_counts_auto_corrections_and_leaves_numeric_ones():
    mixed, numeric = CORE_CASES[0].build(), CORE_CASES[0].build()
    _apply(mixed, speccond.SpectralConfig(lam=10.0, lam_k="auto"))
    _apply(numeric, speccond.SpectralConfig(lam=10.0))
    assert speccond.refresh(mixed) == 2 and speccond.refresh(numeric) == 0


# 6. state_dict, merge --------------------------------------------------------------------------------------------
@float64
@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("name", ["timm-vit", "hf-bert", "declared-per-head-interleaved"])
def test_state_dict_round_trip_reproduces_outputs_and_lams(name, backend):
    case = MODEL_CASES[name]
    if backend == "activation" and not case.activation_ok:
        pytest.skip("activation backend refused for this module")
    config = _config(case, backend=backend)
    trained = _build(case).train()
    _apply(trained, config)
    optimizer = torch.optim.SGD(trained.parameters(), lr=0.5)
    trained(*_inputs(case)).square().mean().backward()
    optimizer.step()
    speccond.refresh(trained)  # lams chosen from the trained weights: a fresh model's lams differ
    state = trained.state_dict()
    assert sum(key.endswith("values") for key in state) == len(case.params)  # auto lams are saved

    fresh = _build(case, seed=123)
    _apply(fresh, config)
    assert speccond.describe(fresh).rows[0].head_lams != speccond.describe(trained).rows[0].head_lams
    fresh.load_state_dict(state)
    trained.eval()
    inputs = _inputs(case)
    assert torch.equal(_run(fresh, inputs), _run(trained, inputs))
    assert [r.head_lams for r in speccond.describe(fresh)] == [r.head_lams for r in speccond.describe(trained)]


def test_numeric_lam_saves_no_values():
    model = CORE_CASES[0].build()
    _apply(model, speccond.SpectralConfig(lam=10.0))
    assert not any(key.endswith("values") for key in model.state_dict())


@float64
@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("name, granularity", APPLICABLE, ids=APPLICABLE_IDS)
def test_remove_merge_bakes_in_w_plus_lam_i(name, granularity, backend):
    case = MODEL_CASES[name]
    if backend == "activation" and not case.activation_ok:
        pytest.skip("activation backend refused for this module")
    model, inputs = _build(case), _inputs(case)
    before = {n: model.get_parameter(n).detach().clone() for n in case.params}
    keys, classes = list(model.state_dict()), [type(m) for m in model.modules()]
    _apply(model, _config(case, granularity=granularity, backend=backend))
    conditioned = _run(model, inputs)
    speccond.remove(model, merge=True)
    assert not speccond.is_conditioned(model)
    assert list(model.state_dict()) == keys and [type(m) for m in model.modules()] == classes
    for n, w in before.items():
        expected = hand_correction(w, case.params[n], granularity, 2.0)
        torch.testing.assert_close(model.get_parameter(n).detach() - w, expected, rtol=LAM_RTOL, atol=1e-14)
    assert_close(_run(model, inputs), conditioned)


# 7. errors -----------------------------------------------------------------------------------------------------
BAD_CONFIGS = [
    ({"lam": "auto", "correction": "svd"}, ValueError,
     r"lam='auto' \(for q, k, v\) works only with correction='identity', got correction='svd'"),
    ({"lam": 1.0, "lam_v": "auto", "correction": "svd"}, ValueError, r"lam='auto' \(for v\) works only with"),
    ({"lam": "auto", "target_kappa": 1.0}, ValueError, r"target_kappa must be finite and > 1"),
    ({"lam": "auto", "target_kappa": 0.5}, ValueError, r"target_kappa must be finite and > 1"),
    ({"lam": "auto", "target_kappa": float("inf")}, ValueError, r"target_kappa must be finite"),
    ({"lam": "auto", "target_kappa": float("nan")}, ValueError, r"target_kappa must be finite"),
    ({"lam": "auto", "target_kappa": "2"}, TypeError, r"target_kappa must be a number > 1, got str '2'"),
    ({"lam": "auto", "target_kappa": True}, TypeError, r"target_kappa must be a number"),
    ({"lam": "Auto"}, TypeError, r"lam must be a number or 'auto', got str 'Auto'"),
    ({"lam_k": "automatic"}, TypeError, r"lam_k must be a number or 'auto'"),
]


@pytest.mark.parametrize("fields, error, message", BAD_CONFIGS, ids=[str(f) for f, _, _ in BAD_CONFIGS])
def test_bad_auto_config_is_a_clear_error(fields, error, message):
    with pytest.raises(error, match=message):
        speccond.SpectralConfig(**fields)


def test_auto_does_not_warn_and_numeric_roles_beside_it_still_do():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = speccond.SpectralConfig(lam="auto", target_kappa=1.1)
        speccond.SpectralConfig(lam_q="auto", lam_k="auto", lam_v=0.0)
    assert config.role_scales() == {"q": "auto", "k": "auto", "v": "auto"} and config.auto_roles() == ("q", "k", "v")
    assert config.to_dict()["lam"] == "auto" and config.to_dict()["target_kappa"] == 1.1
    with pytest.warns(UserWarning, match=r"\{'v': 1\.0\} in \(0, 2\]"):
        speccond.SpectralConfig(lam="auto", lam_v=1.0)


def test_all_zero_head_is_named_and_leaves_the_model_untouched():
    model = CORE_CASES[0].build()
    with torch.no_grad():
        model.blocks[1].attn.qkv.weight[64 + 32 : 64 + 48] = 0.0  # head 2 of the k block of blocks.1
    state = {k: v.clone() for k, v in model.state_dict().items()}
    message = (
        r"blocks\.1\.attn\.qkv\.weight \(timm.*\): .*head 2 of the k block has sigma_max = 0\.0"
        r".*give lam_k a number"
    )
    with pytest.raises(ValueError, match=message):
        speccond.apply(model, speccond.SpectralConfig(lam="auto"))
    assert not speccond.is_conditioned(model)  # blocks.0 was fine, but nothing was attached
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    speccond.apply(model, speccond.SpectralConfig(lam="auto", lam_k=3.0))  # the fix the message gives


def test_per_head_auto_on_rectangular_blocks_is_refused_and_projection_works():
    model = adapter_case("timm-swin").build()
    with pytest.raises(ValueError, match=r"(?s)layers\.0\.blocks\.0\.attn\.qkv\.weight .*q/k/v block is 32 x 24 "
                                         r"with 2 heads of 16 rows.*granularity='projection'"):
        _apply(model, speccond.SpectralConfig(lam="auto"))
    assert not speccond.is_conditioned(model)
    report = _apply(model, speccond.SpectralConfig(lam="auto", granularity="projection"))
    assert all(row.kappa_eff <= 2.0 + 1e-4 for row in report)  # float32 weights, float64 kappa


def test_refresh_error_names_the_projection_and_stores_nothing():
    model = CORE_CASES[0].build()
    speccond.apply(model, speccond.SpectralConfig(lam="auto"))
    before = [item.correction.values.clone() for item in attachments(model)]
    with torch.no_grad():
        model.blocks[1].attn.qkv.parametrizations.weight.original[:16] = 0.0  # head 0 of the q block
    with pytest.raises(ValueError, match=r"speccond\.refresh: blocks\.1\.attn\.qkv\.weight: .*head 0 of the q block"):
        speccond.refresh(model)
    assert all(torch.equal(item.correction.values, v) for item, v in zip(attachments(model), before))


# 8. the report ---------------------------------------------------------------------------------------------------
def test_report_shows_the_chosen_lam_per_block_and_per_head():
    case = MODEL_CASES["timm-vit"]
    model = _build(case)
    w = model.blocks[0].attn.qkv.weight.detach().clone()
    layout = case.params["blocks.0.attn.qkv.weight"]
    report = speccond.apply(model, speccond.SpectralConfig(lam="auto", granularity="projection", lam_v=5.0))
    q, k, v = report.rows[:3]
    lam_q = float(hand_lams(w, layout, "q", "projection", 2.0)[0])
    assert q.correction == f"identity lam=auto({lam_q:.3g})" and q.scale == pytest.approx(lam_q, rel=1e-6)
    assert q.head_lams == pytest.approx((lam_q,) * 4, rel=1e-6)
    assert q.kappa_eff <= 2.0 + 1e-4 and k.kappa_eff <= 2.0 + 1e-4
    assert v.correction == "identity lam=5" and v.head_lams == (5.0,) * 4
    text = str(report)
    assert f"identity lam=auto({lam_q:.3g})" in text
    data = json.loads(report.to_json())
    assert data["config"]["lam"] == "auto" and data["config"]["target_kappa"] == 2.0
    assert data["rows"][0]["head_lams"] == pytest.approx([lam_q] * 4, rel=1e-6)

    per_head = _build(case)
    row = speccond.apply(per_head, speccond.SpectralConfig(lam="auto")).rows[0]
    lams = hand_lams(w, layout, "q", "head", 2.0)  # (4,): differ per head
    assert row.head_lams == pytest.approx(tuple(lams), rel=1e-6)
    assert row.correction == f"identity lam=auto({lams.min():.3g}..{lams.max():.3g})"
    assert re.search(r"identity lam=auto\([\d.]+\.\.[\d.]+\)", str(speccond.describe(per_head)))
    assert row.head_kappa_eff_max <= 2.0 + 1e-4
