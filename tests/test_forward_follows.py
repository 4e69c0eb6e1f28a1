"""Issue 31: what speccond reads off an attention module follows what the module's own forward computes.

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
