"""A model that holds attention speccond refuses (VOLO's outlook attention) is conditioned once that is excluded,
as the refusal says, and the diagnostics and the monitor then describe the rest, naming what they leave out;
a model whose every recognised attention is refused is refused by them, naming it and why."""
from __future__ import annotations

import re

import pytest
import torch

import speccond
from speccond.diagnostics import projection_spectra
from speccond.monitor import Monitor
from tests.architectures_timm import BUILD, VOLO_OUTLOOKERS, volo

pytest.importorskip("timm")

CONDITIONED = {  # VOLO's attention after its outlookers: three plain blocks and two class-attention blocks
    *(f"network.{i}.0.attn.qkv.weight" for i in (2, 3, 4)),
    *(f"post_network.{i}.attn.{name}.weight" for i in range(2) for name in ("q", "kv")),
}
LEFT_OUT = r"network\.0\.0\.attn is left out .*OutlookAttention.*no softmax over query-key scores"


def conditioned_volo(**apply_kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    model = volo()
    speccond.apply(model, speccond.SpectralConfig(lam=3.0, exclude=[VOLO_OUTLOOKERS]), **apply_kwargs)
    return model


def test_apply_with_an_example_input_conditions_the_rest_of_a_model_once_its_refused_attention_is_excluded():
    """The collapse measurement after verify read the whole model and raised the outlook attention's refusal,
    although the user had excluded it as that refusal says to."""
    model = conditioned_volo(verify_with=torch.randn(2, 3, 32, 32))
    assert {f"{row.module}.weight" for row in speccond.describe(model).rows} == CONDITIONED


def test_the_spectra_describe_the_rest_and_name_what_they_leave_out():
    model = conditioned_volo()
    with pytest.warns(UserWarning, match=LEFT_OUT):
        rows = projection_spectra(model, per_head=False)
    assert {row["module"] for row in rows} == {name.rsplit(".", 2)[0] for name in CONDITIONED}  # the attention modules
    assert all(row["kappa"] < row["kappa_w"] for row in rows)


def test_the_monitor_measures_the_rest_and_names_what_it_leaves_out():
    model = conditioned_volo()
    monitor = Monitor(model, writer=None, every=1, entropy=False)
    with pytest.warns(UserWarning, match=LEFT_OUT):
        with monitor.step(0):
            model(torch.randn(2, 3, 32, 32)).sum().backward()
    kappas = {name for name in monitor.last if re.fullmatch(r"speccond/kappa/layer\d+/[qkv]", name)}
    assert len(kappas) == 5 * 3  # q, k and v of each of the five conditioned attention layers


def test_a_model_whose_every_recognised_attention_is_refused_is_refused_by_the_diagnostics_naming_it():
    model = BUILD["coat"]()
    with pytest.raises(ValueError, match=r"projection_spectra: every attention module of CoaT that speccond recognises "
                       r"is one it refuses \(\d+, e\.g\. .*FactorAttnConvRelPosEnc.*no softmax\(q k\^T\)"):
        with pytest.warns(UserWarning, match="is left out"):
            projection_spectra(model)
