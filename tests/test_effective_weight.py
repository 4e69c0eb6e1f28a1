"""Writes into the weight backend's W + C reach the stored W (speccond.core.effective_weight).

Every way code writes a weight in place (``.data =``, ``.data += d``, ``.data.copy_``, an in-place op,
``torch.nn.init``) stores (written value) - C, so the module then reads the written value, as
``module.weight = value`` (torch's right_inverse) already did; reads leave W bit for bit.
"""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

from speccond import SpectralConfig
import speccond
from speccond.core.effective_weight import EffectiveWeight

WRITES = {
    "data_assign": lambda m, value: setattr(m.weight, "data", value),
    "data_iadd": lambda m, value: m.weight.data.__iadd__(value - m.weight.detach()),
    "data_plus_equals": None,  # spelled out in the test: `m.weight.data += d` (get, add in place, set)
    "data_copy": lambda m, value: m.weight.data.copy_(value),
    "inplace_no_grad": lambda m, value: _no_grad(lambda: m.weight.copy_(value)),
    "setitem": lambda m, value: _no_grad(lambda: m.weight.__setitem__(slice(None), value)),
}


def _no_grad(write):
    with torch.no_grad():
        write()


def conditioned(kind: str = "identity") -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.MultiheadAttention(8, 2, batch_first=True))
    config = SpectralConfig(backend="weight", lam=10.0) if kind == "identity" else SpectralConfig(correction="svd")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        speccond.apply(model, config)
    return model


class Linearish:
    """``m.weight`` of the conditioned nn.MultiheadAttention, as a Linear's weight would be used."""

    def __init__(self, model: nn.Module) -> None:
        self.attention = model[0]

    @property
    def weight(self) -> torch.Tensor:
        return self.attention.in_proj_weight

    @property
    def stored(self) -> torch.Tensor:
        return self.attention.parametrizations.in_proj_weight.original


@pytest.mark.parametrize("kind", ["identity", "svd"])
@pytest.mark.parametrize("write", list(WRITES))
def test_a_write_is_what_the_module_then_reads(kind, write):
    m = Linearish(conditioned(kind))
    value = torch.randn(24, 8, generator=torch.Generator().manual_seed(3))
    stored = m.stored
    if write == "data_plus_equals":
        delta = value - m.weight.detach()
        m.weight.data += delta
    else:
        WRITES[write](m, value)
    assert m.stored is stored  # the same Parameter, written in place (optimisers keep it)
    torch.testing.assert_close(m.weight.detach(), value, rtol=0, atol=4e-6)  # one rounding of - C + C
    assert speccond.describe(m.attention).rows  # still conditioned, as declared


def test_reads_leave_the_stored_weight_bit_for_bit():
    model = conditioned()
    m = Linearish(model)
    before = m.stored.detach().clone()
    x = torch.randn(2, 5, 8)
    model[0](x, x, x)[0].sum().backward()
    _ = m.weight.detach().clone(), m.weight.data.sum(), m.weight.T @ torch.ones(24), m.weight.shape
    assert torch.equal(m.stored.detach(), before)
    assert m.stored.grad is not None and m.stored.grad.abs().sum() > 0


def test_the_gradient_is_the_plain_models_at_w_plus_c():
    model = conditioned()
    plain = speccond.remove(copy.deepcopy(model), merge=True)  # a plain MultiheadAttention at W + C
    x = torch.randn(2, 5, 8)
    model[0](x, x, x)[0].square().sum().backward()
    plain[0](x, x, x)[0].square().sum().backward()
    assert torch.equal(Linearish(model).stored.grad, plain[0].in_proj_weight.grad)


def test_only_the_parameters_own_read_is_wrapped():
    m = Linearish(conditioned())
    assert type(m.weight) is EffectiveWeight
    assert type(m.weight.detach()) is torch.Tensor and type(m.weight * 2) is torch.Tensor
    correction = m.attention.parametrizations.in_proj_weight[0]
    assert type(correction(m.stored.detach())) is torch.Tensor  # not a Parameter: nothing to write back to


def test_a_write_of_another_shape_is_refused_and_changes_nothing():
    m = Linearish(conditioned())
    before = m.stored.detach().clone()
    with pytest.raises(ValueError, match=r"keep its shape \(24, 8\).*speccond.remove"):
        m.weight.data = torch.zeros(8, 8)
    assert torch.equal(m.stored.detach(), before)


def test_torch_nn_init_writes_reach_the_stored_weight():
    m = Linearish(conditioned())
    torch.nn.init.constant_(m.weight, 0.5)
    torch.testing.assert_close(m.weight.detach(), torch.full((24, 8), 0.5), rtol=0, atol=1e-6)
    torch.manual_seed(4)
    torch.nn.init.trunc_normal_(m.weight, std=0.02)  # several in-place steps; the last one is what is read
    assert m.weight.detach().abs().max() <= 2.0 and m.weight.detach().std() < 0.05
