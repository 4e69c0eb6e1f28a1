"""The monitor for a hand-written training loop.

    monitor = speccond.monitor.Monitor(model, writer=SummaryWriter("runs/a"), every=100)  # or writer="m.csv"
    for step, (x, y) in enumerate(loader):
        with monitor.step(step):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()

On a due step the block's forward is measured through hooks (no forward of the monitor's own) and the
metrics are written at the end of the block with ``step``; on other steps nothing is hooked or computed.

Under torch.distributed (DDP, FSDP2) make the Monitor, and enter ``step``, on every rank: every rank
measures (a sharded weight is gathered by a collective, which all ranks must join), and rank 0 alone
writes, as Lightning's and the Trainer's loggers do, so a CSV path or log folder shared by the ranks gets
one row per step and metric. The metrics written are rank 0's: its batch's attention entropy (every rank
keeps its own in ``monitor.last``) and the spectra, which are the same on every rank.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Optional, Sequence

from torch import nn

from speccond.monitor.measurement import Measurement
from speccond.monitor.schedule import DEFAULT_EVERY, Schedule
from speccond.monitor.writers import check_writer, sink
from speccond.ranks import writes_files


class Monitor:
    """Measures ``model`` on the steps ``every`` makes due and writes the metrics to ``writer``.

    Args:
        model: the model being trained (conditioned or not).
        writer: a path ending in .csv, a ``torch.utils.tensorboard.SummaryWriter`` (anything with
            ``add_scalar(tag, value, step)``), or None: measure and keep ``monitor.last``, write nothing
            (a rank other than 0 may pass None: it writes nothing anyway).
        every, layers, heads, spectra, per_head, entropy: the :class:`Schedule`.

    Raises ValueError, before anything is written, for a model it would measure only in part or not at all
    (no attention layer, attention no adapter recognises, ``layers`` or ``heads`` the model lacks; see
    measurement.py).
    """

    def __init__(
        self,
        model: nn.Module,
        writer: Any,
        every: int = DEFAULT_EVERY,
        layers: Optional[Sequence[int]] = None,
        heads: Optional[Sequence[int]] = None,
        spectra: bool = True,
        per_head: bool = True,
        entropy: bool = True,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"Monitor needs the torch.nn.Module being trained, got {type(model).__name__}")
        self.model = model
        self.schedule = Schedule(every, layers, heads, spectra, per_head, entropy)
        self._measurement = Measurement(self.schedule)
        self._measurement.check(model)  # before the writer: a model it cannot measure leaves no file
        if writer is not None:
            check_writer(writer)  # on every rank, so a bad writer stops them all before the first step
        self._sink = sink(writer) if writer is not None and writes_files() else None
        self.last: dict[str, float] = {}  # the metrics of the last measured step

    @contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Wrap one training step (forward, backward, update); measures and writes when ``step`` is due.

        A loop that wraps each micro-batch of gradient accumulation with the optimiser's step number gets
        the first micro-batch's metrics, written once: the same step begun again is not measured again."""
        self._measurement.begin(self.model, step)
        try:
            yield
        except BaseException:
            self._measurement.close()
            raise
        metrics = self._measurement.finish(self.model)
        if metrics:
            if self._sink is not None:
                self._sink.write(metrics, step)
            self.last = metrics
