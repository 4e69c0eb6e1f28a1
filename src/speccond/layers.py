"""Attention layers of a model and their q, k, v projections, conditioned or not.

``layer`` numbers the attention modules in the order the adapters find them (module order). Each
projection can read its stored weight W and its effective weight W + C (equal when not conditioned)
as (out, in) matrices, and the rows of each role and head.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import nn

from speccond.adapters import attention_modules, find_projections
from speccond.adapters.unrecognised import declared_attention
from speccond.core.backends import AddCorrectionHook, Attachment, attachments
from speccond.core.config import SpectralConfig
from speccond.core.layout import ProjectionLayout
from speccond.core.peft_layers import is_tuner_layer, unmerged_delta, unmerged_tuner_layers
from speccond.core.sharded import gathered


@dataclass(frozen=True)
class Projection:
    """One projection parameter of an attention layer."""

    qualified_name: str
    module: nn.Module
    param_name: str
    layout: ProjectionLayout
    acts_as: str  # the paper's role of each block, in block order
    attachment: Optional[Attachment]  # None when not conditioned
    attention: Optional[nn.Module] = None  # the attention module it belongs to (holds timm's q_bias / v_bias)
    tuner: Optional[nn.Module] = None  # the PEFT tuner layer wrapping ``module`` (LoRA...), when there is one

    def stored(self) -> torch.Tensor:
        """W as (out, in), detached (whole, when FSDP2 shards it)."""
        weight = self.attachment.stored_weight() if self.attachment else getattr(self.module, self.param_name)
        return self.layout.out_in(gathered(weight.detach()))

    def effective(self) -> torch.Tensor:
        """W + C as (out, in), detached (W when not conditioned), plus the update of a PEFT tuner layer's
        adapters that are not merged (LoRA: W + C + scaling B A), computed without merging anything."""
        weight = self.attachment.effective_weight() if self.attachment else getattr(self.module, self.param_name)
        weight = gathered(weight.detach())
        delta = None if self.tuner is None else unmerged_delta(self.tuner)
        if delta is not None:
            weight = weight + delta.to(weight.dtype)
        return self.layout.out_in(weight)

    def rows(self, role: str, head: Optional[int] = None) -> torch.Tensor:
        """Output-axis indices of block ``role`` (the module's name for it), of one head if given."""
        out_features = self.layout.out_in(getattr(self.module, self.param_name)).shape[0]
        rows = self.layout.block_rows(role, out_features)
        if head is None:
            return rows
        width = rows.numel() // self.layout.heads(role)
        return rows[head * width : (head + 1) * width]


@dataclass
class AttentionLayer:
    index: int
    name: str
    module: nn.Module
    adapter_name: str
    projections: list[Projection] = field(default_factory=list)
    adapter: Optional[object] = None  # the adapter that claimed the module; None when declared by a layout

    def check_weights_tell(self, what: str) -> None:
        """Raise when q, k or v is not what the weights give: PEFT tuner layers add an update the weights do
        not hold (see unmerged_tuner_layers), or a forward hook on a projection changes its output (qk-norm's
        LayerNorms; speccond's own y + x C^T hook is part of W + C and passes)."""
        for projection in self.projections:
            hooks = [h for h in projection.module._forward_hooks.values() if not isinstance(h, AddCorrectionHook)]
            if hooks or projection.module._forward_pre_hooks:
                kinds = sorted({type(h).__name__ for h in hooks})
                kinds += ["a forward pre-hook"] if projection.module._forward_pre_hooks else []
                raise ValueError(
                    f"layer {self.index} ({self.name}): {what} read the q, k, v weights, but {projection.qualified_name} "
                    f"carries {', '.join(kinds)}, which changes its output after the weights; measure without it"
                )
        tuned = unmerged_tuner_layers(self.module, readable_ok=True)  # LoRA, LoHa, LoKr, VeRA: read as W + delta W
        if tuned:
            raise ValueError(
                f"layer {self.index} ({self.name}): {what} read the q, k, v weights, but the PEFT tuner layers "
                f"{', '.join(tuned[:3])}{' ...' if len(tuned) > 3 else ''} add their own update on top of them, "
                "which the weights do not hold (a tuner that rescales the output, IA3 or DoRA, is not a weight "
                "update; LoRA, LoHa, LoKr and VeRA are read unmerged); measure after merging the adapters "
                "(peft_model.merge_adapter() or merge_and_unload()), or before get_peft_model"
            )

    def block(self, role: str) -> tuple[Projection, str]:
        """The projection holding the block that acts as ``role`` in the attention, and its stored name."""
        for projection in self.projections:
            for stored_role, acts_as in zip(projection.layout.roles, projection.acts_as):
                if acts_as == role:
                    return projection, stored_role
        raise ValueError(f"attention layer {self.index} ({self.name}) has no {role} projection")


LEFT_OUT = "is left out (attention that speccond refuses to condition has no layer)"  # the warning's words


def attention_layers(
    model: nn.Module, config: Optional[SpectralConfig] = None, refused: Optional[list[nn.Module]] = None
) -> list[AttentionLayer]:
    """Every attention layer with its projections; attached corrections are used when present.

    ``config`` supplies declared layouts for modules no adapter knows (only its ``layouts``,
    ``targets`` and ``exclude`` matter here).

    An attention module speccond refuses to condition (timm_refused.py: VOLO's outlook attention, CoaT's
    factorised attention, ...) has no layer here, with a warning naming it and why: apply conditions the
    rest of such a model once these are excluded, and the diagnostics and the monitor then describe the rest
    (a model with nothing else is refused by :func:`coverage_refusal`, naming them). ``refused``, a list,
    receives those modules, so that a watch of the forward (the census) counts the attention they run as known.
    """
    config = config or SpectralConfig(lam=0.0)
    found = {(a.module_name, a.param_name): a for a in attachments(model)}
    layers = [AttentionLayer(i, name, module, adapter.name, adapter=adapter) for i, (name, module, adapter) in enumerate(attention_modules(model))]
    by_name = {layer.name: layer for layer in layers}
    recognised = list(by_name)  # the adapters' attention modules (declared ones join by_name below)
    left_out: list[tuple[str, nn.Module, ValueError]] = []
    sites = find_projections(model, config, refused=left_out)
    for name, module, error in left_out:
        warnings.warn(f"{name or '<root>'} {LEFT_OUT}: {error}", UserWarning, stacklevel=3)
        if refused is not None:
            refused.append(module)
    for site in sites:
        attachment = found.pop((site.module_name, site.param_name), None)
        acts_as = attachment.correction.acts_as if attachment else (site.acts_as or site.layout.roles)
        owner = by_name.get(site.attention_name) or _declared_layer(layers, by_name, site.module_name, model)
        owner.projections.append(_projection(
            model, site.qualified_name, site.module_name, site.param_name, site.layout, acts_as, attachment, owner,
        ))
    for (module_name, param_name), attachment in found.items():  # attached through a layout ``config`` does not declare
        attention = declared_attention(module_name)
        inside = any(module_name.startswith(f"{name}.") or not name for name in recognised)
        if inside or not config.selects(attention, module_name):
            continue  # an adapter's module: its sites follow ``config``
        owner = _declared_layer(layers, by_name, module_name, model)
        correction = attachment.correction
        owner.projections.append(_projection(
            model, attachment.qualified_name, module_name, param_name, correction.layout, correction.acts_as,
            attachment, owner,
        ))
    order = {name: position for position, (name, _) in enumerate(model.named_modules())}
    kept = sorted((layer for layer in layers if layer.projections), key=lambda layer: order[layer.name])
    for index, layer in enumerate(kept):
        layer.index = index
    return kept


def _projection(
    model: nn.Module, qualified_name: str, module_name: str, param_name: str, layout: ProjectionLayout, acts_as: str,
    attachment: Optional[Attachment], owner: AttentionLayer,
) -> Projection:
    module = model.get_submodule(module_name)
    parent = model.get_submodule(module_name.rpartition(".")[0])  # the model itself for a top-level name
    tuner = parent if is_tuner_layer(parent) and parent._modules["base_layer"] is module else None
    return Projection(qualified_name, module, param_name, layout, acts_as, attachment, owner.module, tuner=tuner)


def unrecognised_refusal(model: nn.Module, what: str, config: Optional[SpectralConfig] = None) -> str:
    """Why ``what`` (a diagnostic) refuses ``model`` because attention-like modules in it are covered by no
    adapter, declared layout or attached correction ('' when none is): a table that quietly left them out
    would read as "nothing to measure" where there is attention (tests/test_diagnostics_refuse_unrecognised.py).
    Runs nothing."""
    from speccond.adapters import unrecognised_attention

    config = config or SpectralConfig(lam=0.0)
    covered = [*find_projections(model, config, refused=[]), *attachments(model)]  # each has .module and .param_name
    found = unrecognised_attention(model, config, covered)
    if not found:
        return ""
    names = ", ".join(f"{item.name or '<root>'} ({item.class_path.rsplit('.', 1)[-1]})" for item in found[:5])
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    return (
        f"{what}: {len(found)} attention-like modules of {type(model).__name__} are recognised by no speccond "
        f"adapter and covered by no declared layout, so their layers would be missing from the table: {names}{more}. "
        "speccond.apply(model) prints the layouts to declare; pass them as projection_spectra(model, "
        "SpectralConfig(layouts=...)), or condition the model with them first (the head diagnostics rebuild "
        "only adapter-recognised attention)"
    )


def coverage_refusal(
    model: nn.Module, what: str, config: Optional[SpectralConfig] = None, layers: Optional[list[AttentionLayer]] = None,
) -> str:
    """Why ``what`` (a diagnostic or the monitor) refuses ``model`` because its table would not cover the
    model's attention ('' when it would): attention-like modules nothing covers (:func:`unrecognised_refusal`),
    or no attention layer found at all, which leaves an empty table that reads as "nothing to measure" (a
    module whose attention is found by neither an adapter nor its projections' names, or a model without
    attention). ``layers``: ``attention_layers(model, config)`` when the caller has them already. Runs nothing."""
    unrecognised = unrecognised_refusal(model, what, config)
    if unrecognised:
        return unrecognised
    if layers if layers is not None else attention_layers(model, config):
        return ""
    refused: list[tuple[str, nn.Module, ValueError]] = []
    find_projections(model, config or SpectralConfig(lam=0.0), refused=refused)
    if refused:
        name, _, error = refused[0]
        return (
            f"{what}: every attention module of {type(model).__name__} that speccond recognises is one it refuses "
            f"({len(refused)}, e.g. {name or '<root>'}: {error}), so what it reports would be empty"
        )
    return (
        f"{what}: found no attention layer in {type(model).__name__} (no module a speccond adapter recognises, "
        "no declared layout, no attached correction), so what it reports would be empty; pass the model or "
        "submodule that holds the attention, or, where its q, k, v projection has a name speccond does not know, "
        "declare its layout (SpectralConfig(layouts=...); speccond.apply(model) says how)"
    )


def _declared_layer(layers: list[AttentionLayer], by_name: dict, module_name: str, model: nn.Module) -> AttentionLayer:
    """A declared projection belongs to the user's attention (:func:`declared_attention`)."""
    parent = declared_attention(module_name)
    if parent not in by_name:
        layer = AttentionLayer(len(layers), parent, model.get_submodule(parent), "declared")
        layers.append(layer)
        by_name[parent] = layer
    return by_name[parent]


def projection_bias(
    module: nn.Module, param_name: str, out_features: int, roles: str, attention: Optional[nn.Module] = None
) -> Optional[torch.Tensor]:
    """The bias over a projection's output features, or None.

    ``<name>.replace("weight", "bias")`` on the same module when its size matches (nn.Linear, Conv1D,
    nn.MultiheadAttention's in_proj_bias); for nn.MultiheadAttention's separate q/k/v weights, the role's
    third of ``in_proj_bias``. These are views of the module's tensor data (writing to them writes the bias).

    When the projection holds no bias and ``attention`` (the attention module it belongs to) is given:
    timm's separate biases of a bias-free fused ``qkv`` (EVA, BEiT, SwinV2: ``q_bias``, ``v_bias`` and the
    zero buffer ``k_bias``, which the forward concatenates as q, k, v) when ``roles`` is "qkv" and the
    sizes add up. That is a copy: writing to it changes nothing.
    """
    bias = getattr(module, param_name.replace("weight", "bias"), None)
    if isinstance(bias, torch.Tensor) and bias.dim() == 1 and bias.numel() == out_features:
        return bias.data
    shared = getattr(module, "in_proj_bias", None)
    if isinstance(shared, torch.Tensor) and shared.numel() == 3 * out_features and len(roles) == 1:
        start = "qkv".index(roles) * out_features
        return shared.data[start : start + out_features]
    if attention is not None and roles == "qkv":
        parts = [getattr(attention, f"{role}_bias", None) for role in roles]
        if parts[0] is not None and parts[2] is not None:
            parts[1] = torch.zeros_like(parts[0]) if parts[1] is None else parts[1]
            vectors = all(isinstance(p, torch.Tensor) and p.dim() == 1 for p in parts)
            if vectors and sum(p.numel() for p in parts) == out_features:
                return torch.cat([p.detach() for p in parts])  # (out_features,), blocks q, k, v
    return None
