"""The public API under bad input (docs/RELIABILITY_LIBRARY.md, "Bad input to the public API"): every argument of
apply / remove / verify / refresh / describe, SpectralConfig, ProjectionLayout, save_conditioned /
load_conditioned / save_pretrained / from_pretrained and the diagnostics entry points, given a bad value, raises
ValueError or TypeError whose message names that value, and leaves the model as it was: the same state_dict, bit
for bit, and the same module classes."""
from __future__ import annotations

import math
import warnings
from typing import Callable, NamedTuple

import pytest
import torch
from torch import nn

from speccond import diagnostics as dx
import speccond

X = (2, 5, 16)  # (B, N, D) of the example input


def encoder() -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)


def conditioned() -> nn.Module:
    model = encoder()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        speccond.apply(model, speccond.SpectralConfig(lam="auto"))
    return model


def inputs() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(*X)


class Case(NamedTuple):
    model: Callable[[], nn.Module]  # the model the call is given (checked unchanged afterwards)
    call: Callable  # (model, tmp_path) -> anything; must raise
    names: str  # the bad value as the message must show it


C = speccond.SpectralConfig
L = speccond.ProjectionLayout

CASES = {
    # apply
    "apply/model": Case(encoder, lambda m, p: speccond.apply("not a model"), "'not a model'"),
    "apply/config-str": Case(encoder, lambda m, p: speccond.apply(m, "lam=10"), "'lam=10'"),
    "apply/config-dict": Case(encoder, lambda m, p: speccond.apply(m, {"lam": 10}), "{'lam': 10}"),
    "apply/verify_with-keys": Case(encoder, lambda m, p: speccond.apply(m, verify_with={1: inputs()}), "[1]"),
    "apply/verify_with-empty": Case(encoder, lambda m, p: speccond.apply(m, verify_with=torch.randn(0, 5, 16)), "(0, 5, 16)"),
    "apply/verify_with-nan": Case(encoder, lambda m, p: speccond.apply(m, verify_with=inputs() * math.nan), "NaN"),
    "apply/targets-none-match": Case(encoder, lambda m, p: speccond.apply(m, C(targets="no_such_module")), "'no_such_module'"),
    "apply/already-conditioned": Case(conditioned, lambda m, p: speccond.apply(m, C()), "already spectrally conditioned"),
    "apply/lam-overflows-dtype": Case(encoder, lambda m, p: speccond.apply(m, C(lam=1e20)), "1e+20"),
    # remove, refresh, describe, is_conditioned, verify
    "remove/model": Case(conditioned, lambda m, p: speccond.remove("not a model"), "'not a model'"),
    "remove/plain-model": Case(encoder, lambda m, p: speccond.remove(m), "not spectrally conditioned"),
    "remove/merge": Case(conditioned, lambda m, p: speccond.remove(m, merge="no"), "'no'"),
    "refresh/model": Case(conditioned, lambda m, p: speccond.refresh(["a list"]), "['a list']"),
    "describe/model": Case(conditioned, lambda m, p: speccond.describe(3), "3"),
    "is_conditioned/model": Case(conditioned, lambda m, p: speccond.is_conditioned("model"), "'model'"),
    "verify/model": Case(conditioned, lambda m, p: speccond.verify("model", inputs()), "'model'"),
    "verify/plain-model": Case(encoder, lambda m, p: speccond.verify(m, inputs()), "not spectrally conditioned"),
    "verify/nan-input": Case(conditioned, lambda m, p: speccond.verify(m, inputs() * math.nan), "NaN"),
    "verify/empty-input": Case(conditioned, lambda m, p: speccond.verify(m, torch.randn(2, 0, 16)), "(2, 0, 16)"),
    # SpectralConfig: every field
    "config/lam-negative": Case(encoder, lambda m, p: C(lam=-1.0), "-1.0"),
    "config/lam-str": Case(encoder, lambda m, p: C(lam="ten"), "'ten'"),
    "config/lam-nan": Case(encoder, lambda m, p: C(lam=math.nan), "nan"),
    "config/lam-bool": Case(encoder, lambda m, p: C(lam=True), "True"),
    "config/lam-tensor": Case(encoder, lambda m, p: C(lam=torch.tensor(10.0)), "tensor(10.)"),
    "config/lam_q": Case(encoder, lambda m, p: C(lam_q=-2), "-2"),
    "config/lam_k": Case(encoder, lambda m, p: C(lam_k="x"), "'x'"),
    "config/lam_v": Case(encoder, lambda m, p: C(lam_v=math.inf), "inf"),
    "config/target_kappa-one": Case(encoder, lambda m, p: C(lam="auto", target_kappa=1), "1"),
    "config/target_kappa-str": Case(encoder, lambda m, p: C(target_kappa="2"), "'2'"),
    "config/auto-with-svd": Case(encoder, lambda m, p: C(lam="auto", correction="svd"), "'svd'"),
    "config/correction": Case(encoder, lambda m, p: C(correction="svdd"), "'svdd'"),
    "config/granularity": Case(encoder, lambda m, p: C(granularity="layer"), "'layer'"),
    "config/backend": Case(encoder, lambda m, p: C(backend="gpu"), "'gpu'"),
    "config/init": Case(encoder, lambda m, p: C(init="keep"), "'keep'"),
    "config/targets-type": Case(encoder, lambda m, p: C(targets=5), "5"),
    "config/targets-regex": Case(encoder, lambda m, p: C(targets="attn("), "'attn('"),
    "config/exclude": Case(encoder, lambda m, p: C(exclude=[3]), "3"),
    "config/layouts-type": Case(encoder, lambda m, p: C(layouts=["qkv"]), "['qkv']"),
    "config/layouts-value": Case(encoder, lambda m, p: C(layouts={"qkv": "qkv"}), "'qkv'"),
    "config/layouts-key": Case(encoder, lambda m, p: C(layouts={"(": L()}), "'('"),
    # ProjectionLayout: every field
    "layout/roles-repeated": Case(encoder, lambda m, p: L(roles="qq"), "'qq'"),
    "layout/roles-letters": Case(encoder, lambda m, p: L(roles="abc"), "'abc'"),
    "layout/num_heads-zero": Case(encoder, lambda m, p: L(num_heads=0), "0"),
    "layout/num_heads-float": Case(encoder, lambda m, p: L(num_heads=2.5), "2.5"),
    "layout/num_heads-str": Case(encoder, lambda m, p: L(num_heads="4"), "'4'"),
    "layout/storage": Case(encoder, lambda m, p: L(storage="rows"), "'rows'"),
    "layout/arrangement": Case(encoder, lambda m, p: L(arrangement="mixed"), "'mixed'"),
    "layout/num_kv_heads-divides": Case(encoder, lambda m, p: L(num_heads=4, num_kv_heads=3), "3"),
    "layout/num_kv_heads-zero": Case(encoder, lambda m, p: L(num_heads=4, num_kv_heads=0), "0"),
    # saving and loading
    "save_conditioned/model": Case(conditioned, lambda m, p: speccond.save_conditioned("model", p / "m.safetensors"), "'model'"),
    "save_conditioned/plain-model": Case(encoder, lambda m, p: speccond.save_conditioned(m, p / "m.safetensors"), "not spectrally conditioned"),
    "save_conditioned/path-type": Case(conditioned, lambda m, p: speccond.save_conditioned(m, 3), "3"),
    "save_conditioned/path-suffix": Case(conditioned, lambda m, p: speccond.save_conditioned(m, p / "m.pt"), "m.pt"),
    "save_conditioned/path-folder": Case(conditioned, lambda m, p: speccond.save_conditioned(m, p / "no" / "m.safetensors"), "no"),
    "load_conditioned/model": Case(encoder, lambda m, p: speccond.load_conditioned("model", _saved(p)), "'model'"),
    "load_conditioned/source-type": Case(encoder, lambda m, p: speccond.load_conditioned(m, 5), "5"),
    "load_conditioned/source-missing": Case(encoder, lambda m, p: speccond.load_conditioned(m, p / "none.safetensors"), "none.safetensors"),
    "load_conditioned/source-empty-folder": Case(encoder, lambda m, p: speccond.load_conditioned(m, p), "{tmp}"),
    "load_conditioned/config": Case(encoder, lambda m, p: speccond.load_conditioned(m, _saved(p), config="lam=10"), "'lam=10'"),
    "save_pretrained/model": Case(conditioned, lambda m, p: speccond.save_pretrained(m, p), "TransformerEncoder"),
    "from_pretrained/directory": Case(encoder, lambda m, p: speccond.from_pretrained(nn.Module, p / "nowhere"), "nowhere"),
    # diagnostics
    "projection_spectra/model": Case(encoder, lambda m, p: dx.projection_spectra("model"), "'model'"),
    "projection_spectra/config": Case(encoder, lambda m, p: dx.projection_spectra(m, config="x"), "'x'"),
    "projection_spectra/per_head": Case(encoder, lambda m, p: dx.projection_spectra(m, per_head="no"), "'no'"),
    "attention_entropy/model": Case(encoder, lambda m, p: dx.attention_entropy("model", (inputs(),)), "'model'"),
    "attention_entropy/inputs": Case(encoder, lambda m, p: dx.attention_entropy(m, (torch.randn(0, 5, 16),)), "(0, 5, 16)"),
    "attention_jacobian/layer": Case(encoder, lambda m, p: dx.attention_jacobian(m, (inputs(),), layer=7), "7"),
    "attention_jacobian/head": Case(encoder, lambda m, p: dx.attention_jacobian(m, (inputs(),), head=5), "5"),
    "attention_jacobian/wrt": Case(encoder, lambda m, p: dx.attention_jacobian(m, (inputs(),), wrt="bias"), "'bias'"),
    "attention_jacobian/method": Case(encoder, lambda m, p: dx.attention_jacobian(m, (inputs(),), method="magic"), "'magic'"),
    "theorem_bound/sample": Case(encoder, lambda m, p: dx.theorem_bound(m, (inputs(),), sample=9), "9"),
    "Tracker/every-zero": Case(encoder, lambda m, p: dx.Tracker(m, (inputs(),), every=0), "0"),
    "Tracker/every-str": Case(encoder, lambda m, p: dx.Tracker(m, (inputs(),), every="10"), "'10'"),
    "Tracker/model": Case(encoder, lambda m, p: dx.Tracker("model", (inputs(),)), "'model'"),
}


def _saved(folder) -> str:
    """A conditioned checkpoint of the encoder, saved in ``folder``."""
    return str(speccond.save_conditioned(conditioned(), folder / "saved.safetensors"))


@pytest.mark.parametrize("name", CASES, ids=list(CASES))
def test_a_bad_value_is_refused_naming_it_and_the_model_is_unchanged(name, tmp_path):
    case = CASES[name]
    model = case.model()
    before = {key: value.clone() for key, value in model.state_dict().items()}
    types = [type(module) for module in model.modules()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises((ValueError, TypeError)) as error:
            case.call(model, tmp_path)
    expected = str(tmp_path) if case.names == "{tmp}" else case.names
    assert expected in str(error.value), f"{name}: the message does not name {expected!r}: {error.value}"
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    assert [type(module) for module in model.modules()] == types
