"""The peer methods speccond is compared with, for anyone's model: each a validating function over a
private module, removable like ``speccond.remove``. All but sigma_reparam_all_layers act on the q, k, v
projections the adapters find (those ``speccond.apply`` conditions).

    speccond.peers.sigma_reparam(model)   gamma / sigma(W) * W per q, k, v block (Zhai et al., 2023)
    speccond.peers.sigma_reparam_all_layers(model)  the same on every Linear and Conv2d, as its authors apply it
    speccond.peers.spectral_norm(model)   W / sigma(W) per q, k, v block        (Miyato et al., 2018)
    speccond.peers.qk_norm(model)         LayerNorm over head_dim of q and k   (Dehghani et al., 2023)
    speccond.peers.layer_scale(model)     gamma * attention(x), gamma per channel (Touvron et al., 2021)
    speccond.peers.remove(model, merge)   takes them off
    speccond.peers.applied(model)         what carries one

Those take ``targets=`` and ``exclude=`` (regular expressions on module names, as SpectralConfig). Each
returns the names of what it changed; every check runs before the first change.
"""
from speccond.peers.layer_scale import layer_scale
from speccond.peers.qk_norm import QKNormHook, qk_norm
from speccond.peers.remove import applied, remove
from speccond.peers.sigma_reparam_all import MatrixSigmaReparam, sigma_reparam_all_layers
from speccond.peers.spectral_norm import BlockSpectralNorm, sigma_reparam, spectral_norm

__all__ = [
    "BlockSpectralNorm", "MatrixSigmaReparam", "QKNormHook", "applied", "layer_scale", "qk_norm", "remove",
    "sigma_reparam", "sigma_reparam_all_layers", "spectral_norm",
]
