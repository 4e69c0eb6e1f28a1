"""Progress of the library's long work (apply's SVD corrections, a report's spectra), through ``logging``.

Work that ends within ``PROGRESS_AFTER_S`` says nothing; longer work logs one INFO line when it passes
that mark and then one every ``PROGRESS_EVERY_S`` ("speccond report: spectra of 5/22 projections,
2.1 s"), and a last one when it ends. The library only logs: ``logging.basicConfig(level=logging.INFO)``
(or a handler on the ``speccond`` logger) shows the lines.
"""
from __future__ import annotations

import logging
import time
from typing import Iterator, Sequence, TypeVar

T = TypeVar("T")

PROGRESS_AFTER_S = 2.0  # work shorter than this logs nothing
PROGRESS_EVERY_S = 2.0  # then a line at most this often


class Progress:
    """Counts ``total`` items of one piece of work and logs how far it is once it has run long enough.

    ``logger``: the calling module's logger; ``what``: the work and its items, e.g. "speccond report:
    spectra of %d/%d projections" reads as "spectra of 3/36 projections"."""

    def __init__(self, logger: logging.Logger, what: str, total: int) -> None:
        self.logger, self.what, self.total = logger, what, total
        self.start = time.monotonic()
        self.next_line = self.start + PROGRESS_AFTER_S
        self.done = 0
        self.shown = False

    def advance(self, items: int = 1) -> None:
        self.done += items
        now = time.monotonic()
        if now >= self.next_line and self.done < self.total:
            self._line(now)
            self.next_line = now + PROGRESS_EVERY_S

    def finish(self) -> None:
        """The last line, for work that showed progress or ran past ``PROGRESS_AFTER_S``."""
        now = time.monotonic()
        if self.shown or now >= self.start + PROGRESS_AFTER_S:
            self._line(now)

    def _line(self, now: float) -> None:
        self.logger.info(f"{self.what}, %.1f s", self.done, self.total, now - self.start)
        self.shown = True


def tracked(items: Sequence[T], logger: logging.Logger, what: str) -> Iterator[T]:
    """The items of ``items``, one by one, with :class:`Progress` over them."""
    progress = Progress(logger, what, len(items))
    for item in items:
        yield item
        progress.advance()
    progress.finish()
