"""scripts/compute_used.py sums the wall time each run recorded in timing.json."""
from __future__ import annotations

import json

from tests.scripts import load_script


def test_compute_used_sums_finished_and_stopped_runs_and_counts_incomplete_timings(tmp_path):
    final = {"kind": "eval", "step": 1266, "total_steps": 1266, "accuracy": 0.8}
    runs = {"a/seed-0": ({"seconds": 1800.0, "step": 1266}, [final]),  # written before "complete" existed
            "b/seed-0": ({"seconds": 900.0, "step": 600, "complete": True}, []),
            "c/seed-0": ({"seconds": 900.0, "step": 1266, "complete": False}, [final])}
    for name, (record, rows) in runs.items():
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "timing.json").write_text(json.dumps(record))
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert load_script("compute_used").used(tmp_path) == (2, 1, 1, 1.0)
