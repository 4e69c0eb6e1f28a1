"""SpectralConfig and ProjectionLayout round-trip through their dicts (what speccond.json records), and
from_dict refuses what to_dict never writes."""
from __future__ import annotations

import json

import pytest

from speccond import ProjectionLayout, SpectralConfig

CONFIGS = [
    SpectralConfig(),
    SpectralConfig(lam="auto", target_kappa=3.0, granularity="projection"),
    SpectralConfig(correction="svd", lam_v=0.0, backend="activation", init="preserve"),
    SpectralConfig(lam=5, lam_q=2.5, lam_k="auto", targets=[r"blocks\.0\."], exclude=["head$"]),
    SpectralConfig(layouts={r"attn\.to_qkv\.weight$": ProjectionLayout("qkv", 4, storage="in_out"),
                            r"attn\.kv\.weight$": ProjectionLayout("kv", 8, arrangement="per_head")}),
]


@pytest.mark.parametrize("config", CONFIGS, ids=range(len(CONFIGS)))
def test_a_config_comes_back_from_its_dict_and_from_its_json(config):
    assert SpectralConfig.from_dict(config.to_dict()) == config
    again = SpectralConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config and again.to_dict() == config.to_dict()


def test_a_layout_comes_back_from_its_dict():
    layout = ProjectionLayout("qkv", 12, num_kv_heads=4, storage="in_out", arrangement="grouped")
    assert ProjectionLayout.from_dict(layout.to_dict()) == layout


def test_from_dict_refuses_an_unknown_key_and_a_value_the_constructor_refuses():
    with pytest.raises(ValueError, match=r"SpectralConfig.from_dict: unknown field\(s\) 'lamda'; the fields are lam, "):
        SpectralConfig.from_dict({"lamda": 10})
    with pytest.raises(ValueError, match="ProjectionLayout.from_dict: unknown field"):
        SpectralConfig.from_dict({"layouts": {"x": {"roles": "qkv", "num_heads": 2, "heads": 2}}})
    with pytest.raises(ValueError, match="SpectralConfig.target_kappa must be finite and > 1"):
        SpectralConfig.from_dict({"target_kappa": 1.0})
    with pytest.raises(TypeError, match="expects a mapping"):
        SpectralConfig.from_dict([("lam", 10)])
