"""Monitor: speccond's metrics during training, logged where people look, at a cost they will pay.

    Monitor(model, writer=SummaryWriter(...) or "metrics.csv", every=100)    # a hand-written loop
    SpecCondCallback(every=100)             # transformers.Trainer, through whatever report_to names
    SpecCondLightningCallback(every=100)    # Lightning, through trainer.loggers

All three log the same names (names.py): kappa of the effective W_Q, W_K, W_V (W + C) per head and
block, the blocks' sigma_max and sigma_min, attention entropy per head, and summaries. The entropy is
read from the training forward itself (hooks on the attention inputs; no second forward), the spectra
in the weights' own precision; the layers, heads and the interval are the :class:`Schedule`'s.
The callbacks import transformers and Lightning, loaded only when asked for.
"""
from speccond.monitor.loop import Monitor
from speccond.monitor.measurement import Measurement
from speccond.monitor.schedule import Schedule
from speccond.monitor.writers import read_csv_metrics

__all__ = ["Measurement", "Monitor", "Schedule", "SpecCondCallback", "SpecCondLightningCallback", "read_csv_metrics"]

_LAZY = {
    "SpecCondCallback": "speccond.monitor.trainer_callback",
    "SpecCondLightningCallback": "speccond.monitor.lightning_callback",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'speccond.monitor' has no attribute {name!r}")
