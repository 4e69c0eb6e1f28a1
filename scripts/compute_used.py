"""Core-hours spent by the runs under some folders, from each run's timing.json (one thread per run).

    .venv/bin/python scripts/compute_used.py runs/long-budget runs/tune-*

Per folder: finished runs (a final eval row in metrics.jsonl), runs not finished, runs whose timing is
incomplete (harness/training/timing.py: a kill lost the time since its last record, so the sum undercounts) and
the wall time recorded, in hours. Every run of the fair-comparison protocol has one thread, so its wall time is its core time.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from speccond.diagnostics.records import read_metrics
from speccond.harness import TIMING_FILE, read_timing


def used(folder: Path) -> tuple[int, int, int, float]:
    """(finished runs, unfinished runs, runs with incomplete timing, hours) over the timed runs under ``folder``."""
    finished = unfinished = incomplete = 0
    seconds = 0.0
    for run in sorted(path.parent for path in folder.rglob(TIMING_FILE)):
        record = read_timing(run)
        seconds += record["seconds"]
        incomplete += not record["complete"]
        rows = read_metrics(run / "metrics.jsonl") if (run / "metrics.jsonl").is_file() else []
        if any(r.get("kind") == "eval" and r.get("step") == r.get("total_steps") for r in rows):
            finished += 1
        else:
            unfinished += 1
    return finished, unfinished, incomplete, seconds / 3600


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args()
    total = 0.0
    for folder in args.folders:
        finished, unfinished, incomplete, hours = used(folder)
        total += hours
        print(f"{folder}: {finished} finished, {unfinished} unfinished, {incomplete} with time lost to a kill, "
              f"{hours:.2f} core-hours")
    print(f"total: {total:.2f} core-hours")


if __name__ == "__main__":
    main()
