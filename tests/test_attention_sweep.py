"""The attention sweep: families outside the architecture table, each right or refused truthfully, and
the wrong layouts of the same classes still refused by verify (tests/attention_sweep.py)."""
from __future__ import annotations

import re
import warnings

import pytest
import torch

import speccond
from speccond import ProjectionLayout as L
from speccond import SpectralConfig
from speccond.core.backends import attachments
from speccond.verify import VerificationError
from tests.attention_sweep import (
    CASES, ExpertQueryAttention, LocalGlobalAttention, NormedOutputAttention, Tiny, WideValueAttention, outcome,
)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.kind}: {c.name}" for c in CASES])
def test_each_family_is_conditioned_as_its_forward_reads_or_refused(case):
    """Per-head q/k norms (StableLM, Cohere) crashed apply; a norm before the output projection (DiffLlama,
    BitNet, timm's scale_attn_norm) and v heads wider than q's (Perceiver) were false alarms of verify; a second
    set of q/k/v (Longformer's *_global) and heads as experts (JetMoE) got printed declarations that left
    projections the forward reads plain, and verify passed them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        verdict, why = outcome(case)
    assert verdict in ("covered", "refused"), why


def _tiny(cls, **kwargs):
    torch.manual_seed(0)
    return Tiny(cls(**kwargs)).eval()


def _hidden():
    return torch.randn(2, 12, 32, generator=torch.Generator().manual_seed(3))


SEPARATE = {r"^attn\.q_proj\.weight$": L("q", 4), r"^attn\.k_proj\.weight$": L("k", 4),
            r"^attn\.v_proj\.weight$": L("v", 4)}


def test_a_norm_before_the_output_projection_is_observed_before_the_norm():
    """With a LayerNorm between the attention and its output projection, verify observes the norm's input (the
    attention context, linear in v) and passes the right layout; roles swapped there are still refused."""
    model = _tiny(NormedOutputAttention)
    (checked,) = speccond.verify(_applied(model, SEPARATE), _hidden())
    assert "inner_norm" in checked.observed and "values linear, queries and keys not" in checked.checks
    swapped = {r"^attn\.q_proj\.weight$": L("v", 4), r"^attn\.k_proj\.weight$": L("k", 4),
               r"^attn\.v_proj\.weight$": L("q", 4)}
    with pytest.raises(VerificationError):
        speccond.verify(_applied(_tiny(NormedOutputAttention), swapped), _hidden())


def test_v_heads_wider_than_q_heads_are_declared_with_the_key_head_count():
    """Perceiver's v_channels make its v heads wider than its q and k heads: the adapter declared v with
    width / q's head width heads (2 for 1), and verify refused its own adapter's layout. v has the key heads'
    count; a v head count that is not the module's is still refused."""
    import transformers

    config = transformers.PerceiverConfig(num_latents=6, d_latents=32, d_model=16, num_blocks=1,
                                          num_self_attends_per_block=1, num_self_attention_heads=2,
                                          num_cross_attention_heads=1, qk_channels=16, v_channels=32)
    torch.manual_seed(0)
    model = transformers.PerceiverModel(config).eval()
    speccond.apply(model, SpectralConfig(), verify_with={"inputs": torch.randn(2, 5, 16)})
    heads = {a.module_name.rsplit(".", 1)[-1]: a.correction.layout.num_heads for a in attachments(model)
             if "cross_attention" in a.module_name}
    assert heads == {"query": 1, "key": 1, "value": 1}
    wrong = {r"^attn\.q_proj\.weight$": L("q", 2),
             r"^attn\.k_proj\.weight$": L("k", 2), r"^attn\.v_proj\.weight$": L("v", 4)}
    with pytest.raises(VerificationError, match="v block is declared with 4 heads"):
        speccond.verify(_applied(_tiny(WideValueAttention), wrong), _hidden())


def test_a_second_set_of_projections_left_plain_fails_verify():
    """A module with local and global q/k/v: the declaration printed covers both sets, verify checks each set,
    and a declaration of one set, the other left plain, fails naming a plain projection the forward reads."""
    model = _tiny(LocalGlobalAttention)
    with pytest.raises(ValueError) as refused:
        speccond.apply(model, SpectralConfig())
    assert "query_global" in str(refused.value) and "value_global" in str(refused.value)
    both = {rf"^attn\.{name}\.weight$": L(role, 4) for role, name in zip(
        "qkvqkv", ("query", "key", "value", "query_global", "key_global", "value_global"))}
    checked = speccond.verify(_applied(_tiny(LocalGlobalAttention), both), _hidden())
    assert len(checked[0].parameters) == 6
    one = {pattern: layout for pattern, layout in both.items() if "global" not in pattern}
    with pytest.raises(VerificationError, match=r"attn\.(query|key|value)_global\.weight: the forward reads it"):
        speccond.verify(_applied(_tiny(LocalGlobalAttention), one), _hidden())
    plain = _tiny(LocalGlobalAttention)
    before = {k: v.clone() for k, v in plain.state_dict().items()}
    with pytest.raises(VerificationError, match=re.escape('exclude=[r"^attn$"]')):
        speccond.apply(plain, SpectralConfig(layouts=one), verify_with=(_hidden(),))
    assert not list(attachments(plain)) and plain.state_dict().keys() == before.keys()
    assert all(torch.equal(before[k], v) for k, v in plain.state_dict().items())


def test_heads_as_experts_are_refused_and_a_partial_declaration_fails_verify():
    """Queries from a mixture of experts' input projection: no declaration is printed (only k and v could be
    declared), the refusal writes nothing and names the exclude; k and v declared by hand fail verify."""
    model = _tiny(ExpertQueryAttention)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError) as refused:
        speccond.apply(model, SpectralConfig())
    message = str(refused.value)
    assert "queries come from no projection" in message and "SpectralConfig(layouts" not in message
    assert 'exclude=[r"^attn$"]' in message
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    kv = {r"^attn\.kv_proj\.weight$": L("kv", 4)}
    with pytest.raises(VerificationError, match=re.escape("no projection of the module is conditioned as q")):
        speccond.verify(_applied(_tiny(ExpertQueryAttention), kv), _hidden())


def _applied(model, layouts):
    speccond.apply(model, SpectralConfig(layouts=layouts))
    return model


def test_the_printed_declaration_gives_wide_v_heads_the_key_head_count():
    """The refusal's declaration counted a v wider than q as more heads (v width / q's head width: 4 for 2),
    which verify then refused; v has the key heads' count at its own width."""
    from speccond.adapters.unrecognised import find_unrecognised, unrecognised_message

    model = _tiny(WideValueAttention)
    message = unrecognised_message(find_unrecognised(model, set(), set(), lambda *names: True), model)
    assert 'r"^attn\\.v_proj\\.weight$": ProjectionLayout(roles="v", num_heads=2)' in message
    layouts = {rf"^attn\.{name}\.weight$": L(role, 2) for role, name in zip("qkv", ("q_proj", "k_proj", "v_proj"))}
    (checked,) = speccond.verify(_applied(_tiny(WideValueAttention), layouts), _hidden())
    assert "q/k/v rows of each head pair up" in checked.checks


def test_an_embedding_named_after_a_role_is_not_a_second_set():
    """A qualifier after a role name marks a second set of projections only on two roles or more: a lone
    query_pos Linear (a position term, as DETR-style decoders have) or a query_embed table is no q projection."""
    from speccond.adapters.unrecognised import owned_projections

    attention = LocalGlobalAttention()
    assert {p.attribute for _, p in owned_projections("", attention)} >= {"query_global", "value_global"}
    attention.query_embed, attention.query_pos = torch.nn.Embedding(4, 32), torch.nn.Linear(32, 32)
    del attention.query_global, attention.key_global, attention.value_global
    assert {p.attribute for _, p in owned_projections("", attention)} == {"query", "key", "value"}
