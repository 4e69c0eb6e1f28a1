"""Finding the q, k, v projections of a model: declared layouts first, then adapters in order.

The first adapter whose ``matches`` accepts a module wins. A parameter is claimed once: a declared
layout for it takes precedence over any adapter.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from torch import nn
from torch.nn.utils import parametrize

from speccond.adapters.base import Adapter, ProjectionSpec, class_path
from speccond.adapters.timm_attention import TimmAttentionAdapter
from speccond.adapters.torch_mha import TorchMultiheadAttentionAdapter
from speccond.config import SpectralConfig
from speccond.layout import ProjectionLayout

ADAPTERS: tuple[Adapter, ...] = (TorchMultiheadAttentionAdapter(), TimmAttentionAdapter())

__all__ = ["ADAPTERS", "Adapter", "ProjectionSite", "ProjectionSpec", "attention_modules", "find_projections"]


@dataclass(frozen=True)
class ProjectionSite:
    """One projection parameter of a concrete model, ready to be conditioned.

    Attributes:
        attention_name: path of the attention module it belongs to ("" when declared by the user).
        module_name: path of the module holding the parameter.
        module: that module.
        param_name: the parameter's attribute name.
        layout, activation_ok, notes: as in :class:`ProjectionSpec`.
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
    model: nn.Module, config: SpectralConfig, adapters: Sequence[Adapter] = ADAPTERS
) -> list[ProjectionSite]:
    """The projection parameters ``config`` selects, declared layouts first, then adapter-found ones.

    A declared layout's pattern may also match the projection's bias; 1-D tensors are skipped (biases are
    never corrected), any other non-2-D tensor is an error when the site is checked.

    ``targets`` and ``exclude`` are matched against the attention module's name and the name of the
    module that holds the parameter; a site is kept when neither is excluded and either is targeted.
    """
    sites: list[ProjectionSite] = []
    claimed: set[tuple[int, str]] = set()
    for module_name, module in model.named_modules():
        for param_name in _direct_tensor_names(module):
            qualified = f"{module_name}.{param_name}" if module_name else param_name
            layout = config.declared_layout(qualified)
            if layout is None or not _selected(config, module_name, qualified):
                continue
            if getattr(module, param_name).dim() == 1:
                continue  # a bias the pattern also matched: biases are never corrected
            activation_ok = param_name == "weight" and (
                (isinstance(module, nn.Linear) and layout.storage == "out_in")
                or (_is_conv1d(module) and layout.storage == "in_out")
            )
            sites.append(ProjectionSite("", module_name, module, param_name, layout, activation_ok, (), "declared"))
            claimed.add((id(module), param_name))
    for attention_name, attention, adapter in attention_modules(model, adapters):
        for spec in adapter.projections(attention):
            owner = attention.get_submodule(spec.owner) if spec.owner else attention
            owner_name = ".".join(p for p in (attention_name, spec.owner) if p)
            if (id(owner), spec.param_name) in claimed or not _selected(config, attention_name, owner_name):
                continue
            claimed.add((id(owner), spec.param_name))
            sites.append(
                ProjectionSite(
                    attention_name, owner_name, owner, spec.param_name, spec.layout, spec.activation_ok,
                    spec.notes, adapter.name,
                )
            )
    return sites


def _selected(config: SpectralConfig, *names: str) -> bool:
    if config.exclude and any(p.search(n) for p in config.exclude for n in names):
        return False
    return not config.targets or any(p.search(n) for p in config.targets for n in names)


def _direct_tensor_names(module: nn.Module) -> list[str]:
    names = [n for n, p in module._parameters.items() if p is not None]
    if parametrize.is_parametrized(module):
        names += [n for n in module.parametrizations.keys() if n not in names]
    return names


def _is_conv1d(module: nn.Module) -> bool:
    """transformers' Conv1D (GPT-2): y = x @ W + b with W stored (in, out)."""
    return class_path(module).endswith(".Conv1D") and hasattr(module, "nf")
