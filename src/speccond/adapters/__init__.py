"""Finding the q, k, v projections of a model: declared layouts first, then adapters in order.

The first adapter whose ``matches`` accepts a module wins. A parameter is claimed once: a declared
layout for it takes precedence over any adapter. Adapters match on class paths (strings) and
attributes, so neither timm nor transformers is imported here. A module that looks like attention but
that nothing claims is reported by :func:`unrecognised_attention`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from torch import nn
from torch.nn.utils import parametrize

from speccond.adapters.base import Adapter, ProjectionSpec, is_conv1d
from speccond.adapters.hf_deberta import HF_DEBERTA_V2
from speccond.adapters.hf_fused_qkv import HF_FUSED_QKV
from speccond.adapters.hf_gpt2 import HFGPT2AttentionAdapter
from speccond.adapters.hf_relative_bias import HF_MPNET, HF_T5
from speccond.adapters.hf_separate_qkv import HF_ALBERT, HF_BERT, HF_DISTILBERT, HF_QKV_PROJ
from speccond.adapters.inferred import InferredAttentionAdapter
from speccond.adapters.timm_attention import TIMM_ATTENTION
from speccond.adapters.timm_attention_pool import TimmAttentionPoolAdapter
from speccond.adapters.timm_davit import TIMM_DAVIT_CHANNEL, TIMM_DAVIT_CHANNEL_V2, TIMM_DAVIT_WINDOW
from speccond.adapters.timm_eva import TIMM_BEIT, TIMM_EVA, TIMM_SWINV2
from speccond.adapters.timm_fused import TIMM_CAIT_TALKING_HEADS, TIMM_CONVIT_MHSA, TIMM_FASTVIT
from speccond.adapters.timm_pooled import TIMM_HIERA, TIMM_MVIT
from speccond.adapters.timm_refused import TIMM_REFUSED
from speccond.core.peft_layers import tuned_layer
from speccond.adapters.timm_separate import (
    TIMM_CONVIT_GPSA, TIMM_CROSSVIT, TIMM_MVIT_POOL_FIRST, TIMM_REDUCED_KV, TIMM_TNT,
)
from speccond.adapters.timm_swin import TIMM_SWIN
from speccond.adapters.timm_windowed import TIMM_GCVIT, TIMM_MAXVIT, TIMM_NEST, TIMM_TWINS_LOCAL
from speccond.adapters.timm_xcit import TIMM_XCA, TimmClassAttnAdapter
from speccond.adapters.torch_mha import TorchMultiheadAttentionAdapter
from speccond.adapters.unrecognised import UnrecognisedAttention, declared_attention, find_unrecognised, unrecognised_message
from speccond.core.config import SpectralConfig
from speccond.core.layout import ProjectionLayout

# First match wins. The timm and transformers entries match disjoint class paths; the transformers
# entries also require their q/k/v attribute names, so their order does not matter either, except that
# the specific T5 / MPNet / ALBERT / DeBERTa entries come before the generic name families. The inferred
# adapter comes last, just before the unrecognised-module error: it takes only what no named entry does.
ADAPTERS: tuple[Adapter, ...] = (
    TorchMultiheadAttentionAdapter(),
    TIMM_ATTENTION,
    TIMM_SWIN,
    TIMM_DAVIT_WINDOW,
    TIMM_DAVIT_CHANNEL,
    TIMM_DAVIT_CHANNEL_V2,
    TIMM_XCA,
    TimmClassAttnAdapter(),
    TimmAttentionPoolAdapter(),
    TIMM_EVA,
    TIMM_BEIT,
    TIMM_SWINV2,
    TIMM_CAIT_TALKING_HEADS,
    TIMM_CONVIT_MHSA,
    TIMM_CONVIT_GPSA,
    TIMM_FASTVIT,
    TIMM_CROSSVIT,
    TIMM_TNT,
    TIMM_REDUCED_KV,
    TIMM_MVIT,
    TIMM_MVIT_POOL_FIRST,
    TIMM_HIERA,
    TIMM_MAXVIT,
    TIMM_GCVIT,
    TIMM_NEST,
    TIMM_TWINS_LOCAL,
    *TIMM_REFUSED,  # claimed so that apply refuses them with the reason (timm_refused.py)
    HF_T5,
    HF_MPNET,
    HF_ALBERT,
    HF_DEBERTA_V2,
    HF_BERT,
    HF_DISTILBERT,
    HF_QKV_PROJ,
    HFGPT2AttentionAdapter(),
    *HF_FUSED_QKV,
    InferredAttentionAdapter(),  # last: an unnamed module whose layout one probed candidate confirms (inferred.py)
)

__all__ = [
    "ADAPTERS",
    "Adapter",
    "ProjectionSite",
    "ProjectionSpec",
    "UnrecognisedAttention",
    "attention_modules",
    "find_projections",
    "unrecognised_attention",
    "unrecognised_message",
]


@dataclass(frozen=True)
class ProjectionSite:
    """One projection parameter of a concrete model, ready to be conditioned.

    Attributes:
        attention_name: path of the attention module it belongs to ("" when declared by the user).
        module_name: path of the module holding the parameter.
        module: that module.
        param_name: the parameter's attribute name.
        layout, activation_ok, notes, acts_as, probe_skip, collapse_exempt, qk_normalised: as in
            :class:`ProjectionSpec`.
        source: the adapter's name, or "declared".
    """

    attention_name: str
    module_name: str
    module: nn.Module
    param_name: str
    layout: ProjectionLayout
    activation_ok: bool
    notes: tuple[str, ...]
    source: str
    acts_as: str = ""
    probe_skip: str = ""
    collapse_exempt: str = ""
    qk_normalised: str = ""

    @property
    def qualified_name(self) -> str:
        return f"{self.module_name}.{self.param_name}" if self.module_name else self.param_name


def attention_modules(model: nn.Module, adapters: Sequence[Adapter] = ADAPTERS) -> list[tuple[str, nn.Module, Adapter]]:
    """Every attention module an adapter recognises, in module order, with the adapter that claimed it."""
    found = []
    for name, module in model.named_modules():
        for adapter in adapters:
            if adapter.matches(module):
                found.append((name, module, adapter))
                break
    return found


def find_projections(
    model: nn.Module,
    config: SpectralConfig,
    adapters: Sequence[Adapter] = ADAPTERS,
    refused: Optional[list[tuple[str, nn.Module, ValueError]]] = None,
) -> list[ProjectionSite]:
    """The projection parameters ``config`` selects, declared layouts first, then adapter-found ones.

    A declared layout's pattern may also match the projection's bias; 1-D tensors are skipped (biases are
    never corrected), any other non-2-D tensor is an error when the site is checked.

    ``targets`` and ``exclude`` are matched against the attention module's name and the name of the
    module that holds the parameter; a site is kept when neither is excluded and either is targeted.

    An attention module whose adapter refuses it (timm_refused.py, a layout that cannot be inferred) raises
    its ValueError; with ``refused`` (a list), it is appended there as (name, module, error) instead, and the
    module has no sites (the diagnostics describe the others and say which they left out).
    """
    sites: list[ProjectionSite] = []
    claimed: set[tuple[int, str]] = set()
    logical = _logical_names(model)
    for module_name, module in model.named_modules():
        for param_name in _direct_tensor_names(module):
            name = logical.get(id(module), module_name)
            qualified = f"{name}.{param_name}" if name else param_name
            layout = config.declared_layout(qualified)
            if layout is None or not config.selects(declared_attention(module_name), module_name, qualified):
                continue
            if getattr(module, param_name).dim() == 1:
                continue  # a bias the pattern also matched: biases are never corrected
            activation_ok = param_name == "weight" and (
                (isinstance(module, nn.Linear) and layout.storage == "out_in")
                or (is_conv1d(module) and layout.storage == "in_out")
            )
            sites.append(ProjectionSite("", module_name, module, param_name, layout, activation_ok, (), "declared"))
            claimed.add((id(module), param_name))
    for attention_name, attention, adapter in attention_modules(model, adapters):
        if _excluded(config, attention_name):
            continue  # before projections(): a refusing adapter (timm_refused.py) raises there
        try:
            specs = adapter.projections(attention)
        except ValueError as error:
            if refused is None:
                raise
            refused.append((attention_name, attention, error))
            continue
        for spec in specs:
            owner = attention.get_submodule(spec.owner) if spec.owner else attention
            owner, below = tuned_layer(owner)  # a PEFT tuner layer: the layer it wraps carries C
            owner_name = ".".join(p for p in (attention_name, spec.owner, below) if p)
            if (id(owner), spec.param_name) in claimed or not config.selects(attention_name, owner_name):
                continue
            claimed.add((id(owner), spec.param_name))
            sites.append(
                ProjectionSite(
                    attention_name, owner_name, owner, spec.param_name, spec.layout, spec.activation_ok,
                    spec.notes, adapter.name, spec.acts_as, spec.probe_skip, spec.collapse_exempt,
                    spec.qk_normalised,
                )
            )
    return sites


def unrecognised_attention(
    model: nn.Module,
    config: SpectralConfig,
    sites: Sequence[ProjectionSite] = (),
    adapters: Sequence[Adapter] = ADAPTERS,
) -> list[UnrecognisedAttention]:
    """Modules that look like attention, that ``config`` selects, and whose q/k/v-like projections no
    adapter, no declared layout and none of ``sites`` claims (see speccond.adapters.unrecognised).

    Recognition does not depend on targets/exclude: a module an adapter knows is never reported, and a
    module that targets/exclude leave out is not reported either.
    """
    claimed = {(id(site.module), site.param_name) for site in sites}
    recognised = set()
    for name, attention, adapter in attention_modules(model, adapters):
        recognised.add(id(attention))
        if _excluded(config, name):
            continue
        try:
            specs = adapter.projections(attention)
        except ValueError:
            continue  # refused: recognised, and find_projections raises (or reports) its reason
        for spec in specs:
            owner = attention.get_submodule(spec.owner) if spec.owner else attention
            claimed.add((id(tuned_layer(owner)[0]), spec.param_name))
    logical = _logical_names(model)
    for module_name, module in model.named_modules():
        for param_name in _direct_tensor_names(module):
            name = logical.get(id(module), module_name)
            qualified = f"{name}.{param_name}" if name else param_name
            if config.declared_layout(qualified) is not None:
                claimed.add((id(module), param_name))
    return find_unrecognised(model, claimed, recognised, config.selects)


def _excluded(config: SpectralConfig, attention_name: str) -> bool:
    """Whether ``config.exclude`` leaves out the whole attention module (then none of its sites is kept)."""
    return any(pattern.search(attention_name) for pattern in config.exclude or ())


def _logical_names(model: nn.Module) -> dict[int, str]:
    """The name each layer wrapped by a PEFT tuner layer had before PEFT wrapped it (``attn.qkv`` for
    ``attn.qkv.base_layer``): declared layouts' patterns are matched against it, as written for the model."""
    names = {}
    for name, module in model.named_modules():
        inner, below = tuned_layer(module)
        if below:
            names[id(inner)] = name
    return names


def _direct_tensor_names(module: nn.Module) -> list[str]:
    names = [n for n, p in module._parameters.items() if p is not None]
    if parametrize.is_parametrized(module):
        names += [n for n in module.parametrizations.keys() if n not in names]
    return names
