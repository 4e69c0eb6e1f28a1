"""When the monitor measures and what: every N steps, on a sample of layers and heads."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

DEFAULT_EVERY = 100


@dataclass(frozen=True)
class Schedule:
    """What a measurement covers and how often it is taken; validated once.

    every: measure the steps with ``step % every == 0`` (step 0 included: the state at initialisation).
    layers: the attention layers to measure (indices from 0), or None for all.
    heads: the query heads to measure in each measured layer, or None for all (a head a layer lacks is
        skipped there; key/value blocks with fewer heads, grouped-query attention, keep their own heads).
    spectra: log kappa (per head when ``per_head``) and the blocks' sigma_max, sigma_min.
    per_head: also log kappa per head (where the correction acts: the per-head SVD correction conditions
        heads, not the block).
    entropy: log attention entropy per head, from the training forward's own inputs.
    """

    every: int = DEFAULT_EVERY
    layers: Optional[tuple[int, ...]] = None
    heads: Optional[tuple[int, ...]] = None
    spectra: bool = True
    per_head: bool = True
    entropy: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 1:
            raise ValueError(f"every must be a whole number of steps >= 1, got {self.every!r}; e.g. every=100")
        object.__setattr__(self, "layers", _indices("layers", self.layers))
        object.__setattr__(self, "heads", _indices("heads", self.heads))
        if not (self.spectra or self.entropy):
            raise ValueError("spectra and entropy are both off, so there is nothing to measure; turn one on")

    def due(self, step: int) -> bool:
        """Whether ``step`` (optimizer steps completed before it) is measured."""
        return step % self.every == 0

    def measures_layer(self, layer: int) -> bool:
        return self.layers is None or layer in self.layers

    def heads_of(self, count: int) -> list[int]:
        """The sampled heads among ``count`` heads."""
        return list(range(count)) if self.heads is None else [h for h in self.heads if h < count]

    def missing_from(self, head_counts: Sequence[int]) -> str:
        """What ``layers`` or ``heads`` name that a model whose attention layers have ``head_counts`` heads
        (one count per layer, in layer order) lacks ('' when nothing): a layer index past the last layer, or
        a head that no measured layer has. A head some measured layers lack is measured where it exists."""
        count = len(head_counts)
        absent = [layer for layer in self.layers or () if layer >= count]
        if absent:
            return (f"layers={self.layers} names layer {', '.join(map(str, absent))}, but the model has {count} attention "
                    f"layers (0 to {count - 1}); pick layers from those")
        most = max((h for layer, h in enumerate(head_counts) if self.measures_layer(layer)), default=0)
        absent = [head for head in self.heads or () if head >= most]
        if absent:
            return (f"heads={self.heads} names head {', '.join(map(str, absent))}, but the measured layers have at most "
                    f"{most} heads (0 to {most - 1}); pick heads from those")
        return ""


def _indices(name: str, value: Optional[Sequence[int]]) -> Optional[tuple[int, ...]]:
    if value is None:
        return None
    if isinstance(value, int) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise ValueError(
            f"{name} must be None (all) or a sequence of indices >= 0, got {value!r}; e.g. {name}=(0, 5, 11)"
        )
    if not value:
        raise ValueError(f"{name} is empty, so nothing would be measured; pass None for all or some indices")
    return tuple(sorted(set(value)))
