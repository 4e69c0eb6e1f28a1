"""Attaching a SpectralCorrection to a parameter, finding it again, and taking it off.

Two backends give the same map:

- "weight": ``torch.nn.utils.parametrize``; ``module.<name>`` reads W + C, the trainable tensor moves to
  ``module.parametrizations.<name>.original`` (the same Parameter object, so optimisers built before
  attaching keep working). Works for any code that reads the weight, including nn.MultiheadAttention.
- "activation": the correction becomes the child ``module.spectral_correction`` and the parameter stays
  where it was (state_dict keys unchanged, the model pickles). An nn.Linear computes F.linear(x, W + C,
  b) (:class:`CorrectedLinearForward`, C folded into its forward: the cost of the plain layer); another
  Linear-like module (Conv1D, a Linear subclass with its own forward) gets a forward hook adding x C^T
  to its output. Only a Linear-like module called as a module (y = x W^T + b on the last axis) can
  carry it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

from speccond.core.correction import SpectralCorrection
from speccond.core.peft_layers import is_tuner_layer, rescaling_reason
from speccond.core.sharded import shaped_like

CHILD_NAME = "spectral_correction"
_ABSENT = object()  # Undo: the module had no instance-level forward


class CorrectedLinearForward:
    """The activation backend's forward of an nn.Linear: ``F.linear(x, W + C, b)``, the module's own forward
    with C folded into the weight it multiplies by, so it costs what the plain layer costs (one (out, in)
    add per call, independent of batch and sequence length). Set as the instance's ``forward``; ``weight``
    stays the module's own Parameter. A plain class, so models pickle.

    ``parent`` and ``child_name``: where the module sat when it was conditioned (see
    :func:`refuse_rescaling_wrapper`).
    """

    def __init__(self, module: nn.Module, parent: nn.Module | None, child_name: str) -> None:
        self.module, self.parent, self.child_name = module, parent, child_name

    def __call__(self, input: torch.Tensor) -> torch.Tensor:
        module = self.module
        refuse_rescaling_wrapper(self.parent, self.child_name, module)
        correction: SpectralCorrection = getattr(module, CHILD_NAME)
        return F.linear(input, correction.plus(module.weight), module.bias)


class AddCorrectionHook:
    """The activation backend on a Linear-like module with its own forward (transformers' Conv1D, Linear
    subclasses): a forward hook returning y + x C^T. A plain class so models pickle."""

    def __init__(self, parent: nn.Module | None = None, child_name: str = "") -> None:
        self.parent, self.child_name = parent, child_name

    def __call__(self, module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        refuse_rescaling_wrapper(self.parent, self.child_name, module)
        correction: SpectralCorrection = getattr(module, CHILD_NAME)
        return correction.add_to_output(args[0], output)


def folds(module: nn.Module) -> bool:
    """Whether the activation backend folds C into ``module``'s forward (an nn.Linear whose class keeps
    nn.Linear's forward) rather than adding x C^T to its output with a hook."""
    return isinstance(module, nn.Linear) and type(module).forward is nn.Linear.forward


def refuse_rescaling_wrapper(parent: nn.Module | None, child_name: str, module: nn.Module) -> None:
    """Raise if PEFT wrapped ``module`` (conditioned on the activation backend) in a tuner layer that
    rescales its output (IA3, DoRA): C would be rescaled with the output and the tuner's merge, which
    rescales W only, could not keep it. Refused at the first forward, before any training. A module still
    where it was conditioned (``parent.<child_name>``, the usual case: one lookup) passes at once."""
    wrapper = parent._modules.get(child_name) if parent is not None else module
    if wrapper is module:
        return
    while is_tuner_layer(wrapper) and wrapper is not module:
        reason = rescaling_reason(wrapper)
        if reason:
            raise RuntimeError(
                f"{child_name} carries speccond's activation-backend correction and is now wrapped by PEFT: "
                f"{reason}, so the correction would be rescaled with the output and no merge could keep it. "
                "Condition the model with SpectralConfig(backend='weight') before get_peft_model (the tuners "
                "tested, LoRA, DoRA, IA3, LoHa, LoKr and VeRA, then merge exactly), or use LoRA without DoRA"
            )
        wrapper = wrapper._modules["base_layer"]


@dataclass(frozen=True)
class Attachment:
    """One correction found on a model."""

    module_name: str
    module: nn.Module
    param_name: str
    correction: SpectralCorrection
    backend: str

    @property
    def qualified_name(self) -> str:
        return f"{self.module_name}.{self.param_name}" if self.module_name else self.param_name

    def stored_weight(self) -> torch.Tensor:
        """The trainable tensor W (without C)."""
        if self.backend == "weight":
            return self.module.parametrizations[self.param_name].original
        return getattr(self.module, self.param_name)

    def effective_weight(self) -> torch.Tensor:
        """W + C in the stored orientation, as the model uses it."""
        if self.backend == "weight":
            return getattr(self.module, self.param_name)
        stored = self.stored_weight()
        return stored + shaped_like(self.correction.dense(stored.dtype), stored)


def attach(
    module: nn.Module, param_name: str, correction: SpectralCorrection, backend: str, init: str,
    parent: nn.Module | None = None, child_name: str = "",
) -> None:
    """Attach ``correction`` to ``module.<param_name>``; ``init="preserve"`` stores W - C. ``parent`` and
    ``child_name``: where ``module`` sits in the model (the activation backend's hook checks it later)."""
    weight = getattr(module, param_name)
    correction.to(device=weight.device)
    if backend == "weight":
        saved = weight.detach().clone() if init == "add" else None
        # The module's original parameter order, restored when its last correction comes off.
        earlier = _corrections_on(module)
        correction.parameter_order = earlier[0].parameter_order if earlier else tuple(module._parameters)
        # right_inverse stores W - C at registration, which is "preserve"; "add" puts W back bit for bit.
        parametrize.register_parametrization(module, param_name, correction)
        if saved is not None:
            with torch.no_grad():
                module.parametrizations[param_name].original.copy_(saved)
        return
    module.add_module(CHILD_NAME, correction)
    if folds(module):
        module.forward = CorrectedLinearForward(module, parent, child_name)
    else:
        module.register_forward_hook(AddCorrectionHook(parent, child_name))
    if init == "preserve":
        with torch.no_grad():
            weight.sub_(shaped_like(correction.dense(weight.dtype), weight))


def attachments(model: nn.Module) -> Iterator[Attachment]:
    """Every SpectralCorrection on ``model``, in module order."""
    for name, module in model.named_modules():
        if isinstance(module, SpectralCorrection) or isinstance(module, parametrize.ParametrizationList):
            continue
        if parametrize.is_parametrized(module):
            for param_name, plist in module.parametrizations.items():
                for entry in plist:
                    if isinstance(entry, SpectralCorrection):
                        yield Attachment(name, module, param_name, entry, "weight")
        child = module._modules.get(CHILD_NAME)
        if isinstance(child, SpectralCorrection):
            yield Attachment(name, module, "weight", child, "activation")


def detach(found: Attachment, merge: bool, merged: torch.Tensor | None = None) -> None:
    """Remove a correction: ``merge=True`` bakes W + C into the parameter, ``merge=False`` restores W.

    ``merged``: W + C from :func:`merged_weight`, when the caller computed it already (``remove`` computes
    every one before it takes the first correction off). W + C is computed before anything changes, so
    arithmetic that fails on the weight's own type (a DTensor under FSDP) leaves the module as it was.
    """
    module, name = found.module, found.param_name
    weight = found.stored_weight()
    if merge and merged is None:
        merged = merged_weight(found)
    if found.backend == "weight":
        give_own_class(module)
        parametrize.remove_parametrizations(module, name, leave_parametrized=False)
        if merge:  # what leave_parametrized=True stores, computed above
            with torch.no_grad():
                _point(weight, merged)
        _restore_order(module, getattr(found.correction, "parameter_order", ()))
        return
    for key, hook in list(module._forward_hooks.items()):
        if isinstance(hook, AddCorrectionHook):
            del module._forward_hooks[key]
    if isinstance(vars(module).get("forward"), CorrectedLinearForward):
        del module.__dict__["forward"]
    if merge:
        with torch.no_grad():
            weight.copy_(merged)  # in place, so the parameter keeps its storage (W + C: the bits of W.add_(C))
    delattr(module, CHILD_NAME)


def merged_weight(found: Attachment) -> torch.Tensor:
    """W + C, a new tensor in the stored orientation and dtype: what ``detach(found, merge=True)`` stores."""
    with torch.no_grad():
        return found.effective_weight().detach()


class Undo:
    """One module as it is now, so that :meth:`restore` puts it back exactly if attaching or detaching
    fails part way (or a later step of the same call does).

    Kept: the module's class and the names in it (registering a second parametrization adds a property
    to the class), shallow copies of the parameter, buffer, child and forward-hook tables of the module
    and of its parametrizations (so the very Parameters, hooks and corrections come back, and optimisers
    keep working), and what ``weight`` holds. The weight backend moves ``weight`` to new storage (torch's
    ``set_``): the old storage is kept and pointed to again. The activation backend writes W - C or W + C
    in place: with ``writes=True`` a clone of W is kept and copied back.
    """

    TABLES = (
        "_parameters", "_buffers", "_non_persistent_buffers_set", "_modules",
        "_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
    )

    def __init__(self, module: nn.Module, weight: torch.Tensor, backend: str, writes: bool) -> None:
        self.module, self.weight = module, weight
        self.cls, self.names = type(module), frozenset(vars(type(module)))
        owners = [module]
        if "parametrizations" in module._modules:
            owners += list(module._modules["parametrizations"].modules())
        self.tables = [
            (table, table.copy()) for owner in owners for key, table in vars(owner).items() if key in self.TABLES
        ]
        self.forward = vars(module).get("forward", _ABSENT)  # the activation backend sets an instance forward
        self.storage = weight.detach() if backend == "weight" else None  # shares the storage W is in now
        self.values = weight.detach().clone() if backend == "activation" and writes else None

    def restore(self) -> None:
        for name in set(vars(self.cls)) - self.names:
            delattr(self.cls, name)
        self.module.__class__ = self.cls
        for table, saved in self.tables:
            table.clear()
            table.update(saved)
        if self.forward is _ABSENT:
            vars(self.module).pop("forward", None)
        else:
            vars(self.module)["forward"] = self.forward
        with torch.no_grad():
            if self.storage is not None:
                _point(self.weight, self.storage)
            if self.values is not None:
                self.weight.copy_(self.values)


def restore(undos: list[Undo]) -> None:
    """Put every module back, last changed first."""
    for undo in reversed(undos):
        undo.restore()


def _point(weight: torch.Tensor, data: torch.Tensor) -> None:
    """Make ``weight`` (the same object) hold ``data``, as torch.nn.utils.parametrize moves a parametrized
    tensor: ``set_``, or ``swap_tensors`` for tensor subclasses (DTensor) and under the swap flag."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if torch.__future__.get_swap_module_params_on_conversion() or is_traceable_wrapper_subclass(weight):
        if isinstance(weight, nn.Parameter) and not isinstance(data, nn.Parameter):
            data = nn.Parameter(data, requires_grad=weight.requires_grad)
        torch.utils.swap_tensors(weight, data)
    else:
        weight.set_(data)


def give_own_class(module: nn.Module) -> None:
    """Give a parametrized module a private copy of its generated class.

    ``copy.deepcopy`` of a parametrized module shares the generated ``Parametrized<Class>`` between the
    original and the copy, and ``remove_parametrizations`` deletes the property from that class, which
    would break the other model. A private copy makes removal affect this module alone.
    """
    cls = module.__class__
    namespace = {k: v for k, v in cls.__dict__.items() if k not in ("__dict__", "__weakref__")}
    module.__class__ = type(cls.__name__, cls.__bases__, namespace)


def _restore_order(module: nn.Module, order: tuple[str, ...]) -> None:
    """Put the parameters back in their original order (removal re-registers the weight last), so the
    state_dict of a merged or unmerged model lists its keys exactly as the vanilla model does."""
    if not order or set(order) != set(module._parameters):
        return
    parameters = dict(module._parameters)
    module._parameters.clear()
    for name in order:
        module._parameters[name] = parameters[name]


def _corrections_on(module: nn.Module) -> list[SpectralCorrection]:
    if not parametrize.is_parametrized(module):
        return []
    return [e for plist in module.parametrizations.values() for e in plist if isinstance(e, SpectralCorrection)]
