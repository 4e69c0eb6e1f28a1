"""scripts/mechanism.py: the committed docs/results/mechanism.md is what it makes of the committed final runs,
and it pairs each arm's entropy with the baseline's by seed."""
from __future__ import annotations

import json

import pytest

from speccond.harness.reporting.final_table import final_table, write_final_table
from tests.scripts import load_script


def test_the_committed_mechanism_page_is_regenerated_from_the_committed_runs():
    mechanism = load_script("mechanism")
    assert mechanism.OUT.read_text() == mechanism.report(*mechanism.collect()), (
        "stale: .venv/bin/python scripts/mechanism.py --write")


def _task(folder, figures, entropy):
    text, record = final_table(figures, {arm: 1e-3 for arm in figures}, "baseline", "accuracy", 3, "# t", "Seeds;")
    write_final_table(folder, text, record)
    runs = [{"path": f"{arm}/seed-{seed}", "status": "finished", "entropy": entropy.get(arm, {}).get(seed)}
            for arm, by_seed in figures.items() for seed in by_seed]
    (folder / "results.json").write_text(json.dumps({"runs": runs}))


def test_entropy_is_a_fraction_of_the_baseline_paired_by_seed_and_unmeasured_arms_are_listed(tmp_path, monkeypatch):
    mechanism = load_script("mechanism")
    monkeypatch.setattr(mechanism, "RESULTS", tmp_path)
    figures = {"baseline": {100: 0.80, 101: 0.82, 102: 0.81},
               "spectral": {100: 0.60, 101: 0.63, 102: 0.61},
               "qk-norm": {100: 0.81, 101: 0.83, 102: 0.80}}
    entropy = {"baseline": {100: 2.0, 101: 4.0, 102: 2.0}, "spectral": {100: 0.2, 101: 0.2, 102: 0.1}}
    _task(tmp_path / "protocol-cifar10" / "final", figures, entropy)
    measured, unmeasured = mechanism.collect()
    assert unmeasured == {"cifar10": ["qk-norm"]}  # its runs carry no entropy: listed, not guessed
    (row,) = measured
    assert (row.task, row.arm, row.verdict) == ("cifar10", "spectral", "loss")
    assert row.fraction.mean == pytest.approx((0.1 + 0.05 + 0.05) / 3)  # per seed, then the mean
    assert row.entropy == pytest.approx(0.5 / 3) and row.baseline_entropy == pytest.approx(8 / 3)
    assert row.difference.mean == pytest.approx(-19.666666, rel=1e-5)
    text = mechanism.report(measured, unmeasured)
    assert "| cifar10 | lam = 10 on q, k, v (the paper) | 0.167 | 2.67 |" in text and "- cifar10: qk-norm" in text


def test_spearman_is_one_for_a_monotone_pair_and_handles_ties():
    mechanism = load_script("mechanism")
    assert mechanism.spearman([1, 2, 3, 4], [10, 20, 30, 45]) == pytest.approx(1.0)
    assert mechanism.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert mechanism.spearman([1, 1, 2], [1, 1, 2]) == pytest.approx(1.0)
