"""The comparison harness: statistics by hand, and a tiny real comparison end to end."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from speccond.experiments.stats import mean_interval, paired_difference


def test_mean_interval_matches_a_hand_computation():
    interval = mean_interval([0.80, 0.82, 0.84])  # mean 0.82, sd 0.02, t(2) = 4.303
    assert interval.mean == pytest.approx(0.82)
    assert interval.half_width == pytest.approx(4.303 * 0.02 / math.sqrt(3))
    assert math.isnan(mean_interval([0.5]).half_width)


def test_paired_difference_uses_the_same_seeds():
    assert paired_difference([0.9, 0.8], [0.85, 0.8]).mean == pytest.approx(0.025)
    with pytest.raises(ValueError, match="same seeds"):
        paired_difference([0.9], [0.8, 0.7])


@pytest.mark.skipif(not Path("/usr/share/datasets/fashion-mnist").is_dir(), reason="apt-get install dataset-fashion-mnist")
def test_cli_compare_end_to_end_and_resumes(tmp_path, monkeypatch, capsys):
    from speccond.cli import main

    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "data"))
    args = ["compare", "--out", str(tmp_path / "cmp"), "--seeds", "2",
            "--set", "train_size=128", "--set", "test_size=64", "--set", "batch_size=64", "--set", "depth=1",
            "--set", "embed_dim=32", "--set", "num_heads=2"]
    assert main(args) == 0
    report = (tmp_path / "cmp" / "results.md").read_text()
    assert "| baseline | 2 |" in report and "| spectral | 2 |" in report
    results = json.loads((tmp_path / "cmp" / "results.json").read_text())
    assert [(r["method"], r["seed"]) for r in results] == [("baseline", 0), ("baseline", 1), ("spectral", 0), ("spectral", 1)]
    assert all(0 <= r["accuracy"] <= 1 for r in results)
    assert min(r["kappa_qkv"] for r in results if r["method"] == "baseline") > max(
        r["kappa_qkv"] for r in results if r["method"] == "spectral"
    )  # lam = 10 conditions W_q,k,v
    assert (tmp_path / "cmp" / "comparison.png").stat().st_size > 10_000
    capsys.readouterr()
    assert main(args) == 0  # finished runs are not trained again
    assert json.loads((tmp_path / "cmp" / "results.json").read_text()) == results
