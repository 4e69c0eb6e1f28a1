"""Modules that look like attention but that no adapter recognises and no declared layout covers.

Conditioning only what the adapters know would silently leave such a module plain, so ``apply`` stops
and shows the declaration that would condition it. A module is flagged when it directly owns q/k/v-like
projections (a child with a 2-D ``weight``, or a 2-D parameter, with a name such as ``qkv``, ``to_qkv``,
``query``/``key``/``value``, ``q_proj``, ``in_proj_weight``, ``c_attn``), none of them claimed, and either
its class name says attention ("Attention", "Attn") or those projections cover two roles or more.
Containers that merely hold an attention module (HF ``BertAttention``, timm ``Block``) and output
projections own no such projection and are never flagged.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import nn

from speccond.adapters.base import class_path, is_conv1d

_NAME = re.compile(
    r"^(?:to_|w_?|c_)?(?P<core>query_key_value|qkv|qk|kv|query|key|value|q|k|v)"
    r"(?:_?(?:proj|lin|linear|layer))?(?:_weight)?$",
    re.IGNORECASE,
)
_CORE_ROLES = {"query_key_value": "qkv", "query": "q", "key": "k", "value": "v"}
_SPECIAL_ROLES = {"in_proj": "qkv", "in_proj_weight": "qkv", "c_attn": "qkv", "q_attn": "q"}
_ATTENTION_CLASS = re.compile(r"attention|attn", re.IGNORECASE)
_HEAD_ATTRS = ("num_heads", "num_attention_heads", "n_heads", "n_head", "heads", "groups")


@dataclass(frozen=True)
class Projection:
    """A q/k/v-like projection owned by an unrecognised module."""

    qualified_name: str  # the weight's full name in the model, e.g. "layers.0.attn.to_qkv.weight"
    shape: tuple[int, ...]
    roles: str  # guessed from the name, block order q, k, v
    storage: str  # "in_out" for a transformers Conv1D, else "out_in"


@dataclass(frozen=True)
class UnrecognisedAttention:
    name: str
    class_path: str
    num_heads: Optional[int]
    projections: tuple[Projection, ...]


def projection_roles(name: str) -> Optional[str]:
    """The roles a q/k/v-like attribute name suggests ("qkv", "q", "kv", ...), or None if it is not one."""
    if name in _SPECIAL_ROLES:
        return _SPECIAL_ROLES[name]
    match = _NAME.match(name)
    if match is None:
        return None
    core = match.group("core").lower()
    return _CORE_ROLES.get(core, core)


def find_unrecognised(
    model: nn.Module, claimed: set[tuple[int, str]], skip: set[int], selected: Callable[..., bool]
) -> list[UnrecognisedAttention]:
    """Attention-like modules of ``model`` whose q/k/v-like projections are all unclaimed.

    Args:
        claimed: (id(owner module), parameter name) of every projection an adapter or declaration covers.
        skip: ids of modules an adapter recognised (never flagged).
        selected: ``selected(*names)`` tells whether config.targets/exclude select a module.
    """
    found = []
    for name, module in model.named_modules():
        if id(module) in skip:
            continue
        projections = _projections(name, module)
        if not projections or any(key in claimed for key, _ in projections):
            continue
        roles = {r for _, p in projections for r in p.roles}
        if len(roles) < 2 and not _ATTENTION_CLASS.search(class_path(module).rsplit(".", 1)[-1]):
            continue
        if not selected(name, *(p.qualified_name.rsplit(".", 1)[0] for _, p in projections)):
            continue
        listed = tuple(p for _, p in projections)
        found.append(UnrecognisedAttention(name, class_path(module), _num_heads(module), listed))
    return found


def unrecognised_message(found: list[UnrecognisedAttention]) -> str:
    """The error: which modules, and the SpectralConfig declaration that would condition them."""
    lines = ["found attention-like modules that no speccond adapter recognises and no declared layout covers:"]
    for item in found[:10]:
        weights = ", ".join(f"{p.qualified_name} {tuple(p.shape)}" for p in item.projections)
        lines.append(f"  {item.name or '<root>'} ({item.class_path}): {weights}")
    if len(found) > 10:
        lines.append(f"  ... and {len(found) - 10} more")
    lines.append(
        "They would be left unconditioned. Declare their layouts (check the block order, the head count and "
        "whether heads are interleaved against the module's forward):"
    )
    declarations, excludes = {}, {}
    for item in found:
        excludes.setdefault(_pattern(item.name) if item.name else "^$", None)
        for p in item.projections:
            declarations.setdefault(_pattern(p.qualified_name), _declaration(p, item.num_heads))
    lines.append("  SpectralConfig(layouts={")
    lines += [f'      r"{pattern}": {text}' for pattern, text in declarations.items()]
    lines.append("  })")
    excluded = ", ".join(f'r"{p}"' for p in excludes)
    lines.append(f"or leave them plain on purpose: SpectralConfig(exclude=[{excluded}])")
    return "\n".join(lines)


def _projections(name: str, module: nn.Module) -> list[tuple[tuple[int, str], Projection]]:
    """((id(owner), parameter name), Projection) for each q/k/v-like projection ``module`` owns directly."""
    prefix = f"{name}." if name else ""
    out = []
    for child_name, child in module.named_children():
        weight = getattr(child, "weight", None)
        roles = projection_roles(child_name)
        if roles and isinstance(weight, torch.Tensor) and weight.dim() == 2:
            storage = "in_out" if is_conv1d(child) else "out_in"
            projection = Projection(f"{prefix}{child_name}.weight", tuple(weight.shape), roles, storage)
            out.append(((id(child), "weight"), projection))
    tensors = dict(module.named_parameters(recurse=False))
    parametrizations = getattr(module, "parametrizations", None)
    if parametrizations is not None:
        tensors.update({n: getattr(module, n) for n in parametrizations.keys()})
    for param_name, tensor in tensors.items():
        roles = projection_roles(param_name)
        if roles and tensor is not None and tensor.dim() == 2:
            projection = Projection(f"{prefix}{param_name}", tuple(tensor.shape), roles, "out_in")
            out.append(((id(module), param_name), projection))
    return out


def _num_heads(module: nn.Module) -> Optional[int]:
    for attr in _HEAD_ATTRS:
        value = getattr(module, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _pattern(qualified_name: str) -> str:
    """An anchored regex for ``qualified_name`` with every numeric index generalised (one line per layer type)."""
    return "^" + r"\.".join(r"\d+" if part.isdigit() else re.escape(part) for part in qualified_name.split(".")) + "$"


def _declaration(p: Projection, num_heads: Optional[int]) -> str:
    fields = [f'roles="{p.roles}"', f"num_heads={num_heads or 1}"]
    if p.storage != "out_in":
        fields.append(f'storage="{p.storage}"')
    comments = []
    if num_heads is None:
        comments.append("set num_heads to the module's head count")
    if len(p.roles) > 1:
        comments.append('arrangement="per_head" if its forward splits the output as (H, 3, dh)')
    out = p.shape[0] if p.storage == "out_in" else p.shape[1]
    if out % len(p.roles):
        comments.append(f"check roles: {len(p.roles)} blocks do not divide the output width {out}")
    comment = f"  # {'; '.join(comments)}" if comments else ""
    return f"ProjectionLayout({', '.join(fields)}),{comment}"
