"""The monitor as a ``transformers.TrainerCallback``: the metrics go through the Trainer's own loggers.

    trainer = Trainer(model=model, args=TrainingArguments(..., report_to=["tensorboard"]),
                      callbacks=[speccond.monitor.SpecCondCallback(every=100)])

On a due step (``state.global_step % every == 0`` when the step begins) the step's forward is measured
through hooks and, at its end, the callback asks the Trainer to log (``control.should_log``) and adds
its metrics to the ``logs`` dict in ``on_log``, so whatever ``report_to`` names (TensorBoard, W&B,
MLflow, ...) writes them at the Trainer's step, beside the loss.

Order: the Trainer calls its callbacks in list order, and it puts the reporting callbacks
(TensorBoardCallback, ...) before the ones passed in ``callbacks=[...]``, so metrics added in a late
``on_log`` reach the console but no logger. The callback therefore moves itself to the front of the
Trainer's callback list when the Trainer first calls it (``on_init_end``, or ``on_train_begin`` when
added later with ``trainer.add_callback``); it only adds keys, so leading changes nothing for the others.
"""
from __future__ import annotations

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
        self._unlogged: dict[str, float] = {}
        self.last: dict[str, float] = {}  # the metrics of the last measured step

    def on_init_end(self, args, state, control, **kwargs):
        _lead(self, sys._getframe(1))

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        _lead(self, sys._getframe(1))
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
        if metrics:
            self._unlogged, self.last = metrics, metrics
            control.should_log = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._unlogged and logs is not None:
            logs.update(self._unlogged)
            self._unlogged = {}

    def on_train_end(self, args, state, control, **kwargs):
        self._measurement.close()


def _lead(callback: TrainerCallback, caller) -> None:
    """Move ``callback`` to the front of the list of the CallbackHandler calling it (``caller``'s frame).

    Safe while the handler iterates over that list: the callbacks after it keep their positions."""
    handler = caller.f_locals.get("self")
    if not isinstance(handler, CallbackHandler):
        log.warning(
            "SpecCondCallback could not find the Trainer's callback list; put it first yourself "
            "(trainer.callback_handler.callbacks.insert(0, ...)) or loggers called before it miss its metrics"
        )
        return
    if handler.callbacks and handler.callbacks[0] is not callback and callback in handler.callbacks:
        handler.callbacks.remove(callback)
        handler.callbacks.insert(0, callback)
