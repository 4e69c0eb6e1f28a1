"""A refusal's promises hold (the unrecognised-attention error's declarations, docs/MODELS.md). For every refused
family of the architecture table whose message prints a declaration, every option it offers (each value of each
<...> placeholder) is applied with ``verify_with``: the one right option (derived by hand from the family's
forward, ``RIGHT``) passes, every other one is caught before anything changes. A message that says a module cannot
be declared prints no declaration. Families the inferred adapter conditions (speccond.adapters.inferred) are
checked with it switched off: that message is what a user meets wherever inference cannot decide, so its
declarations must hold too."""
from __future__ import annotations

import itertools
import re
import warnings

import pytest
import torch

from speccond import ProjectionLayout as L
import speccond
from speccond.adapters.inferred import InferredAttentionAdapter
from tests.test_architectures import CASES, REFUSED, _build, _inputs

pytestmark = pytest.mark.usefixtures("float64_default")

# The right layouts of each family, read off its forward (None: no printed option is right).
RIGHT = {
    "hf-mpt": {L("qkv", 4)},  # Wqkv(x).chunk(3)
    "hf-persimmon": {L("qkv", 4, arrangement="per_head")},  # query_key_value(x).view(B, N, H, 3 dh)
    "hf-codegen": None,  # mp_num shards of [q | v | k]: the printed roles "qkv" swap k and v in every option
    "hf-dbrx": {L("qkv", 4, num_kv_heads=2)},  # Wqkv(x).clamp(-8, 8).split([H dh, G dh, G dh])
    "hf-modernbert-decoder": {L("q", 4), L("k", 4), L("v", 4)},  # separate Linears, .view(B, N, -1, dh)
    "timm-vit-rope": {L("qkv", 2)},  # qkv(x).reshape(B, N, 3, H, dh)
}
UNDECLARABLE = ("hf-qwen3-next", "hf-deepseek-v3", "hf-mamba")
_LINE = re.compile(r'^\s*r"(?P<pattern>.+)": (?P<layout>ProjectionLayout\(.*\)),')
_HOLE = re.compile(r"<[^>]*>")


@pytest.fixture
def without_inference(monkeypatch):
    """The adapter table as it was before inference: an unnamed module gets the unrecognised message."""
    monkeypatch.setattr(InferredAttentionAdapter, "matches", lambda self, module: False)


def _message(case) -> str:
    model = _build(case)
    with warnings.catch_warnings(), pytest.raises(ValueError) as error:
        warnings.simplefilter("ignore", UserWarning)
        speccond.apply(model, speccond.SpectralConfig(lam=10.0))
    return str(error.value)


def _options(hole: str) -> list[str]:
    quoted = re.findall(r'"[^"]*"', hole)
    return quoted or ["1", "2", "4"]  # a head count


def declarations(message: str) -> list[dict[str, L]]:
    """Every declaration the message offers: its placeholders filled with each of their options."""
    lines = [m for m in map(_LINE.match, message.splitlines()) if m]
    templates = [(m["pattern"], m["layout"]) for m in lines]
    holes = [hole for _, text in templates for hole in _HOLE.findall(text)]
    out = []
    for choice in itertools.product(*(_options(h) for h in holes)):
        filled, values = {}, iter(choice)
        for pattern, text in templates:
            text = _HOLE.sub(lambda _: next(values), text)
            try:
                filled[pattern] = eval(text, {"ProjectionLayout": L})  # the text a user pastes
            except ValueError:
                filled = None  # ProjectionLayout itself refuses this combination: caught
                break
        if filled is not None:
            out.append(filled)
    return out


@pytest.mark.parametrize("case", [c for c in CASES if c.name in RIGHT], ids=lambda c: c.name)
def test_every_printed_option_is_right_and_passes_or_is_caught(case, without_inference):
    options = declarations(_message(case))
    assert options, "the message prints a declaration"
    passed = []
    for layouts in options:
        model, inputs = _build(case), _inputs(case)
        state = {k: v.clone() for k, v in model.state_dict().items()}
        config = speccond.SpectralConfig(lam=10.0, layouts=layouts)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                speccond.apply(model, config, verify_with=inputs)
        except ValueError:
            assert not speccond.is_conditioned(model)
            assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
            continue
        passed.append(layouts)
    right = RIGHT[case.name]
    assert [set(p.values()) for p in passed] == ([] if right is None else [right]), passed


@pytest.mark.parametrize("case", [c for c in REFUSED if c.name in UNDECLARABLE], ids=lambda c: c.name)
def test_a_module_that_cannot_be_declared_gets_no_declaration(case):
    message = _message(case)
    assert "ProjectionLayout(" not in message and 'roles="qkv"' not in message
