"""Attention entropy per head from the training forward's own inputs: no forward pass of its own.

``EntropyHooks.arm`` registers a forward pre-hook on each sampled attention layer's module. When the training
forward reaches the module, the hook rebuilds the sampled heads on the module's real input
(:func:`speccond.diagnostics.heads.heads_on_input`, the same rebuilding the diagnostics use), computes
each head's attention probabilities P (B, N, N) without gradients, keeps only the mean entropy
-sum_j P_ij log P_ij over queries and batch (a 0-d tensor, no sync with the device), and removes itself:
a second call in the same step (gradient checkpointing's recomputation) is not measured, and nothing
of the batch outlives the hook. ``collect`` removes any hook that did not fire and returns the values.

The probabilities are computed in the weights' dtype with autocast off (the forward may run in
bfloat16; x is cast to the weights' dtype): the same numbers as ``attention_entropy`` gives in float64,
to float32 rounding. Dropout on the attention probabilities is not applied: the entropy is the model's
attention, before the training noise.
"""
from __future__ import annotations

from dataclasses import replace
import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from speccond.diagnostics.entropy import row_entropy
from speccond.diagnostics.heads import check_rebuildable, heads_on_input
from speccond.layers import AttentionLayer
from speccond.monitor.names import entropy_name
from speccond.monitor.schedule import Schedule


class EntropyHooks:
    """One measurement's hooks: ``arm`` before the forward, ``collect`` after it."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self._handles: dict[int, RemovableHandle] = {}
        self._values: dict[str, torch.Tensor] = {}  # name -> 0-d tensor

    @property
    def armed(self) -> bool:
        return bool(self._handles)

    def arm(self, layers: list[AttentionLayer]) -> None:
        """Hook the sampled ones of ``layers`` (a model's attention layers, whose structure the Measurement
        checked) for the model's next forward; ValueError when one cannot be rebuilt now (a PEFT tuner or a
        hook added since)."""
        self.disarm()
        for layer in layers:
            if self.schedule.measures_layer(layer.index):
                check_entropy_measurable(layer)
                handle = layer.module.register_forward_pre_hook(self._hook(layer), with_kwargs=True)
                self._handles[layer.index] = handle

    def collect(self) -> dict[str, float]:
        """{name: entropy} of the heads measured since ``arm`` (per head and per layer); disarms."""
        self.disarm()
        values = {name: float(value) for name, value in self._values.items()}
        self._values = {}
        return values

    def disarm(self) -> None:
        for handle in self._handles.values():
            handle.remove()
        self._handles = {}

    def _hook(self, layer: AttentionLayer):
        def hook(_module: nn.Module, args: tuple, kwargs: dict) -> None:
            handle = self._handles.pop(layer.index, None)
            if handle is None:  # already measured in this step
                return
            handle.remove()
            self._values.update(_layer_entropy(layer, args, kwargs, self.schedule))

        return hook


def check_entropy_measurable(layer: AttentionLayer) -> None:
    """ValueError, saying to pass entropy=False, unless the head diagnostics can rebuild ``layer``'s heads."""
    try:
        check_rebuildable(layer)
    except ValueError as error:
        raise ValueError(f"speccond.monitor cannot measure attention entropy: {error}; pass entropy=False") from None


def _layer_entropy(
    layer: AttentionLayer, args: tuple, kwargs: dict, schedule: Schedule
) -> dict[str, torch.Tensor]:
    q_projection, q_role = layer.block("q")
    heads = schedule.heads_of(q_projection.layout.heads(q_role))
    values = {}
    with torch.no_grad(), torch.autocast(_device_type(args, kwargs), enabled=False):
        for head, case in zip(heads, heads_on_input(layer, args, kwargs, heads)):
            if case.x.dtype != case.w_q.dtype:
                bias = None if case.logit_bias is None else case.logit_bias.to(case.w_q.dtype)
                case = replace(case, x=case.x.to(case.w_q.dtype), logit_bias=bias)
            values[entropy_name(layer.index, head)] = row_entropy(case.probabilities()).mean()  # (B, N) -> ()
    if values:
        values[entropy_name(layer.index)] = torch.stack(list(values.values())).mean()
    return values


def _device_type(args: tuple, kwargs: dict) -> str:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value.device.type
    return "cpu"
