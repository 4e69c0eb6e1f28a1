"""How the reports write numbers: table cells and results.json values.

Shared by the classification report (report.py), the GLUE table (glue.py) and the detection report
(harness/tasks/detection/report.py), so a figure reads the same in all of them.
"""
from __future__ import annotations

from typing import Optional

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


def duration(seconds: Optional[float]) -> str:
    """Wall time in s, min or h ("-" when not recorded)."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.2f} h"
