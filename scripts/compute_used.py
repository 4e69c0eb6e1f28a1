"""Core-hours spent by the runs under some folders, from each run's timing.json (one thread per run).

    .venv/bin/python scripts/compute_used.py runs/long-budget runs/tune-*

Per folder: finished runs, runs stopped before finishing (Ctrl-C, a kill that left Python to record it) and
the wall time recorded, in hours.
Every issue-17 run has one thread, so its wall time is its core time. A run stopped by SIGKILL loses the time
since its last record (experiments/compare.py train_timed).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def used(folder: Path) -> tuple[int, int, float]:
    """(finished runs, unfinished runs, hours) under ``folder``."""
    finished = unfinished = 0
    seconds = 0.0
    for timing in sorted(folder.rglob("timing.json")):
        record = json.loads(timing.read_text())
        seconds += record["seconds"]
        if record["step"] >= 0:
            finished += 1
        else:
            unfinished += 1
    return finished, unfinished, seconds / 3600


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args()
    total = 0.0
    for folder in args.folders:
        finished, unfinished, hours = used(folder)
        total += hours
        print(f"{folder}: {finished} finished, {unfinished} unfinished, {hours:.2f} core-hours")
    print(f"total: {total:.2f} core-hours")


if __name__ == "__main__":
    main()
