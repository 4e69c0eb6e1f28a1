"""Order and mode traps (docs/RELIABILITY_LIBRARY.md, "Order and mode"): apply after DistributedDataParallel,
apply under torch.inference_mode, and verify on NaN or empty inputs. Each is refused with what to do, or works."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.distributed as dist
from torch import nn

import speccond


def encoder() -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)


def apply(model, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # lam = 10's collapse warning
        return speccond.apply(model, speccond.SpectralConfig(lam=10.0), **kwargs)


def snapshot(model: nn.Module) -> dict:
    return {key: value.clone() for key, value in model.state_dict().items()}


def unchanged(model: nn.Module, before: dict, types: list) -> bool:
    after = model.state_dict()
    same = after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    return same and [type(m) for m in model.modules()] == types


# -- DistributedDataParallel first ------------------------------------------------------------------------
@pytest.fixture
def process_group(tmp_path):
    """A one-process gloo group: DDP wraps a model exactly as on many processes."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("backend", ["weight", "activation"])
def test_apply_refuses_a_model_already_wrapped_in_ddp(process_group, backend):
    wrapped = nn.parallel.DistributedDataParallel(encoder())
    before, types = snapshot(wrapped), [type(m) for m in wrapped.modules()]
    config = speccond.SpectralConfig(lam=10.0, backend=backend)
    with pytest.raises(ValueError, match=r"DistributedDataParallel.*before wrapping"):
        speccond.apply(wrapped, config)
    assert unchanged(wrapped, before, types) and not speccond.is_conditioned(wrapped)
    inner = encoder()  # the right order: apply, then wrap; training steps then run
    apply(inner)
    ddp = nn.parallel.DistributedDataParallel(inner)
    for _ in range(2):
        ddp(torch.randn(2, 5, 16)).sum().backward()


# -- inference_mode -----------------------------------------------------------------------------------------
def test_apply_and_remove_under_inference_mode_leave_a_model_that_trains():
    model = encoder()
    with torch.inference_mode():
        apply(model)
        eval_out = model(torch.randn(2, 5, 16))
    assert torch.isfinite(eval_out).all()
    assert not any(b.is_inference() for b in model.buffers())
    model(torch.randn(2, 5, 16)).sum().backward()  # the first backward once failed on inference buffers
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    with torch.inference_mode():
        speccond.refresh(model)
        speccond.remove(model)
    assert not any(t.is_inference() for t in list(model.parameters()) + list(model.buffers()))
    model.zero_grad()
    model(torch.randn(2, 5, 16)).sum().backward()


# -- verify on inputs that cannot show anything -------------------------------------------------------------
BAD_INPUTS = {
    "nan": lambda: torch.full((2, 5, 16), float("nan")),
    "empty batch": lambda: torch.randn(0, 5, 16),
    "empty sequence": lambda: torch.randn(2, 0, 16),
}


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_verify_blames_the_inputs_not_the_backend(bad):
    model = encoder()
    apply(model)
    with pytest.raises(ValueError) as error:
        speccond.verify(model, BAD_INPUTS[bad]())
    message = str(error.value)
    assert "backend" not in message and "example input" in message
    assert ("NaN" in message) if bad == "nan" else ("empty" in message and "(2, 0, 16)" in message or "(0, 5, 16)" in message)


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_apply_blames_the_inputs_and_leaves_a_good_model_untouched(bad):
    model = encoder()
    before, types = snapshot(model), [type(m) for m in model.modules()]
    with pytest.raises(ValueError, match="example input") as error:
        apply(model, verify_with=(BAD_INPUTS[bad](),))
    assert "backend" not in str(error.value)
    assert unchanged(model, before, types)
    apply(model, verify_with=(torch.randn(2, 5, 16),))  # the same model, a good input: conditioned
    assert speccond.is_conditioned(model)


def test_verify_accepts_an_additive_mask_with_minus_inf():
    """-inf is how an additive attention mask says 'never attend': not a bad input."""
    model = encoder()
    apply(model)
    mask = torch.zeros(5, 5).masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
    assert speccond.verify(model, torch.randn(2, 5, 16), mask=mask)
