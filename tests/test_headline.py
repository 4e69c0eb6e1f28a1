"""scripts/headline.py: README's summary and RESULTS' opening table are what it makes of the committed
final tables (issue 17), and it reads a final table as experiments/final_table.py writes it."""
from __future__ import annotations

import json

import pytest

from speccond.experiments.final_table import final_table, read_final_table, write_final_table
from speccond.experiments.stats import holm, paired_p_value
from tests.scripts import load_script


def test_the_committed_headline_blocks_are_regenerated_from_the_committed_tables():
    headline = load_script("headline")
    found = headline.tables()
    assert headline.OUT.read_text() == headline.headline(found), "stale: .venv/bin/python scripts/headline.py --write"
    for path, kind in headline.DOCUMENTS.items():
        assert headline.current_block(path) == headline.block(kind, found), (
            f"{path.name}'s headline block is stale: .venv/bin/python scripts/headline.py --write")


def test_a_final_table_becomes_rows_verdicts_and_a_matrix(tmp_path, monkeypatch):
    headline = load_script("headline")
    monkeypatch.setattr(headline, "RESULTS", tmp_path)
    figures = {"baseline": {100: 0.80, 101: 0.82, 102: 0.81},
               "spectral": {100: 0.60, 101: 0.63, 102: 0.61},  # 20 points lower on every seed: a loss
               "spectral-corrected=q": {100: 0.81, 101: 0.81}}  # one seed still owed
    text, record = final_table(figures, {arm: 1e-3 for arm in figures}, "baseline", "accuracy", 3, "# t", "Seeds;")
    write_final_table(tmp_path / "protocol-cifar10" / "final", text, record)
    found = headline.tables()
    assert list(found) == ["protocol-cifar10"] and found["protocol-cifar10"]["owed"] == 1
    rows = [line for line in headline.table(found).splitlines() if "CIFAR-10 (accuracy) | ViT" in line]
    assert [row.split(" | ")[3] for row in rows] == ["baseline", "lam = 10 on q, k, v (the paper)", "lam = 10 on q only"]
    p_values = [paired_p_value([figures[arm][s] for s in seeds], [figures["baseline"][s] for s in seeds])
                for arm, seeds in (("spectral", (100, 101, 102)), ("spectral-corrected=q", (100, 101)))]
    assert rows[1].endswith(f"| -19.7 +- 1.4 | {holm(p_values)[0]:.3g} (2) | loss |") and "1 runs owed" in rows[1]
    matrix = headline.matrix(found)
    assert "| lam = 10 on q, k, v (the paper) | -19.7 +- 1.4, loss |" in matrix
    assert "- Fashion-MNIST (ViT, full protocol): `scripts/protocol.sh tier1`" in matrix  # owed, with its command


def test_a_final_table_that_is_not_one_is_refused_with_what_it_lacks(tmp_path):
    path = tmp_path / "holm.json"
    path.write_text(json.dumps({"metric": "accuracy", "arms": {}}))
    with pytest.raises(ValueError, match="not a final table \\(no reference, seeds, owed, comparisons\\)"):
        read_final_table(path)
    path.write_text("{")
    with pytest.raises(ValueError, match="unreadable final table"):
        read_final_table(path)


def test_the_language_row_averages_the_glue_tasks_and_pairs_by_pre_training_seed(tmp_path, monkeypatch):
    headline = load_script("headline")
    monkeypatch.setattr(headline, "RESULTS", tmp_path)
    assert headline.language_table() is None  # nothing committed yet
    for t, task in enumerate(headline.GLUE):
        for p in headline.PRE_TRAINING_SEEDS:
            base = 0.70 + 0.05 * t + 0.01 * p
            figures = {"baseline": {100: base, 101: base + 0.02}, "spectral": {100: base - 0.10, 101: base - 0.08 - 0.01 * p}}
            text, record = final_table(figures, {"baseline": 1e-3, "spectral": 3e-4}, "baseline", "accuracy", 2, "# t", "")
            write_final_table(tmp_path / f"protocol-glue-{task}-pre{p}" / "final", text, record)
    record = headline.language_table()
    baseline = record["arms"]["baseline"]["figures"]
    assert baseline == pytest.approx({"0": 0.70 + 0.075 + 0.01, "1": 0.70 + 0.075 + 0.02})  # tasks and seeds averaged
    (comparison,) = record["comparisons"]
    assert comparison["seeds"] == [0, 1] and comparison["difference"]["mean"] == pytest.approx(-0.1025)
    assert record["arms"]["spectral"]["lr"] == "chosen per task" and record["owed"] == 0
    assert "protocol-language" in headline.tables()
