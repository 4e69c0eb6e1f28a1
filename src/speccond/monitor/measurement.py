"""The measurement all three front ends share: arm before a due step's forward, finish after its update.

    measurement = Measurement(Schedule(every=100))
    measurement.begin(model, step)      # due: hooks the attention inputs for this step's forward
    ...forward, backward, optimizer step...
    metrics = measurement.finish(model) # {name: value}, {} when the step was not due; hooks removed

Entropy comes from the step's own forward (the weights before the update); the spectra are read in
``finish`` (the weights after it, those the next step uses). Summaries (names.py) are added here.
"""
from __future__ import annotations

import logging
import math

from torch import nn

from speccond.monitor.entropy import EntropyHooks
from speccond.monitor.names import PREFIX, summary_name
from speccond.monitor.schedule import Schedule
from speccond.monitor.spectra import spectra_metrics

log = logging.getLogger(__name__)


class Measurement:
    """Arms and finishes one measurement at a time on the steps ``schedule`` makes due."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self._entropy = EntropyHooks(schedule)
        self._pending = False

    def begin(self, model: nn.Module, step: int) -> bool:
        """Arm the hooks when ``step`` is due; return whether it is. Hooks of an unfinished step are dropped."""
        self._entropy.disarm()
        self._pending = self.schedule.due(step)
        if self._pending and self.schedule.entropy:
            self._entropy.arm(model)
        return self._pending

    def finish(self, model: nn.Module) -> dict[str, float]:
        """The metrics of the step begun last ({} when it was not due); removes the hooks either way."""
        entropy = self._entropy.collect()
        if not self._pending:
            return {}
        self._pending = False
        if self.schedule.entropy and not entropy:
            log.warning("speccond.monitor: no measured attention layer ran in this step's forward, so no entropy")
        metrics = dict(entropy)
        if self.schedule.spectra:
            metrics.update(spectra_metrics(model, self.schedule))
        metrics.update(summaries(metrics))
        return metrics

    def close(self) -> None:
        """Remove any hook left armed (training stopped between begin and finish)."""
        self._entropy.disarm()
        self._pending = False


def summaries(metrics: dict[str, float]) -> dict[str, float]:
    """kappa mean and max over the per-head kappas (the blocks' when none is per head), entropy mean and
    min over the heads; names in names.py."""
    head_kappas = [v for k, v in metrics.items() if k.startswith(f"{PREFIX}/kappa/") and "/head" in k]
    block_kappas = [v for k, v in metrics.items() if k.startswith(f"{PREFIX}/kappa/layer") and "/head" not in k]
    head_entropies = [v for k, v in metrics.items() if k.startswith(f"{PREFIX}/entropy/") and "/head" in k]
    out = {}
    kappas = head_kappas or block_kappas
    if kappas:
        out[summary_name("kappa", "mean")] = math.fsum(kappas) / len(kappas)
        out[summary_name("kappa", "max")] = max(kappas)
    if head_entropies:
        out[summary_name("entropy", "mean")] = math.fsum(head_entropies) / len(head_entropies)
        out[summary_name("entropy", "min")] = min(head_entropies)
    return out
