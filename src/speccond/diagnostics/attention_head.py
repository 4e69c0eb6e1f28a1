"""One attention head as a value: the single representation the entropy, Jacobian and Theorem 3.4
diagnostics read and differentiate. Its forward, written once:

    q = rot(n_Q(X W_Q + b_Q)),  k = rot(n_K(X W_K + b_K)),  v = X W_V + b_V      (B, N, dh) each
    S = (scale q) k^T;  S = cap tanh(S / cap) when soft-capped                  (B, N, N)
    P = softmax_rows(S + logit_bias), j > i masked if causal                    (B, N, N)
    A(X) = P v                                                                  (B, N, dh)

W_* (D, dh) in the paper's layout (x @ w: the transpose of an nn.Linear weight slice), b_* (dh,) or None,
n_Q / n_K the model's per-head q/k normalisation (None: identity), rot its rotary position embedding
(``speccond.adapters.head_inputs.Rotary``; None: none), cap its logit soft-capping (Gemma 2; None: none),
logit_bias additive and broadcastable to (B, N, N) (masks as -inf or finfo.min, relative positions, ALiBi). The softmax is written out: fused kernels
(F.scaled_dot_product_attention) have no forward-mode AD on CPU. ``heads.head_cases`` rebuilds heads
from a real model's layer; ``AttentionHead(...)`` builds one by hand.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Callable

import torch
from torch import nn

from speccond.adapters.head_inputs import Rotary

Tensor = torch.Tensor
Norm = Callable[[Tensor], Tensor]  # (B, N, dh) -> (B, N, dh)


@dataclass(frozen=True, eq=False)
class AttentionHead:
    """One head's attention problem (module docstring for the formula), validated once.

    x (B, N, D) or (N, D) (an (N, D) input is one sample, stored as (1, N, D)); w_q, w_k, w_v (D, dh);
    scale the logit scale the model uses (timm: dh ** -0.5); b_* (dh,) or None; logit_bias broadcastable
    to (B, N, N) or None; causal masks j > i; q_norm / k_norm applied to q and k, or None.
    ``output`` and ``probabilities`` take x and the weights as arguments (default: the stored ones): those
    are the maps the Jacobians differentiate.
    """

    x: Tensor
    w_q: Tensor
    w_k: Tensor
    w_v: Tensor
    scale: float
    b_q: Tensor | None = None
    b_k: Tensor | None = None
    b_v: Tensor | None = None
    logit_bias: Tensor | None = None
    causal: bool = False
    q_norm: Norm | None = None
    k_norm: Norm | None = None
    rotary: Rotary | None = None
    softcap: float | None = None

    def __post_init__(self) -> None:
        if self.x.dim() not in (2, 3):
            raise ValueError(f"AttentionHead: x must be (B, N, D) or (N, D), got shape {tuple(self.x.shape)}")
        if self.x.dim() == 2:
            object.__setattr__(self, "x", self.x.unsqueeze(0))  # (1, N, D)
        d = self.x.shape[-1]
        shapes = {name: tuple(getattr(self, name).shape) for name in ("w_q", "w_k", "w_v")}
        if len(set(shapes.values())) != 1 or len(shapes["w_q"]) != 2 or shapes["w_q"][0] != d:
            raise ValueError(
                f"AttentionHead: w_q, w_k, w_v must all be (D, dh) = ({d}, dh) in the paper's layout (x @ w); "
                f"got {shapes}. An nn.Linear weight slice is (dh, D): pass its transpose"
            )
        dh = self.w_q.shape[1]
        for name in ("b_q", "b_k", "b_v"):
            bias = getattr(self, name)
            if bias is not None and tuple(bias.shape) != (dh,):
                raise ValueError(f"AttentionHead: {name} must be ({dh},), got {tuple(bias.shape)}")
        if self.logit_bias is not None:
            b, n = self.x.shape[0], self.x.shape[1]
            try:
                torch.broadcast_shapes(tuple(self.logit_bias.shape), (b, n, n))
            except RuntimeError:
                raise ValueError(
                    f"AttentionHead: logit_bias must broadcast to (B, N, N) = ({b}, {n}, {n}), "
                    f"got {tuple(self.logit_bias.shape)}"
                ) from None

    def probabilities(self, x: Tensor | None = None, w_q: Tensor | None = None,
                      w_k: Tensor | None = None) -> Tensor:
        """P = softmax_rows((scale q) k^T + logit_bias), causal-masked: (B, N, N), rows sum to 1."""
        x = self.x if x is None else x  # (B, N, D)
        q = _project(x, self.w_q if w_q is None else w_q, self.b_q, self.q_norm)  # (B, N, dh)
        k = _project(x, self.w_k if w_k is None else w_k, self.b_k, self.k_norm)  # (B, N, dh)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)  # (B, N, dh) each
        logits = (self.scale * q) @ k.transpose(-2, -1)  # (B, N, N); scale on q first, as timm does
        if self.softcap is not None:
            logits = self.softcap * torch.tanh(logits / self.softcap)
        if self.logit_bias is not None:
            logits = logits + self.logit_bias
        if self.causal:
            n = logits.shape[-1]
            future = torch.ones(n, n, dtype=torch.bool, device=logits.device).triu(1)  # (N, N): j > i
            logits = logits.masked_fill(future, float("-inf"))
        return torch.softmax(logits, dim=-1)  # (B, N, N)

    def visible_keys(self) -> Tensor:
        """(B, N): how many keys each query may attend to. A key is hidden by causality or by a logit_bias
        entry that is a mask, -inf or at most half the dtype's lowest value (transformers' finfo.min), not
        by a finite bias such as a relative position's. Uniform attention's entropy is log(visible_keys)."""
        b, n = self.x.shape[0], self.x.shape[1]
        visible = torch.ones(b, n, n, dtype=torch.bool, device=self.x.device)  # (B, N, N)
        if self.logit_bias is not None:  # additive, so floating point
            visible = visible & (self.logit_bias > torch.finfo(self.logit_bias.dtype).min / 2)
        if self.causal:
            visible = visible & torch.ones(n, n, dtype=torch.bool, device=self.x.device).tril()
        return visible.sum(-1)  # (B, N)

    def output(self, x: Tensor | None = None, w_q: Tensor | None = None, w_k: Tensor | None = None,
               w_v: Tensor | None = None) -> Tensor:
        """A = P (x W_V + b_V): (B, N, dh), at the stored x and weights or at the ones given."""
        x = self.x if x is None else x  # (B, N, D)
        p = self.probabilities(x, w_q, w_k)  # (B, N, N)
        return p @ _project(x, self.w_v if w_v is None else w_v, self.b_v)  # (B, N, N) @ (B, N, dh) -> (B, N, dh)

    def double(self) -> AttentionHead:
        """A detached float64 copy (all spectra are computed in float64); q/k norm modules are copied."""
        def cast(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.detach().to(torch.float64)

        return replace(
            self, x=cast(self.x), w_q=cast(self.w_q), w_k=cast(self.w_k), w_v=cast(self.w_v),
            b_q=cast(self.b_q), b_k=cast(self.b_k), b_v=cast(self.b_v), logit_bias=cast(self.logit_bias),
            q_norm=_double_norm(self.q_norm), k_norm=_double_norm(self.k_norm),
            rotary=None if self.rotary is None else self.rotary.double(),
        )


def _project(x: Tensor, w: Tensor, b: Tensor | None, norm: Norm | None = None) -> Tensor:
    """norm(x W + b): (B, N, D) -> (B, N, dh); no bias or norm when None."""
    out = x @ w  # (B, N, dh)
    if b is not None:
        out = out + b
    return out if norm is None else norm(out)


def _double_norm(norm: Norm | None) -> Norm | None:
    """A float64 copy of a normalisation module, its parameters fixed (measured, not trained); other
    callables (and None) as they are."""
    return copy.deepcopy(norm).double().requires_grad_(False) if isinstance(norm, nn.Module) else norm


def head_attention(
    x: Tensor,
    w_q: Tensor,
    w_k: Tensor,
    w_v: Tensor,
    scale: float,
    b_q: Tensor | None = None,
    b_k: Tensor | None = None,
    b_v: Tensor | None = None,
    logit_bias: Tensor | None = None,
    causal: bool = False,
) -> Tensor:
    """A = softmax((scale q) k^T + logit_bias) v with q = x W_Q + b_Q etc., as a function (AttentionHead.output).

    x (B, N, D) or (N, D); w_* (D, dh); b_* (dh,); logit_bias broadcastable to (B, N, N) (-inf masks; a
    fully masked row gives NaN); causal masks j > i. Returns (B, N, dh), or (N, dh) for an (N, D) input.
    """
    out = AttentionHead(x, w_q, w_k, w_v, scale, b_q, b_k, b_v, logit_bias, causal).output()  # (B, N, dh)
    return out[0] if x.dim() == 2 else out  # (N, dh) for an unbatched input


def one_sample(head: AttentionHead, index: int) -> AttentionHead:
    """The head restricted to sample ``index`` of its batch: x (1, N, D), logit_bias sliced if batched.

    Works for any dataclass head with fields ``x`` and (optionally) ``logit_bias``.
    """
    b = head.x.shape[0]
    if not -b <= index < b:
        raise ValueError(f"one_sample: index {index} out of range for a batch of {b}")
    index %= b
    changes = {"x": head.x[index : index + 1]}  # (1, N, D)
    bias = getattr(head, "logit_bias", None)
    if bias is not None and bias.dim() == 3 and bias.shape[0] == b and b > 1:
        changes["logit_bias"] = bias[index : index + 1]  # (1, N, N)
    return replace(head, **changes)
