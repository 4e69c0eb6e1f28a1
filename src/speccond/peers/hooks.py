"""What a peer method that works by a forward hook gives ``speccond.peers.remove``: the hook's class
derives from :class:`PeerHook` and says how to take its parameters or children off the module. So a new
hook-based peer is one file; ``remove`` and ``applied`` find it without being told."""
from __future__ import annotations

from torch import nn


class PeerHook:
    """Base of the peers' forward hooks (plain classes, so models pickle)."""

    def take_off(self, module: nn.Module) -> None:
        """Remove what the peer added to ``module`` besides this hook (its parameters, its children)."""
        raise NotImplementedError
