"""scripts/compute_used.py sums the wall time each run recorded in timing.json."""
from __future__ import annotations

import json

from tests.scripts import load_script


def test_compute_used_sums_finished_and_stopped_runs(tmp_path):
    for name, record in {"a/seed-0": {"seconds": 1800.0, "step": 1266}, "b/seed-0": {"seconds": 900.0, "step": -1}}.items():
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "timing.json").write_text(json.dumps(record))
    assert load_script("compute_used").used(tmp_path) == (1, 1, 0.75)
