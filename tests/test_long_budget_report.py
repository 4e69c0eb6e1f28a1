"""scripts/long_budget_report.py applies the reading registered in docs/RESULTS.md before the runs."""
from __future__ import annotations

import json

import pytest

from tests.scripts import load_script

STEPS = 422  # 54,000 training images in batches of 128


def _write_runs(folder, gaps, entropy):
    """baseline and spectral runs for 20 epochs; spectral's validation accuracy is the baseline's + gap[seed]."""
    config = {"val_size": 6000, "train_size": 0, "batch_size": 128, "lr": 1e-3}
    for arm in ("baseline", "spectral"):
        for seed, gap in enumerate(gaps):
            run = folder / arm / f"seed-{seed}"
            run.mkdir(parents=True)
            (run / "config.json").write_text(json.dumps({"config": config}))
            rows = []
            for epoch in range(1, 21):
                accuracy = 0.80 + 0.002 * epoch + 0.003 * seed + (gap if arm == "spectral" else 0.0)
                rows.append({"kind": "val", "step": epoch * STEPS, "epoch": epoch, "accuracy": accuracy})
                rows.append({"kind": "entropy", "step": epoch * STEPS, "entropy": entropy if arm == "spectral" else 2.3,
                             "uniform_entropy": 2.83})
            rows.append({"kind": "eval", "step": 20 * STEPS, "total_steps": 20 * STEPS, "accuracy": rows[-2]["accuracy"]})
            (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("gaps, entropy, verdict", [
    ((-0.01, 0.012, 0.0), 0.2, "slows early training"),  # an interval that includes 0
    ((-0.10, -0.11, -0.12), 0.2, "the collapse is a ceiling"),  # 11 points, entropy below 0.5
    ((-0.10, -0.11, -0.12), 1.0, "neither registered case holds"),
])
def test_the_registered_reading(tmp_path, gaps, entropy, verdict):
    report = load_script("long_budget_report")
    _write_runs(tmp_path, gaps, entropy)
    result = report.analyse(tmp_path)
    assert result["last"] == 20 and result["epochs"][-1]["spectral:difference"].n == 3
    assert verdict in report.reading(result)
    assert "Holm p" in report.markdown(result)
    _, record = report.final_table_of(result)  # holm.json, as scripts/headline.py reads it
    (comparison,) = record["comparisons"]
    assert comparison["arm"] == "spectral" and record["owed"] == 0 and record["arms"]["baseline"]["lr"] == 1e-3


@pytest.mark.parametrize("gaps", [(-0.1,), (-0.1, -0.12)])
def test_no_reading_before_the_three_registered_seeds_reach_epoch_20(tmp_path, gaps):
    report = load_script("long_budget_report")
    _write_runs(tmp_path, gaps, 0.2)
    assert report.reading(report.analyse(tmp_path)).startswith("Not yet")


def test_the_page_holds_the_test_table_and_holm_json_its_record(tmp_path, monkeypatch):
    """The test table is a section of long-budget.md, not a file of its own; holm.json is the record
    scripts/headline.py reads (docs/RESULTS_LAYOUT.md)."""
    report = load_script("long_budget_report")
    _write_runs(tmp_path / "runs", (-0.10, -0.11, -0.12), 0.2)
    monkeypatch.setattr("sys.argv", ["long_budget_report.py", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    report.main()
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["holm.json", "long-budget.md", "long-budget.png"]
    table, record = report.final_table_of(report.analyse(tmp_path / "runs"))
    assert table.rstrip("\n") in (out / "long-budget.md").read_text()
    saved = json.loads((out / "holm.json").read_text())
    assert saved["comparisons"] == record["comparisons"] and "the collapse is a ceiling" in saved["reading"]
