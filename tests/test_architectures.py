"""The architecture table (docs/MODELS.md): every family of it (tests/architectures*.py), conditioned
exactly as the paper says or refused before anything changes, with verify and the head diagnostics
right on the model's own attention.

Per conditioned case, in float64: the projections found are exactly the listed ones with the listed
layouts, W_eff - W = lam I_k per block, and the model's outputs equal a plain copy whose weights were set
to W + lam I_k by hand (both backends where the activation backend applies); ``remove(merge=True)`` gives
plain modules, vanilla state_dict keys and the same outputs; ``verify`` passes on the model's default
settings; every head rebuilt by the diagnostics has the model's own attention probabilities. Per
refused case: apply raises the listed reason and the weights are untouched.
"""
from __future__ import annotations

import warnings

import pytest
import torch
from torch.nn.utils import parametrize

import speccond
from speccond.diagnostics.heads import head_cases
from speccond.layers import attention_layers
from tests.architectures import Arch, output_tensor
from tests.architectures_hf import CASES as HF_CASES
from tests.models import expected_identity, reference_at_w_plus_c

try:
    from tests.architectures_timm import CASES as TIMM_CASES
except ImportError:  # the timm half of the table is optional only while it is being written
    TIMM_CASES = []

CASES: list[Arch] = HF_CASES + TIMM_CASES
IDS = [c.name for c in CASES]
CONDITIONED = [c for c in CASES if c.refused is None]
REFUSED = [c for c in CASES if c.refused is not None]
LAM = {"q": 10.0, "k": 10.0, "v": 10.0}
pytestmark = pytest.mark.usefixtures("float64_default")


def _build(case: Arch) -> torch.nn.Module:
    torch.manual_seed(0)
    return case.build().double().eval()


def _inputs(case: Arch) -> dict:
    torch.manual_seed(1)
    return {k: v.double() if v.is_floating_point() else v for k, v in case.inputs().items()}


def _apply(model, case: Arch, **fields) -> speccond.SpectralReport:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # notes and the collapse warning are tested elsewhere
        return speccond.apply(model, speccond.SpectralConfig(**{"lam": 10.0, **case.config, **fields}))


def _run(model, inputs: dict) -> torch.Tensor:
    with torch.no_grad():
        return output_tensor(model(**inputs))


def _backends(cases: list[Arch]) -> list:
    return [
        pytest.param(case, backend, id=f"{case.name}-{backend}")
        for case in cases for backend in ("weight", "activation") if backend == "weight" or case.activation_ok
    ]


@pytest.mark.parametrize("case, backend", _backends(CONDITIONED))
def test_conditioned_exactly_as_declared(case, backend):
    model, inputs = _build(case), _inputs(case)
    before = {name: model.get_parameter(name).detach().clone() for name in case.params}
    reference = reference_at_w_plus_c(model, case.params, LAM)
    _apply(model, case, backend=backend)
    found = {a.qualified_name: a for a in speccond.core.backends.attachments(model)}
    assert set(found) == set(case.params)  # nothing missed, nothing extra
    for name, layout in case.params.items():
        assert found[name].correction.layout.to_dict() == layout.to_dict(), name
        change = found[name].effective_weight().detach() - before[name]
        assert torch.equal(change, expected_identity(before[name], layout, LAM)), name
    torch.testing.assert_close(_run(model, inputs), _run(reference, inputs), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("case", CONDITIONED, ids=[c.name for c in CONDITIONED])
def test_merge_gives_plain_modules_and_the_same_outputs(case):
    model, inputs = _build(case), _inputs(case)
    vanilla_keys = list(model.state_dict())
    _apply(model, case)
    conditioned = _run(model, inputs)
    speccond.remove(model, merge=True)
    assert not speccond.is_conditioned(model)
    assert not any(parametrize.is_parametrized(m) for m in model.modules())
    assert list(model.state_dict()) == vanilla_keys
    torch.testing.assert_close(_run(model, inputs), conditioned, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("case", CONDITIONED, ids=[c.name for c in CONDITIONED])
def test_verify_passes_with_the_models_default_settings(case):
    model, inputs = _build(case), _inputs(case)
    _apply(model, case)
    results = speccond.verify(model, **inputs)
    assert results and all("correction takes effect" in r.checks for r in results)


@pytest.mark.parametrize("case", CONDITIONED, ids=[c.name for c in CONDITIONED])
def test_head_diagnostics_equal_the_models_own_attention(case):
    """float32 tolerance: transformers' eager attention takes its softmax in float32 even for a float64 model,
    and with lam = 10 its logits reach several hundred, where float32 rounding alone is about 3e-5 relative
    (the rebuilt logits through a float32 softmax match the model's probabilities exactly)."""
    model, inputs = _build(case), _inputs(case)
    _apply(model, case)
    if case.diagnostics_refused is not None:
        with pytest.raises(ValueError, match=case.diagnostics_refused):
            head_cases(model, inputs, 0)
        return
    names = [layer.name for layer in attention_layers(model)]
    own = case.attention(model, inputs)  # {attention module name: (B, H, N, N)}
    assert own, "the case lists no attention layers to compare"
    for name, probabilities in own.items():
        heads = head_cases(model, inputs, names.index(name))
        assert len(heads) == probabilities.shape[1], name
        for head, rebuilt in enumerate(heads):
            torch.testing.assert_close(
                rebuilt.probabilities(), probabilities[:, head].to(torch.float64), rtol=1e-4, atol=1e-5,
                msg=lambda m: f"{name} head {head}: {m}",
            )


@pytest.mark.parametrize("case", REFUSED, ids=[c.name for c in REFUSED])
def test_refused_before_anything_changes(case):
    model = _build(case)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=case.refused):
        _apply(model, case)
    assert not speccond.is_conditioned(model)
    after = model.state_dict()
    assert list(after) == list(state) and all(torch.equal(after[k], state[k]) for k in state)


def test_readme_table_is_the_architecture_table():
    """docs/MODELS.md's supported-architecture table is generated from this table (scripts/architecture_table.py)."""
    from pathlib import Path

    from tests.scripts import load_script

    script = load_script("architecture_table")
    readme = (Path(__file__).parents[1] / "docs" / "MODELS.md").read_text()
    assert script.readme_block(readme) == script.table(), "run scripts/architecture_table.py --write"


@pytest.mark.parametrize("name", ["timm-eva", "timm-beit"])
def test_verify_zeroes_separate_q_biases_of_a_fused_qkv(name):
    """EVA and BEiT add q_bias / v_bias to a bias-free qkv with F.linear; trained (non-zero) biases must not
    make verify fail on a correctly conditioned model."""
    case = next(c for c in CASES if c.name == name)
    model, inputs = _build(case), _inputs(case)
    with torch.no_grad():
        for module_name, module in model.named_modules():
            for role in "qv":
                bias = getattr(module, f"{role}_bias", None)
                if isinstance(bias, torch.nn.Parameter):
                    bias.normal_()
    _apply(model, case)
    assert speccond.verify(model, **inputs)


def test_a_relative_of_a_rebuilt_family_is_refused_not_rebuilt_as_its_cousin():
    """Llama 4 shares the q_proj/k_proj/v_proj adapter with Llama but not its logits (complex RoPE, L2 q/k
    norm, attention temperature): the head diagnostics refuse it instead of rebuilding it as Llama."""
    import transformers

    config = transformers.Llama4TextConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        intermediate_size=64, intermediate_size_mlp=64, vocab_size=64, num_local_experts=2, pad_token_id=0,
        bos_token_id=1, eos_token_id=2,
    )
    torch.manual_seed(0)
    model = transformers.Llama4TextModel(config).eval()
    _apply(model, CASES[0])
    with pytest.raises(ValueError, match="Llama4TextAttention is not among the families"):
        head_cases(model, {"input_ids": torch.randint(3, 64, (1, 6))}, 0)
