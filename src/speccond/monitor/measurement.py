"""The measurement all three front ends share: arm before a due step's forward, finish after its update.

    measurement = Measurement(Schedule(every=100))
    measurement.begin(model, step)      # due: hooks the attention inputs for this step's forward
    ...forward, backward, optimizer step...
    metrics = measurement.finish(model) # {name: value}, {} when the step was not due; hooks removed

Entropy comes from the step's own forward (the weights before the update); the spectra are read in
``finish`` (the weights after it, those the next step uses). Summaries (names.py) are added here. A step
number begun again right after it was measured is not measured again: a loop that begins each micro-batch
of gradient accumulation with the optimiser's step number gets the first micro-batch's metrics, once.

A model is checked once, before its first measurement (``check``; the plain loop's Monitor checks it when
made): one the schedule would measure only in part or not at all is refused then, in one line, instead of
logging an empty or partial set of metrics every ``every`` steps. That is a model with no attention layer,
or with attention no adapter recognises; weights that do not tell q, k, v (spectra) or attention the
diagnostics cannot rebuild (entropy); ``layers`` or ``heads`` that name a layer or head the model lacks.
Structure cannot see attention whose projection's name tells nothing, so the first measured step of a model
is also watched (diagnostics/census.py): attention that ran outside every found layer is refused at the end
of that step, before its metrics are written.
"""
from __future__ import annotations

import logging
import math
import weakref
from contextlib import ExitStack
from typing import Callable, Optional

from torch import nn

from speccond.diagnostics.census import Census, ForwardWatch, watched
from speccond.layers import AttentionLayer, attention_layers, coverage_refusal
from speccond.monitor.entropy import EntropyHooks, check_entropy_measurable
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
        self._checked: "weakref.ref[nn.Module] | None" = None  # the model check() passed last
        self._watched: "weakref.ref[nn.Module] | None" = None  # the model whose first measured step was watched
        self._watch: Optional[tuple[Callable[[], None], Census]] = None  # (end it, its census) in this step
        self.watch_scope = "step"  # "step": from begin to finish; "forward": each forward (ForwardWatch); "off"
        self._layers: list[AttentionLayer] = []  # the attention layers of the step in progress
        self._step: Optional[int] = None  # the step begun last
        self._measured_step: Optional[int] = None  # the step whose metrics finish() returned last

    def check(self, model: nn.Module) -> None:
        """ValueError, in one line, when the schedule would measure ``model`` only in part or not at all
        (module docstring); nothing is hooked or written before it."""
        if self._checked is not None and self._checked() is model:
            return
        what = "speccond.monitor"
        layers = attention_layers(model)
        uncovered = coverage_refusal(model, what, layers=layers)
        if uncovered:
            raise ValueError(uncovered)
        missing = self.schedule.missing_from(_head_counts(layers))
        if missing:
            raise ValueError(f"{what}: {missing}")
        for layer in (layer for layer in layers if self.schedule.measures_layer(layer.index)):
            if self.schedule.spectra:
                layer.check_weights_tell(f"{what} (spectra=True)")
            if self.schedule.entropy:
                check_entropy_measurable(layer)
        self._checked = weakref.ref(model)

    def begin(self, model: nn.Module, step: int) -> bool:
        """Arm the hooks when ``step`` is due; return whether it is. Hooks of an unfinished step are dropped.
        The model is checked first (``check``, once per model)."""
        self._entropy.disarm()
        self._end_watch()
        self.check(model)
        if step != self._step:  # only the step just measured, begun again, is passed over
            self._measured_step = None
        self._pending = self.schedule.due(step) and step != self._measured_step
        self._step = step
        if not self._pending:
            return False
        refused: list[nn.Module] = []  # left out with a warning; the watch counts their attention as known
        self._layers = attention_layers(model, refused=refused)  # the one scan of the structure a measured step makes
        if self.schedule.entropy:
            self._entropy.arm(self._layers)
        if self.watch_scope != "off" and not (self._watched is not None and self._watched() is model):
            found = [layer.module for layer in self._layers] + refused
            if self.watch_scope == "forward":
                forwards = ForwardWatch(model, found)
                self._watch = (forwards.remove, forwards.census)
            else:
                stack = ExitStack()
                self._watch = (stack.close, stack.enter_context(watched(model, found)))
        return True

    def finish(self, model: nn.Module) -> dict[str, float]:
        """The metrics of the step begun last ({} when it was not due); removes the hooks either way."""
        entropy = self._entropy.collect()
        census = self._end_watch()
        if not self._pending:
            return {}
        self._pending = False
        self._measured_step = self._step
        if census is not None:
            unfound = census.refusal(model, "speccond.monitor", "monitor a model whose attention speccond finds")
            if unfound:
                raise ValueError(unfound)
            self._watched = weakref.ref(model)
        if self.schedule.entropy and not entropy:
            log.warning("speccond.monitor: no measured attention layer ran in this step's forward, so no entropy")
        metrics = dict(entropy)
        if self.schedule.spectra:
            metrics.update(spectra_metrics(self._layers, self.schedule))
        self._layers = []
        metrics.update(summaries(metrics))
        return metrics

    @property
    def measured_step(self) -> Optional[int]:
        """The step whose metrics ``finish`` returned last: the global step of the forward measured, the step
        every front end logs them at."""
        return self._measured_step

    def close(self) -> None:
        """Remove any hook left armed (training stopped between begin and finish)."""
        self._entropy.disarm()
        self._pending = False
        self._layers = []
        self._step = self._measured_step = None  # a fit that starts again measures its first step
        self._end_watch()

    def _end_watch(self) -> Optional[Census]:
        if self._watch is None:
            return None
        (end, census), self._watch = self._watch, None
        end()
        return census


def _head_counts(layers: list[AttentionLayer]) -> list[int]:
    """Each layer's largest head count over its q, k, v blocks (grouped-query k, v have fewer than q)."""
    return [max(p.layout.heads(role) for p in layer.projections for role in p.layout.roles) for layer in layers]


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
