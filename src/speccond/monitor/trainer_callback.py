"""The monitor as a ``transformers.TrainerCallback``: the metrics go through the Trainer's own loggers.

    trainer = Trainer(model=model, args=TrainingArguments(..., report_to=["tensorboard"]),
                      callbacks=[speccond.monitor.SpecCondCallback(every=100)])

On a due step (``state.global_step % every == 0`` when the step begins) the step's forward is measured
through hooks and, at its end, the metrics are handed to every callback's ``on_log`` (the way
``Trainer.log`` does), so whatever ``report_to`` names (TensorBoard, W&B, MLflow, ...) writes them, at the
global step of the forward measured: the step the plain loop's Monitor and the Lightning callback log too
(a step's forward at global step s is logged at s, not at s + 1, the Trainer's count after the update).

The Trainer's own logging is left alone: its ``logging_steps`` and its averaging of the loss are not
touched, and every callback sees the metrics whatever its place in the Trainer's list.
"""
from __future__ import annotations

import copy
import logging
import sys
from typing import Optional, Sequence

from transformers import TrainerCallback
from transformers.trainer_callback import CallbackHandler

from speccond.monitor.measurement import Measurement
from speccond.monitor.schedule import DEFAULT_EVERY, Schedule

log = logging.getLogger(__name__)


class SpecCondCallback(TrainerCallback):
    """Logs speccond's metrics (speccond.monitor.names) through the Trainer's loggers every ``every`` steps.

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

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is not None:  # refused before the first step (Measurement.check)
            self._measurement.check(model)
        # The Trainer has no callback for an exception, so the first measured step is watched forward by
        # forward (nothing of the watch outlives a forward); a model it compiles is not watched (dynamo would
        # trace the watch's hooks inside the compiled forward): its structure alone is checked.
        self._measurement.watch_scope = "off" if getattr(args, "torch_compile", False) else "forward"

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        self._measurement.begin(model, state.global_step)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        metrics = self._measurement.finish(model)
        if not metrics:
            return control
        self.last = metrics
        handler = sys._getframe(1).f_locals.get("self")  # the CallbackHandler whose call_event called this
        if not isinstance(handler, CallbackHandler):
            log.warning("SpecCondCallback.on_step_end was not called by a Trainer's CallbackHandler, so its "
                        "metrics reach no logger; they are kept in callback.last")
            return control
        measured = copy.copy(state)  # the loggers read the step from the state: the measured forward's
        measured.global_step = self._measurement.measured_step
        state.log_history.append({**metrics, "step": measured.global_step})  # as Trainer.log records its logs
        should_log = control.should_log  # the handler's on_log clears it: the Trainer's own log stays due
        control = handler.on_log(args, measured, control, dict(metrics))
        control.should_log = should_log
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self._measurement.close()
