"""The monitor as a Lightning ``Callback``: the metrics go to every logger the Trainer has.

    trainer = lightning.Trainer(logger=CSVLogger("logs"), callbacks=[SpecCondLightningCallback(every=100)])

On a due batch (``trainer.global_step % every == 0`` when it starts) the batch's training forward is
measured through hooks; at its end the metrics are written with ``logger.log_metrics(metrics, step)``
for each of ``trainer.loggers`` (as Lightning's LearningRateMonitor does), so ``log_every_n_steps`` does
not drop them, at the global step of the forward measured (``trainer.global_step`` when the batch starts):
the step the plain loop's Monitor and the Trainer callback log too. With gradient accumulation the first
micro-batch of a due step is measured and logged when it ends (before the update).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import lightning.pytorch as pl

from speccond.monitor.measurement import Measurement
from speccond.monitor.schedule import DEFAULT_EVERY, Schedule


class SpecCondLightningCallback(pl.Callback):
    """Logs speccond's metrics (speccond.monitor.names) through ``trainer.loggers`` every ``every`` steps.

    every, layers, heads, spectra, per_head, entropy: the :class:`speccond.monitor.Schedule`.
    """

    def __init__(
        self,
        every: int = DEFAULT_EVERY,
        layers: Optional[Sequence[int]] = None,
        heads: Optional[Sequence[int]] = None,
        spectra: bool = True,
        per_head: bool = True,
        entropy: bool = True,
    ) -> None:
        self.schedule = Schedule(every, layers, heads, spectra, per_head, entropy)
        self._measurement = Measurement(self.schedule)
        self.last: dict[str, float] = {}  # the metrics of the last measured step

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._measurement.check(pl_module)  # refused before the first step

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int) -> None:
        self._measurement.begin(pl_module, trainer.global_step)  # a step's later micro-batches: not measured

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        metrics = self._measurement.finish(pl_module)
        if not metrics:
            return
        self.last = metrics
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=self._measurement.measured_step)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._measurement.close()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._measurement.close()  # no hook, and no watch of the first measured step, outlives a failed fit
