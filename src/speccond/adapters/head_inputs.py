"""What an adapter tells the diagnostics about one attention module's logits, so that one head can be
rebuilt exactly as the module computes it (``speccond.diagnostics.heads``).

An adapter that can rebuild its heads has a method ``head_inputs(module, args, kwargs) -> HeadInputs``,
called with the arguments the module received in a real forward (captured by a pre-hook). It reads the
module's own settings (scale, q/k norms, rotary embedding, soft-capping, masks, position biases) and
raises ValueError naming what it cannot rebuild. An adapter without the method does not rebuild heads,
and the diagnostics refuse with the adapter's reason (``head_refusal``). The head then computes

    q = rot(n_Q(x W_Q + b_Q)),  k = rot(n_K(x W_K + b_K)),  v = x W_V + b_V          (B, N, dh)
    logits = scale q k^T;  logits = cap tanh(logits / cap) if soft-capped;  + logit_bias;  causal mask
    A(x) = softmax(logits) v

where k and v come from the key/value head that serves the query head (grouped-query attention).
Only torch is imported here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import nn

Tensor = torch.Tensor


@dataclass(frozen=True)
class Rotary:
    """A rotary position embedding applied to q and k after the projection and any q/k norm.

    cos, sin: (B or 1, N, r) with r <= dh, r even: the first r features of each head rotate, the rest pass
    through (partial rotary: Phi, GPT-NeoX ``rotary_pct``). ``interleaved`` False rotates the pairs
    (i, i + r/2) (``rotate_half``: Llama, GPT-NeoX, Phi); True the pairs (2i, 2i + 1) (GPT-J).

        rot(q)[:r] = q[:r] cos + rotate(q[:r]) sin
    """

    cos: Tensor
    sin: Tensor
    interleaved: bool = False

    def __call__(self, t: Tensor) -> Tensor:
        """(B, N, dh) -> (B, N, dh)."""
        r = self.cos.shape[-1]
        rotated, rest = t[..., :r], t[..., r:]
        if self.interleaved:
            pairs = rotated.unflatten(-1, (-1, 2))  # (B, N, r/2, 2)
            turned = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)  # (B, N, r)
        else:
            half = r // 2
            turned = torch.cat((-rotated[..., half:], rotated[..., :half]), dim=-1)  # (B, N, r)
        out = rotated * self.cos.to(t.dtype) + turned * self.sin.to(t.dtype)
        return torch.cat((out, rest), dim=-1) if rest.shape[-1] else out

    def double(self) -> Rotary:
        return Rotary(self.cos.detach().double(), self.sin.detach().double(), self.interleaved)


@dataclass(frozen=True)
class HeadInputs:
    """How one attention module forms its logits on one captured input (module docstring).

    x: (B, N, D) the input its q, k, v projections read (self-attention).
    scale: the logit scale (1 / sqrt(dh) for most; T5 uses 1).
    logit_bias: additive, broadcastable to (B, H, N, N): padding and sliding-window masks (-inf or
        finfo.min), relative position biases, ALiBi; H = the module's query heads (size 1: shared). None: none.
    causal: mask keys j > i (when the mask is not already in ``logit_bias``).
    q_norm, k_norm: per-head normalisation of q and k ((B, N, dh) -> (B, N, dh)), or None.
    rotary: rotary embedding of q and k, or None.
    softcap: logits = softcap tanh(logits / softcap) before the bias (Gemma 2), or None.
    """

    x: Tensor
    scale: float
    logit_bias: Optional[Tensor] = None
    causal: bool = False
    q_norm: Optional[Callable[[Tensor], Tensor]] = None
    k_norm: Optional[Callable[[Tensor], Tensor]] = None
    rotary: Optional[Rotary] = None
    softcap: Optional[float] = None

    def head_bias(self, head: int) -> Optional[Tensor]:
        """The logit bias of query head ``head`` in the dtype of x: (B or 1, N or 1, N), or None. Hidden
        entries become finfo(dtype).min (a key stays hidden; a fully hidden row is uniform, as in transformers)."""
        if self.logit_bias is None:
            return None
        bias = self.logit_bias
        if bias.dim() == 4:  # (B, H or 1, N, N)
            bias = bias[:, head if bias.shape[1] > 1 else 0]
        dtype = self.x.dtype
        return bias.detach().clamp_min(torch.finfo(dtype).min).to(dtype)


class RebuiltByForm:
    """For adapter dataclasses with fields ``name``, ``head_form`` ((module, args, kwargs) -> HeadInputs, or
    None) and ``head_reason`` (why not, when None): one ``head_inputs`` for them all."""

    def head_inputs(self, module: nn.Module, args: tuple, kwargs: dict) -> HeadInputs:
        if self.head_form is None:
            raise ValueError(self.head_reason or f"{self.name}: its heads cannot be rebuilt")
        return self.head_form(module, args, kwargs)


def head_refusal(adapter: object) -> Optional[str]:
    """Why ``adapter`` does not rebuild heads, or None when it does."""
    reason = getattr(adapter, "head_reason", "")
    if reason or hasattr(adapter, "head_inputs"):
        return reason or None
    return "its adapter does not describe how the module forms its logits"


# -- helpers the adapters share --------------------------------------------------------------------------
def bound_arguments(module: nn.Module, args: tuple, kwargs: dict) -> dict:
    """The captured call as {parameter name: value}, bound against ``module.forward``'s signature
    (positional and keyword calls read alike); extra ``**kwargs`` stay under their own names."""
    import inspect

    try:
        bound = inspect.signature(module.forward).bind_partial(*args, **kwargs).arguments
    except TypeError:
        return dict(kwargs)
    out = {}
    for name, value in bound.items():
        parameter = inspect.signature(module.forward).parameters[name]
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        elif parameter.kind is not inspect.Parameter.VAR_POSITIONAL:
            out[name] = value
    return out


def argument(args: tuple, kwargs: dict, position: int, *names: str) -> Any:
    """The captured argument at ``position`` or under one of ``names`` (None when absent)."""
    if len(args) > position:
        return args[position]
    for name in names:
        if kwargs.get(name) is not None:
            return kwargs[name]
    return None


def hidden_states(args: tuple, kwargs: dict, *names: str) -> Tensor:
    """The (B, N, D) input of a self-attention module, first positional or by name."""
    x = argument(args, kwargs, 0, *(names or ("hidden_states",)))
    if not isinstance(x, Tensor) or x.dim() != 3:
        raise ValueError(
            f"could not find the (B, N, D) attention input among the captured arguments ({', '.join(names)})"
        )
    return x.detach()


def additive_mask(mask: Optional[Tensor], dtype: torch.dtype = torch.float64) -> Optional[Tensor]:
    """A mask as an additive float64 bias (B, 1 or H, N or 1, N): bool masks (True = attend) become 0 / -inf;
    float masks are additive already (transformers writes finfo(dtype).min where a key is hidden), and a
    hidden entry becomes finfo(float64).min, so it stays hidden (and a fully hidden row stays uniform, as
    in the model) after the cast."""
    if mask is None:
        return None
    if mask.dim() == 2:  # (B, N) keep-mask of keys (1 = attend), as a tokenizer returns it
        keep = mask.bool()[:, None, None, :]  # (B, 1, 1, N)
        return torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)
    if mask.dim() == 3:  # (B, N, N)
        mask = mask[:, None]
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float("-inf"))
    hidden = mask <= torch.finfo(mask.dtype).min / 2  # transformers' finfo(its dtype).min
    return mask.detach().to(dtype).masked_fill(hidden, torch.finfo(dtype).min)


def has_module(module: nn.Module, name: str) -> bool:
    """Whether ``module.<name>`` is a module other than nn.Identity."""
    child = getattr(module, name, None)
    return isinstance(child, nn.Module) and not isinstance(child, nn.Identity)
