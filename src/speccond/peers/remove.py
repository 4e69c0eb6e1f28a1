"""Taking the peer methods off a model, as ``speccond.remove`` takes the correction off: the spectral
peers' parametrizations, and every forward hook deriving from :class:`~speccond.peers.hooks.PeerHook`
(qk_norm, layer_scale, and any peer added the same way)."""
from __future__ import annotations

from torch import nn
from torch.nn.utils import parametrize

from speccond.core.backends import give_own_class
from speccond.peers.hooks import PeerHook
from speccond.peers.sigma_reparam_all import MatrixSigmaReparam
from speccond.peers.spectral_norm import BlockSpectralNorm


def applied(model: nn.Module) -> list[str]:
    """Names of the weights and modules of ``model`` that carry a peer method, in module order."""
    names = []
    for name, module in model.named_modules():
        for param_name in _normed(module):
            names.append(f"{name}.{param_name}" if name else param_name)
        if _hooks(module):
            names.append(name)
    return names


def remove(model: nn.Module, merge: bool = True) -> nn.Module:
    """Take every peer method off ``model`` and return it.

    spectral_norm / sigma_reparam / sigma_reparam_all_layers: ``merge=True`` stores W_hat (the function is kept; torch's
    ``leave_parametrized=True``), ``merge=False`` restores the trained W. The hook-based peers (qk_norm,
    layer_scale) act on activations, which no weight holds, so they cannot be merged: with ``merge=True``
    a model carrying one is refused before anything changes; ``merge=False`` removes the hooks and what
    they added (the function changes). The Parameters of the model stay the same objects.
    """
    found = [(module, _normed(module), _hooks(module)) for module in model.modules()]
    found = [item for item in found if item[1] or item[2]]
    if not found:
        raise ValueError("no peer method (speccond.peers) on this model; nothing to remove")
    hooked = sorted({type(hook).__name__ for _, _, hooks in found for _, hook in hooks})
    if merge and hooked:
        raise ValueError(
            f"{', '.join(hooked)} act on the attention's activations, which no weight can hold, so they cannot be "
            "merged; speccond.peers.remove(model, merge=False) takes them off (and changes the function)"
        )
    for module, params, hooks in found:
        if params:
            give_own_class(module)  # a deep copy shares the generated class; removal must not touch the other
        for param_name in params:
            parametrize.remove_parametrizations(module, param_name, leave_parametrized=merge)
        for key, hook in hooks:
            del module._forward_hooks[key]
            hook.take_off(module)
    return model


WEIGHT_PEERS = (BlockSpectralNorm, MatrixSigmaReparam)  # the peers that are parametrizations of a weight


def _normed(module: nn.Module) -> list[str]:
    if not parametrize.is_parametrized(module):
        return []
    return [n for n, plist in module.parametrizations.items() if any(isinstance(p, WEIGHT_PEERS) for p in plist)]


def _hooks(module: nn.Module) -> list:
    return [(key, hook) for key, hook in module._forward_hooks.items() if isinstance(hook, PeerHook)]
