"""Hugging Face transformers attention that adds a relative position bias to its logits: T5 and MPNet.

Both have separate q, k, v nn.Linears (``q``, ``k``, ``v``, output ``o``), heads contiguous
(``view(B, N, -1, dh)``), and form

    logits = scale q k^T + P + mask,   P = a learned bias per head and relative distance (B or 1, H, N, N)

(T5: scale 1, P from the ``relative_attention_bias`` embedding of the first layer, shared by the others
through the ``position_bias`` argument; MPNet: scale 1 / sqrt(dh), P computed by the encoder). The paper's
correction is well defined here: C = lam I_k on q, k and v changes q k^T and the values; P does not
depend on the input or the projections and is left untouched. Both backends apply.

Cross-attention (T5's ``EncDecAttention``, called with ``key_value_states``) is conditioned the same way
(q from the decoder, k and v from the encoder states); its heads are not rebuilt by the diagnostics.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from speccond.adapters.head_inputs import HeadInputs, additive_mask, bound_arguments, hidden_states
from speccond.adapters.hf_separate_qkv import HFSeparateQkvAdapter


@dataclass(frozen=True)
class HFRelativeBiasAdapter(HFSeparateQkvAdapter):
    """An :class:`HFSeparateQkvAdapter` whose heads add the module's relative position bias.

    Attributes (besides the parent's; ``rebuilds`` here holds exact class names, each checked against
    the model's own attention in tests/test_architectures.py):
        mask_argument: the forward's name for the additive attention mask ("mask" for T5).
    """

    mask_argument: str = "attention_mask"

    def head_inputs(self, module: nn.Module, args: tuple, kwargs: dict) -> HeadInputs:
        """softmax(scale q k^T + position_bias + mask) v on one captured call (module docstring)."""
        family = type(module).__name__
        if family not in self.rebuilds:
            raise ValueError(f"{family}: only {', '.join(self.rebuilds)} heads are rebuilt by this adapter")
        call = bound_arguments(module, args, kwargs)
        if call.get("key_value_states") is not None:
            raise ValueError(
                "head diagnostics of cross-attention are not supported (its keys come from another sequence)"
            )
        x = hidden_states((), call, "hidden_states")
        tokens = x.shape[1]
        bias = call.get("position_bias")
        if bias is None and getattr(module, "has_relative_attention_bias", False):
            bias = module.compute_bias(tokens, tokens, device=x.device)  # (1, H, N, N), the module's own
        bias = None if bias is None else bias.detach().double()
        mask = additive_mask(call.get(self.mask_argument))
        if mask is not None:
            bias = mask if bias is None else bias + mask
        scale = getattr(module, "scaling", None)
        scale = float(scale) if isinstance(scale, (int, float)) else module.attention_head_size**-0.5
        causal = mask is None and bool(getattr(module, "is_causal", False))
        return HeadInputs(x, scale, bias, causal=causal)


HF_T5 = HFRelativeBiasAdapter(
    "transformers T5 q/k/v (relative position bias)", ("q", "k", "v"), ("T5Attention",), ("o",),
    rebuilds=("T5Attention", "MT5Attention"), mask_argument="mask",
)
HF_MPNET = HFRelativeBiasAdapter(
    "transformers MPNet q/k/v (relative position bias)", ("q", "k", "v"), ("MPNetSelfAttention",), ("o",),
    rebuilds=("MPNetSelfAttention",),
)
