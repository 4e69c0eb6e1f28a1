"""One head of a real attention layer, as the model computes it, rebuilt from its captured input.

For layer ``l`` and head ``h`` this captures the attention module's real input X with a forward pre-hook,
slices that head's effective weights W_Q, W_K, W_V (paper layout (D, dh), so q = X W_Q + b_Q) and
biases, and records the module's own scale, q/k normalisation, mask and causality in an
``AttentionHead`` (attention_head.py), which recomputes

    A(X) = softmax(scale n_Q(X W_Q + b_Q) n_K(X W_K + b_K)^T + mask) (X W_V + b_V)

with an explicit softmax (fused kernels break forward-mode AD); the entropy and Jacobian diagnostics
read and differentiate it. Supported: softmax attention over tokens (timm Attention,
nn.MultiheadAttention self-attention, transformers BERT/RoBERTa/ViT/DistilBERT-style and GPT-2).
Channel attention (XCiT XCA, DaViT), windowed attention with position bias (Swin) and Nystromformer
are refused with a clear error.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional

import torch
from torch import nn

from speccond.diagnostics.attention_head import AttentionHead
from speccond.layers import AttentionLayer, Projection, attention_layers, projection_bias


# -- building AttentionHeads from a real model ---------------------------------------------------------------
def head_cases(model: nn.Module, inputs: tuple, layer: int, heads: Optional[list[int]] = None) -> list[AttentionHead]:
    """AttentionHeads of ``layer`` for ``heads`` (default all) on the probe batch ``inputs``."""
    layers = attention_layers(model)
    if not 0 <= layer < len(layers):
        raise ValueError(f"layer must be in [0, {len(layers)}): the model has {len(layers)} attention layers")
    target = layers[layer]
    form = _form_of(target)
    args, kwargs = capture_input(model, target.module, inputs)
    x, bias, causal = form(target.module, args, kwargs)
    q_proj, q_role = target.block("q")
    k_proj, k_role = target.block("k")
    v_proj, v_role = target.block("v")
    count = q_proj.layout.num_heads
    q_norm, k_norm = _qk_norms(target.module)
    cases = []
    for head in range(count) if heads is None else heads:
        if not 0 <= head < count:
            raise ValueError(f"head must be in [0, {count}) for layer {layer} ({target.name}), got {head}")
        w_q, b_q = _head_weight(q_proj, q_role, head)
        w_k, b_k = _head_weight(k_proj, k_role, head)
        w_v, b_v = _head_weight(v_proj, v_role, head)
        scale = _scale(target.module, w_q.shape[1])
        cases.append(AttentionHead(x, w_q, w_k, w_v, scale, b_q, b_k, b_v, bias, causal, q_norm, k_norm))
    return cases


def layer_count(model: nn.Module) -> int:
    return len(attention_layers(model))


def capture_input(model: nn.Module, module: nn.Module, inputs: tuple) -> tuple[tuple, dict]:
    """The args and kwargs ``module`` is called with when ``model(*inputs)`` runs (eval, no grad)."""
    captured: list[tuple[tuple, dict]] = []

    def hook(_module, args, kwargs):
        if not captured:
            captured.append((args, kwargs))

    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(*inputs)
    finally:
        handle.remove()
        model.train(was_training)
    if not captured:
        raise ValueError("the probe input never reached this attention layer; pass an input the model runs on")
    return captured[0]


def _head_weight(projection: Projection, role: str, head: int) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    rows = projection.rows(role, head)
    weight = projection.effective()[rows].t().contiguous()  # (D, dh) paper layout
    bias = _bias(projection)
    return weight, (None if bias is None else bias[rows].clone())


def _bias(projection: Projection) -> Optional[torch.Tensor]:
    out_features = projection.layout.out_in(getattr(projection.module, projection.param_name)).shape[0]
    return projection_bias(projection.module, projection.param_name, out_features, projection.layout.roles)


def _qk_norms(module: nn.Module):
    q_norm, k_norm = getattr(module, "q_norm", None), getattr(module, "k_norm", None)
    if isinstance(q_norm, nn.Module) and not isinstance(q_norm, nn.Identity):
        return q_norm, k_norm
    return None, None


def _scale(module: nn.Module, head_dim: int) -> float:
    for name in ("scale", "scaling"):
        value = getattr(module, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    if getattr(module, "scale_attn_weights", True) is False:  # GPT-2 option
        return 1.0
    return 1.0 / math.sqrt(head_dim)


# -- per-family input forms -------------------------------------------------------------------------------
Form = Callable[[nn.Module, tuple, dict], tuple[torch.Tensor, Optional[torch.Tensor], bool]]


def _first(args: tuple, kwargs: dict, *names: str) -> Any:
    if args:
        return args[0]
    for name in names:
        if kwargs.get(name) is not None:
            return kwargs[name]
    raise ValueError(f"could not find the attention input among the captured arguments ({', '.join(names)})")


def _additive(mask: Any) -> Optional[torch.Tensor]:
    """An attention mask as an additive bias broadcastable to (B, N, N)."""
    if mask is None:
        return None
    if mask.dim() == 4:  # (B, 1, N or 1, N): one mask shared by the heads
        if mask.shape[1] != 1:
            raise ValueError(f"per-head attention masks are not supported, got shape {tuple(mask.shape)}")
        mask = mask[:, 0]
    if mask.dtype == torch.bool:  # True = attend
        return torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    return mask.detach().float()


def _timm_form(module, args, kwargs):
    if kwargs.get("attn_mask") is not None or kwargs.get("is_causal"):
        raise ValueError("attention masks of timm Attention are not supported by the head diagnostics")
    return _first(args, kwargs, "x").detach(), None, False


def _mha_form(module, args, kwargs):
    query = _first(args, kwargs, "query")
    key = args[1] if len(args) > 1 else kwargs.get("key")
    value = args[2] if len(args) > 2 else kwargs.get("value")
    if not (torch.equal(query, key) and torch.equal(query, value)):
        raise ValueError("head diagnostics of nn.MultiheadAttention need self-attention (query = key = value)")
    if any(kwargs.get(k) is not None for k in ("key_padding_mask", "attn_mask")) or kwargs.get("is_causal"):
        raise ValueError("masks of nn.MultiheadAttention are not supported by the head diagnostics")
    x = query.detach()
    return (x if module.batch_first else x.transpose(0, 1)), None, False  # (B, N, D)


def _hf_form(module, args, kwargs):
    if kwargs.get("encoder_hidden_states") is not None:
        raise ValueError("head diagnostics of cross-attention are not supported")
    x = _first(args, kwargs, "hidden_states").detach()
    return x, _additive(kwargs.get("attention_mask")), bool(getattr(module, "is_causal", False))


def _gpt2_form(module, args, kwargs):
    if getattr(module, "is_cross_attention", False):
        raise ValueError("head diagnostics of GPT-2 cross-attention are not supported")
    if getattr(module, "scale_attn_by_inverse_layer_idx", False):
        raise ValueError("GPT-2 scale_attn_by_inverse_layer_idx is not supported by the head diagnostics")
    return _first(args, kwargs, "hidden_states").detach(), _additive(kwargs.get("attention_mask")), True


_FORMS: dict[str, Form] = {
    "timm Attention": _timm_form,
    "torch.nn.MultiheadAttention": _mha_form,
    "transformers query/key/value (BERT style)": _hf_form,
    "transformers q_lin/k_lin/v_lin (DistilBERT)": _hf_form,
    "transformers q_proj/k_proj/v_proj": _hf_form,
    "transformers GPT-2 c_attn (Conv1D, in-out)": _gpt2_form,
}
_UNSUPPORTED_CLASSES = ("Nystromformer",)


def _form_of(layer: AttentionLayer) -> Form:
    form = _FORMS.get(layer.adapter_name)
    if form is None or any(c in type(layer.module).__name__ for c in _UNSUPPORTED_CLASSES):
        supported = ", ".join(_FORMS)
        raise ValueError(
            f"layer {layer.index} ({layer.name}, {layer.adapter_name}) is not plain softmax attention over tokens "
            f"that the head diagnostics can rebuild; supported: {supported}. projection_spectra works for it."
        )
    return form
