"""Taking the peer methods off a model, as ``speccond.remove`` takes the correction off."""
from __future__ import annotations

from torch import nn
from torch.nn.utils import parametrize

from speccond.backends import give_own_class
from speccond.peers.qk_norm import QKNormHook
from speccond.peers.spectral_norm import BlockSpectralNorm


def applied(model: nn.Module) -> list[str]:
    """Names of the weights and modules of ``model`` that carry a peer method, in module order."""
    names = []
    for name, module in model.named_modules():
        for param_name in _normed(module):
            names.append(f"{name}.{param_name}" if name else param_name)
        if _qk_hooks(module):
            names.append(name)
    return names


def remove(model: nn.Module, merge: bool = True) -> nn.Module:
    """Take every peer method off ``model`` and return it.

    spectral_norm / sigma_reparam: ``merge=True`` stores W_hat (the function is kept; torch's
    ``leave_parametrized=True``), ``merge=False`` restores the trained W. qk_norm is not linear, so it
    cannot be merged into W: with ``merge=True`` a model carrying it is refused before anything changes;
    ``merge=False`` removes its hooks and LayerNorms (the function changes). The Parameters stay the same
    objects.
    """
    found = [(module, _normed(module), _qk_hooks(module)) for module in model.modules()]
    found = [item for item in found if item[1] or item[2]]
    if not found:
        raise ValueError("no peer method (spectral_norm, sigma_reparam, qk_norm) on this model; nothing to remove")
    if merge and any(hooks for _, _, hooks in found):
        raise ValueError(
            "qk_norm normalises the heads of q and k after the projection, which no weight can hold, so it cannot "
            "be merged; speccond.peers.remove(model, merge=False) takes it off (and changes the function)"
        )
    for module, params, hooks in found:
        if params:
            give_own_class(module)  # a deep copy shares the generated class; removal must not touch the other
        for param_name in params:
            parametrize.remove_parametrizations(module, param_name, leave_parametrized=merge)
        for key, hook in hooks:
            del module._forward_hooks[key]
            for _, norm_name in hook.blocks:
                delattr(module, norm_name)
    return model


def _normed(module: nn.Module) -> list[str]:
    if not parametrize.is_parametrized(module):
        return []
    return [n for n, plist in module.parametrizations.items() if any(isinstance(p, BlockSpectralNorm) for p in plist)]


def _qk_hooks(module: nn.Module) -> list:
    return [(key, hook) for key, hook in module._forward_hooks.items() if isinstance(hook, QKNormHook)]
