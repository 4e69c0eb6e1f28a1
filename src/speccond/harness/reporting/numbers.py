"""How the reports write numbers: table cells and results.json values.

Shared by the classification report (report.py), the GLUE table (glue.py) and the detection report
(harness/tasks/detection/report.py), so a figure reads the same in all of them.
"""
from __future__ import annotations

from typing import Iterable, Optional

from speccond.harness.reporting.stats import Interval


# How a table names a task's metric (the first is a run's headline figure: training_tasks.TrainingTask.metrics);
# a metric not named here is shown by its key, e.g. "accuracy".
METRIC_NAMES = {"box_ap": "box AP", "box_ap50": "box AP50", "box_ap75": "box AP75", "mask_ap": "mask AP",
                "mask_ap50": "mask AP50", "mcc": "MCC", "f1": "F1", "accuracy": "accuracy"}


def percent(interval: Interval) -> str:
    """A fraction's interval in %: "87.3 +- 0.41" (or "87.3 (n=1)")."""
    return str(interval.scaled(100))


def signed_percent(interval: Interval) -> str:
    """``percent`` with its sign always written: "+1.2 +- 0.3", "-0.4 +- 0.5"."""
    text = percent(interval)
    return text if text.startswith("-") else "+" + text


TIME_UNITS = {"s": 1.0, "min": 60.0, "h": 3600.0}


def time_unit(seconds: Iterable[Optional[float]]) -> str:
    """The one unit a column of wall times is written in, by its largest: s below 2 minutes, min below 2
    hours, else h (so a column never mixes "76.0 s" with "2.1 min")."""
    largest = max((s for s in seconds if s is not None), default=0.0)
    return "s" if largest < 120 else "min" if largest < 7200 else "h"


def duration(seconds: Optional[float], unit: Optional[str] = None) -> str:
    """Wall time in ``unit`` (a key of TIME_UNITS: its column's, :func:`time_unit`), or without one in the unit
    of this value alone: "76.0 s", "1.3 min", "2.05 h"; "-" when not recorded."""
    if seconds is None:
        return "-"
    unit = unit or time_unit([seconds])
    value = seconds / TIME_UNITS[unit]
    return f"{value:.2f} h" if unit == "h" else f"{value:.1f} {unit}"
