"""Reading follows the forward: what speccond reads off an attention module follows what the module's own forward
computes.

The table cases hf-gemma2-softcap / hf-gemma3-softcap (tests/architectures_hf.py) check rebuilt heads
against the models' own attention; here, the cases where the forward cannot tell.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from speccond.adapters.hf_separate_qkv import applied_softcap


class _CapsItsOwnWay(nn.Module):
    """Stores a soft-cap and uses it, but not by passing softcap= to an attention function."""

    attn_logit_softcapping = 5.0

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.tanh(logits / self.attn_logit_softcapping).softmax(-1)


class _StoresACapItNeverUses(nn.Module):
    attn_logit_softcapping = 5.0

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.softmax(-1)


def test_a_cap_the_forward_uses_some_other_way_is_refused_not_guessed():
    with pytest.raises(ValueError, match=r"_CapsItsOwnWay stores attn_logit_softcapping=5.0.*do not guess"):
        applied_softcap(_CapsItsOwnWay())


def test_a_cap_the_forward_never_reads_is_not_applied():
    assert applied_softcap(_StoresACapItNeverUses()) is None


def _dbrx(clip_qkv: float = 8.0):
    """DBRX with its real clip_qkv: Wqkv's output is clamped to [-8, 8] before the split."""
    import transformers

    config = transformers.DbrxConfig(
        d_model=32, n_heads=4, n_layers=1, max_seq_len=64, vocab_size=64, pad_token_id=0, bos_token_id=1,
        eos_token_id=2, attn_config={"clip_qkv": clip_qkv, "kv_n_heads": 2, "rope_theta": 10000.0},
        ffn_config={"ffn_hidden_size": 64, "moe_num_experts": 2, "moe_top_k": 1},
    )
    torch.manual_seed(0)
    return transformers.DbrxModel(config).double().eval()


DBRX_WQKV = r"^blocks\.\d+\.norm_attn_norm\.attn\.Wqkv\.weight$"


def test_verify_accepts_the_right_layout_of_a_module_that_clamps_its_qkv():
    """DBRX splits the clamped Wqkv output [q: 4 heads | k: 2 | v: 2] (blocked); with lam = 10 the values
    land in the clamp, which must not read as 'not the values'."""
    from speccond import ProjectionLayout
    import speccond

    model = _dbrx()
    ids = {"input_ids": torch.randint(3, 64, (2, 8))}
    config = speccond.SpectralConfig(lam=10.0, layouts={DBRX_WQKV: ProjectionLayout("qkv", 4, num_kv_heads=2)})
    speccond.apply(model, config, verify_with=ids)
    (result,) = speccond.verify(model, **ids)
    assert "values linear, queries and keys not" in result.checks and "q/k/v rows of each head pair up" in result.checks
    assert any("clip_qkv" in note for note in result.skipped)  # says it checked the values near zero only


def test_verify_still_rejects_the_wrong_layout_of_a_module_that_clamps_its_qkv():
    from speccond import ProjectionLayout
    import speccond

    model = _dbrx()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    wrong = ProjectionLayout("qkv", 4, num_kv_heads=2, arrangement="grouped")
    with pytest.raises(speccond.VerificationError, match="not the values"):
        speccond.apply(model, speccond.SpectralConfig(lam=10.0, layouts={DBRX_WQKV: wrong}),
                       verify_with={"input_ids": torch.randint(3, 64, (2, 8))})
    assert not speccond.is_conditioned(model)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
