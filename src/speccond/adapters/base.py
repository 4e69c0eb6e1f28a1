"""What an adapter is: it answers "is this module mine?" and "where are its q, k, v, in which layout?".

Adapters never copy or patch model code; they only describe where the projection weights live.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from torch import nn

from speccond.core.layout import ProjectionLayout
from speccond.core.peft_layers import tuned_layer

# Why apply's collapse warning (speccond.collapse) does not apply to a module: its softmax is not over tokens.
CHANNEL_EXEMPT = "channel attention: the softmax mixes channels, not tokens"

# How an attention module already normalises q and k after the projection (ProjectionSpec.qk_normalised).
# Normalised logits are bounded, not safe: at head width 64 a large correction still makes the initial
# attention nearly one-hot (speccond.collapse predicts through the normalisation).
QK_LAYER_NORM = "layer_norm"  # a norm per head over head_dim (timm qk_norm=True, OLMo, Qwen3, ...)
QK_COSINE = "cosine"  # each head's q and k L2-normalised, the logits times a learned logit scale (Swin V2)
QK_L2_OVER_TOKENS = "l2_over_tokens"  # every q and k channel L2-normalised over the tokens (timm XCiT's XCA)
# The (q, k) norm children's names, where a family has them (timm, OLMo, Qwen3: q_norm; Phi: q_layernorm).
QK_NORM_PAIRS = (("q_norm", "k_norm"), ("query_norm", "key_norm"), ("q_layernorm", "k_layernorm"))

COSINE_NOTE = (
    "cosine attention L2-normalises every head's q and k and multiplies the logits by a learned, clamped "
    "logit scale, so the magnitude of the Q/K correction is cancelled (only its direction survives); V is "
    "unaffected"
)
QK_NORM_NOTE = (
    "q/k normalisation after the projection (qk_norm) rescales each head's q and k, so part of the "
    "Q/K correction is cancelled; V is unaffected"
)


@dataclass(frozen=True)
class ProjectionSpec:
    """One projection parameter inside an attention module, as an adapter describes it.

    Attributes:
        owner: path of the module that holds the parameter, relative to the attention module ("" = itself).
        param_name: the parameter's attribute name on ``owner`` ("weight", "in_proj_weight", ...).
        layout: where q, k, v sit in it.
        activation_ok: True when the owner is Linear-like and the attention calls it as a module, so the
            activation backend can add x C^T to its output. False when the attention reads the weight
            directly (nn.MultiheadAttention, F.linear(x, self.qkv.weight)).
        notes: caveats to report (for example q/k normalisation that cancels part of the correction).
        acts_as: the paper's role (q, k or v) each block plays in the attention, in block order, when it
            differs from the module's own names ("" = same as ``layout.roles``). Used by ``verify``.
        probe_skip: why ``verify`` cannot read attention signatures off this module's output ("" = it can).
        collapse_exempt: why apply's collapse warning skips this module (channel attention; q and k pooled
            to other tokens before the logits) ("" = it predicts it).
        qk_normalised: how the module normalises q and k itself after the projection: QK_LAYER_NORM,
            QK_COSINE, QK_L2_OVER_TOKENS, or "" (it does not). Read by the collapse prediction (through the
            normalisation) and the peers (qk-norm leaves or refuses such modules).
    """

    owner: str
    param_name: str
    layout: ProjectionLayout
    activation_ok: bool
    notes: tuple[str, ...] = field(default_factory=tuple)
    acts_as: str = ""
    probe_skip: str = ""
    collapse_exempt: str = ""
    qk_normalised: str = ""


class Adapter(Protocol):
    """An adapter for one family of attention modules."""

    name: str

    def matches(self, module: nn.Module) -> bool:
        """Is this module an attention module of this family?"""

    def projections(self, module: nn.Module) -> list[ProjectionSpec]:
        """Its q, k, v projection parameters and their layouts."""


def class_path(module: nn.Module) -> str:
    """``package.module.ClassName`` of a module's class (before any parametrization swap)."""
    cls = type(module)
    if getattr(cls, "__name__", "").startswith("Parametrized") and len(cls.__bases__) == 1:
        cls = cls.__bases__[0]
    return f"{cls.__module__}.{cls.__qualname__}"


def is_linear(module: object) -> bool:
    """An nn.Linear, also inside a PEFT tuner layer (see :func:`speccond.core.peft_layers.tuned_layer`)."""
    return isinstance(module, nn.Module) and isinstance(tuned_layer(module)[0], nn.Linear)


def is_conv1d(module: object) -> bool:
    """transformers' Conv1D (GPT-2): y = x @ W + b with W stored (in, out)."""
    if not isinstance(module, nn.Module):
        return False
    module = tuned_layer(module)[0]
    return class_path(module).endswith(".Conv1D") and hasattr(module, "nf")
