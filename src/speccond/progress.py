"""Progress of the library's long work (apply's corrections, the collapse prediction, a report's spectra).

Work that ends within ``PROGRESS_AFTER_S`` shows nothing. Longer work shows a tqdm bar on stderr once it passes
that mark, as Hugging Face and PyTorch downloads do::

    speccond report: spectra of 5/22 conditioned parameters:  23%|██▎       | [00:02<00:06]

Whether the bar is shown is read from the environment variable ``SPECCOND_PROGRESS`` when each piece of work
starts (so ``os.environ["SPECCOND_PROGRESS"] = "0"`` in a notebook takes effect at the next call):

- unset (or empty): shown where stderr is a terminal or in a Jupyter notebook (an IPython kernel runs),
  never into a pipe or a log file;
- ``SPECCOND_PROGRESS=1``: shown wherever stderr goes (a CI log, a file);
- ``SPECCOND_PROGRESS=0``: never shown.

The bar needs tqdm (installed with transformers, with timm, and by ``pip install tqdm``); without it the work
shows no bar, and ``SPECCOND_PROGRESS=1`` logs a warning saying so. The bar is the one thing the library writes
itself, on stderr, never stdout. The same work also logs through
``logging``, whatever the bar does: one INFO line when it passes ``PROGRESS_AFTER_S``, then one every
``PROGRESS_EVERY_S`` ("speccond report: spectra of 5/22 conditioned parameters, 2.1 s") and a last one when
it ends, which ``logging.basicConfig(level=logging.INFO)`` (or a handler on the ``speccond`` logger) shows.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from typing import Iterator, Optional, Sequence, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)

PROGRESS_AFTER_S = 2.0  # work shorter than this shows and logs nothing
PROGRESS_EVERY_S = 2.0  # then a log line at most this often
PROGRESS_VARIABLE = "SPECCOND_PROGRESS"  # "0": no bars, "1": bars wherever stderr goes, unset: on a terminal
COUNT = "%d/%d"  # where a Progress's ``what`` says how far the work is


class Progress:
    """Counts ``total`` items of one piece of work and shows how far it is once it has run long enough: a
    bar on stderr (see the module docstring for where) and INFO lines on ``logger``.

    ``logger``: the calling module's logger; ``what``: the work and its items, e.g. "speccond report:
    spectra of %d/%d projections" reads as "spectra of 3/36 projections"."""

    def __init__(self, logger: logging.Logger, what: str, total: int) -> None:
        self.logger, self.what, self.total = logger, what, total
        self.start = time.monotonic()
        self.next_line = self.start + PROGRESS_AFTER_S
        self.done = 0
        self.shown = False
        self.bar = progress_bar(what, total)

    def advance(self, items: int = 1) -> None:
        self.done += items
        if self.bar is not None:
            self.bar.update(items)  # drawn once PROGRESS_AFTER_S has passed (tqdm's delay)
        now = time.monotonic()
        if now >= self.next_line and self.done < self.total:
            self._line(now)
            self.next_line = now + PROGRESS_EVERY_S

    def finish(self) -> None:
        """The last line, for work that showed progress or ran past ``PROGRESS_AFTER_S``; the bar closed (left
        on screen where it was drawn)."""
        self.close()
        now = time.monotonic()
        if self.shown or now >= self.start + PROGRESS_AFTER_S:
            self._line(now)

    def close(self) -> None:
        """The bar closed, also for work that stopped early (an error, a loop left with break)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def _line(self, now: float) -> None:
        self.logger.info(f"{self.what}, %.1f s", self.done, self.total, now - self.start)
        self.shown = True


def tracked(items: Sequence[T], logger: logging.Logger, what: str) -> Iterator[T]:
    """The items of ``items``, one by one, with :class:`Progress` over them."""
    progress = Progress(logger, what, len(items))
    try:
        for item in items:
            yield item
            progress.advance()
        progress.finish()
    finally:
        progress.close()


def bars_wanted() -> Optional[bool]:
    """``SPECCOND_PROGRESS`` as tqdm's ``disable`` reads its opposite: True (always shown), False (never), None
    (where stderr is a terminal). ValueError for any other value, naming the ones it takes."""
    value = os.environ.get(PROGRESS_VARIABLE, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{PROGRESS_VARIABLE} must be 0 (no progress bars), 1 (bars wherever stderr goes) or unset "
                         f"(bars where stderr is a terminal), got {value!r}")
    return None if value == "" else value == "1"


def progress_bar(what: str, total: int):
    """A tqdm bar over ``total`` items on stderr, drawn only once ``PROGRESS_AFTER_S`` has passed, headed by
    ``what`` with its count filled in ("spectra of 5/22 conditioned parameters"); None where no bar is
    wanted (``bars_wanted``)."""
    wanted = bars_wanted()
    if wanted is False:
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # the core needs torch alone; tqdm comes with transformers, timm (huggingface_hub), [dev]
        if wanted:
            log.warning(f"{PROGRESS_VARIABLE}=1 asks for progress bars, which need tqdm (pip install tqdm); the "
                        "progress goes to the INFO log lines only")
        return None

    before, _, after = what.partition(COUNT) if COUNT in what else (f"{what} ", "", "")
    counted = f"{_literal(before)}{{n}}/{{total}}{_literal(after)}"  # "spectra of 5/22 conditioned parameters"
    layout = counted + ": {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]"
    if wanted is None and in_notebook():  # its stderr is no terminal, yet it shows bars
        wanted = True
    return tqdm(total=total, file=sys.stderr, delay=PROGRESS_AFTER_S, disable=None if wanted is None else False,
                bar_format=layout, dynamic_ncols=True, leave=True)


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel: IPython imported, with a shell started by an IPKernelApp (the test
    tqdm.autonotebook makes); a terminal IPython is not one."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def _literal(text: str) -> str:
    """``text`` as literal text of a tqdm ``bar_format`` (a str.format template)."""
    return text.replace("{", "{{").replace("}", "}}")
