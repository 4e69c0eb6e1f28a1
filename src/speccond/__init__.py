"""speccond: spectral conditioning of attention (Saratchandran and Lucey, NeurIPS 2025).

    SpecA(X) = softmax(X (W_Q + C_Q)(W_K + C_K)^T X^T) X (W_V + C_V)

    import speccond
    report = speccond.apply(model, speccond.SpectralConfig(lam=10.0))
    speccond.remove(model, merge=True)
    speccond.save_pretrained(model, directory); speccond.from_pretrained(ModelClass, directory)
    speccond.save_adapter(peft_model, directory); speccond.load_adapter(base, directory)  # PEFT adapters
    speccond.peers.sigma_reparam(model)   # the peer methods it is compared with
"""
from speccond.api import apply, describe, is_conditioned, refresh, remove
from speccond.checkpoint import from_pretrained, load_conditioned, save_conditioned, save_pretrained
from speccond.core.config import SpectralConfig
from speccond.core.layout import ProjectionLayout
from speccond.peft_adapters import load_adapter, save_adapter
from speccond.report import ReportRow, SpectralReport
from speccond.verify import VerificationError, verify
from speccond.version import __version__

from speccond import peers  # noqa: E402  (speccond.peers.sigma_reparam, ...: the comparison's peer methods)
from speccond import monitor  # noqa: E402  (speccond.monitor.Monitor, SpecCondCallback, ...: metrics during training)


__all__ = [
    "ProjectionLayout",
    "ReportRow",
    "SpectralConfig",
    "SpectralReport",
    "VerificationError",
    "apply",
    "describe",
    "from_pretrained",
    "is_conditioned",
    "load_adapter",
    "load_conditioned",
    "peers",
    "refresh",
    "remove",
    "save_adapter",
    "save_conditioned",
    "save_pretrained",
    "verify",
]
