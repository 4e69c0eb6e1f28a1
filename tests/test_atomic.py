"""apply, remove and refresh are all or nothing (docs/RELIABILITY_LIBRARY.md).

A failure at the k-th module (its attach, detach or store raises, before or after doing its work; an FSDP
DTensor error is one such) must leave the model exactly as it was before the call: outputs bit for bit,
``is_conditioned``, the state_dict (keys in order, every tensor), the class of every module, the forward
hooks, and the Parameter objects (so optimisers built before keep working). And the model must still
take the call afterwards, giving what an untouched copy gives. Float64, on a 3-block timm ViT (three
fused qkv projections, so k = 0, 1, 2 is the first, a middle and the last module).
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import speccond
from speccond.core.correction import SpectralCorrection
from tests.models import InterleavedAttention

pytestmark = pytest.mark.usefixtures("float64_default")

# The verb: where the function it calls once per module lives (the failure is injected there), its name.
VERBS = {
    "apply": (speccond.api, "attach"),
    "remove-merge": (speccond.api, "detach"),
    "remove-unmerge": (speccond.api, "detach"),
    "refresh": (SpectralCorrection, "store"),
}


class Injected(RuntimeError):
    """The failure the tests inject."""


def _vit() -> nn.Module:
    import timm

    torch.manual_seed(0)
    return timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=2,
        num_classes=5,
    ).eval()


def _images() -> torch.Tensor:
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))  # (B, C, H, W)


def _state(model: nn.Module, inputs: tuple) -> dict:
    """Everything the guarantee covers, read from ``model`` as it stands."""
    with torch.no_grad():
        output = model(*inputs)
    return {
        "output": output,
        "conditioned": speccond.is_conditioned(model),
        "state_dict": [(key, value.detach().clone()) for key, value in model.state_dict().items()],
        "classes": [(name, type(module)) for name, module in model.named_modules()],
        "hooks": [(name, list(module._forward_hooks.values())) for name, module in model.named_modules()],
        "parameters": [(name, id(p)) for name, p in model.named_parameters()],
    }


def _assert_same(actual: dict, expected: dict, same_objects: bool = True) -> None:
    """``actual`` equals ``expected``; with ``same_objects``, the classes, hooks and Parameters are the very
    objects (the same model before and after); without, of the same kind (a model and its deep copy)."""
    assert torch.equal(actual["output"], expected["output"])
    assert actual["conditioned"] == expected["conditioned"]
    assert [key for key, _ in actual["state_dict"]] == [key for key, _ in expected["state_dict"]]
    for (key, value), (_, reference) in zip(actual["state_dict"], expected["state_dict"]):
        assert torch.equal(value, reference), key
    assert [(n, len(h)) for n, h in actual["hooks"]] == [(n, len(h)) for n, h in expected["hooks"]]
    if same_objects:
        assert actual["classes"] == expected["classes"]
        assert actual["hooks"] == expected["hooks"]
        assert actual["parameters"] == expected["parameters"]
    else:  # a parametrized module's class is generated per module
        kind = lambda classes: [(n, c.__name__, c.__mro__[1:]) for n, c in classes]  # noqa: E731
        assert kind(actual["classes"]) == kind(expected["classes"])
        assert [n for n, _ in actual["parameters"]] == [n for n, _ in expected["parameters"]]


def _failing(real, k: int, when: str):
    """``real``, except that its k-th call (from 0) raises, before doing anything or after finishing."""
    calls = []

    def wrapper(*args, **kwargs):
        calls.append(None)
        if len(calls) - 1 == k and when == "before":
            raise Injected(f"call {k}, before")
        result = real(*args, **kwargs)
        if len(calls) - 1 == k:
            raise Injected(f"call {k}, after")
        return result

    return wrapper


def _call(verb: str, model: nn.Module, config: speccond.SpectralConfig) -> None:
    if verb == "apply":
        speccond.apply(model, config)
    elif verb == "refresh":
        speccond.refresh(model)
    else:
        speccond.remove(model, merge=verb == "remove-merge")


def _check(monkeypatch, model: nn.Module, inputs: tuple, verb: str, config, k: int, when: str) -> None:
    """Inject a failure at the k-th module of ``verb``; the model must come out exactly as it went in, and
    then take the call as an untouched copy does."""
    owner, name = VERBS[verb]
    if verb != "apply":
        speccond.apply(model, config)
    if verb == "refresh":  # move W, so that refresh has something to change
        with torch.no_grad():
            for found in speccond.core.backends.attachments(model):
                found.stored_weight().add_(0.1 * torch.randn_like(found.stored_weight()))
    reference = copy.deepcopy(model)
    before = _state(model, inputs)
    with monkeypatch.context() as patch:
        patch.setattr(owner, name, _failing(getattr(owner, name), k, when))
        with pytest.raises(Injected):
            _call(verb, model, config)
    _assert_same(_state(model, inputs), before)

    _call(verb, model, config)
    _call(verb, reference, config)
    after = _state(model, inputs)
    _assert_same(after, _state(reference, inputs), same_objects=False)
    assert after["conditioned"] != before["conditioned"] or not torch.equal(after["output"], before["output"])


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("k", [0, 1, 2])
@pytest.mark.parametrize("init", ["add", "preserve"])
@pytest.mark.parametrize("backend", ["weight", "activation"])
@pytest.mark.parametrize("verb", list(VERBS))
def test_a_failure_at_the_kth_module_leaves_the_model_as_it_was(monkeypatch, verb, backend, init, k, when):
    config = speccond.SpectralConfig(correction="svd", backend=backend, init=init)  # dense C: W - C + C != W
    _check(monkeypatch, _vit(), (_images(),), verb, config, k, when)


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("k", [0, 1, 2])
@pytest.mark.parametrize("verb", list(VERBS))
def test_a_failure_at_the_kth_of_three_corrections_on_one_module_leaves_it_as_it_was(monkeypatch, verb, k, when):
    """nn.MultiheadAttention with separate q, k, v weights: three parametrizations on one module, so the
    module is half done when the second or third fails."""
    from tests.models import CrossAttention

    torch.manual_seed(0)
    model = CrossAttention().eval()
    inputs = (torch.randn(2, 5, 24), torch.randn(2, 6, 16), torch.randn(2, 6, 20))  # q, k, v: (B, N, D_role)
    _check(monkeypatch, model, inputs, verb, speccond.SpectralConfig(correction="svd", init="preserve"), k, when)


def _declared_blocked() -> dict:
    """InterleavedAttention's rows are (H, 3, dh); declared blocked (q | k | v) is wrong: verify says so."""
    return {"layouts": {r"to_qkv\.weight$": speccond.ProjectionLayout("qkv", 3)}}


@pytest.mark.parametrize("correction", ["identity", "svd"])
@pytest.mark.parametrize("init", ["add", "preserve"])
@pytest.mark.parametrize("backend", ["weight", "activation"])
def test_a_failed_verify_with_leaves_the_model_as_it_was(backend, init, correction):
    torch.manual_seed(0)
    model = nn.Sequential(InterleavedAttention(dim=24, heads=3), InterleavedAttention(dim=24, heads=3)).eval()
    inputs = (torch.randn(2, 7, 24),)  # (B, N, D)
    before = _state(model, inputs)
    config = speccond.SpectralConfig(**_declared_blocked(), backend=backend, init=init, correction=correction)
    with pytest.raises(speccond.VerificationError):
        speccond.apply(model, config, verify_with=inputs)
    _assert_same(_state(model, inputs), before)  # with "preserve" too: W itself comes back, not (W - C) + C


@pytest.mark.parametrize("init", ["add", "preserve"])
@pytest.mark.parametrize("backend", ["weight", "activation"])
def test_a_failed_collapse_measurement_leaves_the_model_as_it_was(monkeypatch, backend, init):
    model, inputs = _vit(), (_images(),)
    before = _state(model, inputs)

    def measure(*args, **kwargs):
        raise Injected("collapse measurement")

    monkeypatch.setattr("speccond.collapse.measure", measure)
    config = speccond.SpectralConfig(correction="svd", backend=backend, init=init)
    with pytest.raises(Injected):
        speccond.apply(model, config, verify_with=inputs)
    _assert_same(_state(model, inputs), before)


def test_an_optimizer_built_before_a_failed_remove_still_trains_the_weight_the_model_reads(monkeypatch):
    model, inputs = _vit().train(), (_images(),)
    speccond.apply(model, speccond.SpectralConfig(correction="svd"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    monkeypatch.setattr("speccond.api.detach", _failing(speccond.api.detach, 1, "after"))
    with pytest.raises(Injected):
        speccond.remove(model, merge=True)
    qkv = model.blocks[0].attn.qkv  # taken off, then put back
    stored, correction = qkv.parametrizations.weight.original, qkv.parametrizations.weight[0]
    assert any(p is stored for p in optimizer.param_groups[0]["params"])
    before = stored.detach().clone()
    model(*inputs).sum().backward()
    optimizer.step()
    assert not torch.equal(stored, before)
    assert torch.equal(qkv.weight, stored + correction.dense(stored.dtype))  # the model reads the trained W + C


class _Double(nn.Module):
    """A parametrization of the user's own (of a bias): b -> 2 b."""

    def forward(self, bias: torch.Tensor) -> torch.Tensor:
        return 2 * bias


@pytest.mark.parametrize("k", [0, 1, 2])
def test_a_failed_apply_on_modules_parametrized_before_takes_its_property_off_their_class(monkeypatch, k):
    """A qkv Linear whose bias the user parametrized already has a generated class: attaching to its weight
    adds a ``weight`` property to that class, which must not outlive a failed apply."""
    from torch.nn.utils import parametrize

    model, inputs = _vit(), (_images(),)
    for block in model.blocks:
        parametrize.register_parametrization(block.attn.qkv, "bias", _Double())
    before = _state(model, inputs)
    monkeypatch.setattr(speccond.api, "attach", _failing(speccond.api.attach, k, "after"))
    with pytest.raises(Injected):
        speccond.apply(model, speccond.SpectralConfig(correction="svd"))
    _assert_same(_state(model, inputs), before)
    assert all("weight" not in vars(type(block.attn.qkv)) for block in model.blocks)
