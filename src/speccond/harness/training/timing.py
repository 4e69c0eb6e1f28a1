"""A run's training wall time, kept in its timing.json: the one owner of that file's format.

    {"seconds": float, "step": int, "complete": bool}

``seconds`` is the training time spent so far, over every resume; ``step`` is the step it reaches (a
checkpoint, or the final step once finished; -1 before the first); ``complete`` turns false for good when a
resume finds that the checkpoint it starts from is beyond ``step``: the time of the steps in between was
lost (a kill that left no Python running to record it), so ``seconds`` undercounts the run. Readers leave
such a run out of wall-time figures (:func:`recorded_seconds`). Files written before ``complete`` existed
read as complete.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Optional

from speccond.harness.training import checkpoint

FILE = "timing.json"
log = logging.getLogger(__name__)


def read_timing(run_dir: Path) -> Optional[dict]:
    """timing.json of ``run_dir`` as {"seconds", "step", "complete"}, or None when there is none; a garbled
    one is logged, naming the file, and reads as an incomplete record (its run's wall time is left out)."""
    path = Path(run_dir) / FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        return {"seconds": float(record["seconds"]), "step": int(record["step"]),
                "complete": bool(record.get("complete", True))}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        log.warning("%s: unreadable (%s); the run's wall time is left out of reports (the time recorded there is "
                    "lost; its next checkpoint rewrites the file)", path, error)
        return {"seconds": 0.0, "step": -1, "complete": False}


def recorded_seconds(run_dir: Path) -> Optional[float]:
    """The run's training wall time, or None when it has no timing.json or its time is incomplete."""
    record = read_timing(run_dir)
    return record["seconds"] if record is not None and record["complete"] else None


class WallClock:
    """The wall time of one training call on ``run_dir``, added to what its timing.json recorded before:
    ``record(step)`` writes the total so far as reaching ``step``. Made just before training starts, it
    reads the checkpoint the run resumes from and marks the record incomplete if that lies beyond it."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / FILE
        before = read_timing(run_dir) or {"seconds": 0.0, "step": -1, "complete": True}
        latest = checkpoint.latest(run_dir)
        resumes_at = checkpoint.manifest_step(latest) if latest is not None else -1
        self.seconds_before = before["seconds"]
        self.step_before = before["step"]
        self.complete = before["complete"] and before["step"] >= resumes_at
        self.reached = max(before["step"], resumes_at)  # the step a record without a newer one reaches
        self.started = time.perf_counter()

    def record(self, step: int) -> None:
        self.reached = step
        partial = self.path.with_suffix(".partial")
        partial.write_text(json.dumps({"seconds": self.seconds_before + time.perf_counter() - self.started,
                                       "step": step, "complete": self.complete}))
        partial.replace(self.path)
