"""scripts/headline.py: README's summary and RESULTS' opening table are what it makes of the committed
final tables (docs/results/protocol-*), and it reads a final table as harness/reporting/final_table.py writes it."""
from __future__ import annotations

import json

import pytest

from speccond.harness.reporting.final_table import final_table, read_final_table, write_final_table
from speccond.harness.reporting.stats import holm, paired_p_value
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
    rows = [line for line in headline.table(found).splitlines() if "CIFAR-10 (withdrawn 10k copy) (accuracy) | ViT" in line]
    assert [row.split(" | ")[3] for row in rows] == ["baseline", "lam = 10 on q, k, v (the paper)", "lam = 10 on q only"]
    p_values = [paired_p_value([figures[arm][s] for s in seeds], [figures["baseline"][s] for s in seeds])
                for arm, seeds in (("spectral", (100, 101, 102)), ("spectral-corrected=q", (100, 101)))]
    assert rows[1].endswith(f"| -19.7 +- 1.4 | {holm(p_values)[0]:.3g} (2) | loss |") and "1 runs owed" in rows[1]
    matrix = headline.matrix(found)
    assert "| lam = 10 on q, k, v (the paper) | -19.7 +- 1.4, loss |" in matrix
    assert "- Fashion-MNIST (ViT, full protocol): `scripts/protocol.sh tier1`" in matrix  # owed, with its command


def test_an_arm_with_too_few_seeds_for_a_comparison_is_shown_and_says_why():
    """One seed per arm (the first seed of a protocol cut short): every arm keeps its row and its test score;
    none is compared, and the row says so instead of the arm vanishing from the table."""
    figures = {"baseline": {100: 0.80}, "spectral": {100: 0.60}, "qk-norm": {}}
    text, record = final_table(figures, {arm: 1e-3 for arm in figures}, "baseline", "accuracy", 5, "# t", "Seeds;")
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert rows["spectral"] == ("| spectral | 0.001 | 1 | 60 (n=1) | - | - | - | "
                                "not compared: 1 seed(s) in common with baseline, 2 needed |")
    assert "qk-norm" not in rows and record["comparisons"] == [] and record["owed"] == 13
    assert "m = 0 comparisons" in text


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
    assert headline.language_breakdown().startswith("No glue-* final table is committed yet")
    for t, task in enumerate(headline.GLUE):
        for p in headline.PRE_TRAINING_SEEDS:
            base = 0.70 + 0.05 * t + 0.01 * p
            figures = {"baseline": {100: base, 101: base + 0.02}, "spectral": {100: base - 0.10, 101: base - 0.08 - 0.01 * p}}
            text, record = final_table(figures, {"baseline": 1e-3, "spectral": 3e-4}, "baseline", "accuracy", 2, "# t", "")
            write_final_table(tmp_path / f"protocol-glue-{task}-pre{p}" / "final", text, record)
            if (t, p) == (0, 0):  # one table of eight: the breakdown shows it and lists the other seven as owed
                breakdown = headline.language_breakdown().splitlines()
                assert breakdown[:4] == ["| arm | sentiment, pre-training 0 |", "|---|---|",
                                         "| baseline | 71 +- 13 (reference) |",
                                         "| lam = 10 on q, k, v (the paper) | -10 +- 0, loss |"]
                assert breakdown[-1].startswith("Owed (7 of 8 tables): glue-sentiment-pre1, glue-fact-pre0,")
    breakdown = headline.language_breakdown()
    assert breakdown.count("pre-training 0") == 4 + 2 and "Owed" not in breakdown  # 4 columns, the average's and its difference's
    assert "| baseline | 78.50 | 79.50 | reference |" in breakdown  # the average per pre-training seed
    assert "| lam = 10 on q, k, v (the paper) | 68.50 | 69.00 | -10.2 +- 3.2, loss |" in breakdown  # t = 41, 1 df
    record = headline.language_table()
    baseline = record["arms"]["baseline"]["figures"]
    assert baseline == pytest.approx({"0": 0.70 + 0.075 + 0.01, "1": 0.70 + 0.075 + 0.02})  # tasks and seeds averaged
    (comparison,) = record["comparisons"]
    assert comparison["seeds"] == [0, 1] and comparison["difference"]["mean"] == pytest.approx(-0.1025)
    assert record["arms"]["spectral"]["lr"] == "chosen per task" and record["owed"] == 0
    assert "protocol-language" in headline.tables()


def test_the_goals_test_needs_a_win_against_the_baseline_and_against_every_peer_each_after_holm(tmp_path, monkeypatch):
    """headline.versus_peers: every conditioning arm against every peer of the task, paired by seed, Holm over
    those pairs; headline.ahead: a win in the final table and a win against every peer."""
    headline = load_script("headline")
    monkeypatch.setattr(headline, "RESULTS", tmp_path)
    seeds = (100, 101, 102, 103, 104)
    noise = (0.0, 0.004, -0.003, 0.002, -0.001)
    figures = {"baseline": {s: 0.70 + e for s, e in zip(seeds, noise)},
               "spectral-target_kappa=2": {s: 0.80 + e for s, e in zip(seeds, noise[::-1])},  # ahead of both
               "spectral-corrected=q": {s: 0.76 + e for s, e in zip(seeds, noise[::-1])},  # ahead of the baseline only
               "qk-norm": {s: 0.76 + e for s, e in zip(seeds, noise)},
               "spectral-norm": {s: 0.75 + e for s, e in zip(seeds, noise)}}
    text, record = final_table(figures, {arm: 1e-3 for arm in figures}, "baseline", "accuracy", 5, "# t", "Seeds;")
    comparisons = headline.versus_peers(record)
    assert [c.arm for c in comparisons] == [f"{arm} vs {peer}" for arm in ("spectral-corrected=q", "spectral-target_kappa=2")
                                            for peer in ("qk-norm", "spectral-norm")]
    assert {c.m for c in comparisons} == {4}
    pairs = [(arm, peer) for arm in ("spectral-corrected=q", "spectral-target_kappa=2") for peer in ("qk-norm", "spectral-norm")]
    p_values = [paired_p_value([figures[a][s] for s in seeds], [figures[p][s] for s in seeds]) for a, p in pairs]
    assert [c.holm for c in comparisons] == pytest.approx(holm(p_values))
    assert headline.ahead(record, "spectral-target_kappa=2") and not headline.ahead(record, "spectral-corrected=q")
    assert not headline.ahead(record, "spectral")  # not in the task
    without_peer = {**record, "arms": {k: v for k, v in record["arms"].items() if k not in ("qk-norm", "spectral-norm")}}
    assert headline.versus_peers(without_peer) == []
    write_final_table(tmp_path / "protocol-cifar10" / "final", text, record)
    summary = headline.goal(headline.tables())
    assert "- lam = auto (kappa <= 2): 1 of 1 finished tasks with a peer: CIFAR-10 (withdrawn 10k copy) (vision)" in summary
    assert "- lam = 10 on q only: 0 of 1 finished tasks with a peer" in summary
    assert "| lam = 10 on q only | qk-norm | 0.00 +- 0.20 | 1 | 1 | tie |" in summary  # the same mean, noise reversed


def test_the_headline_plot_draws_every_compared_arm_with_its_interval_and_verdict(tmp_path, monkeypatch):
    headline = load_script("headline")
    monkeypatch.setattr(headline, "RESULTS", tmp_path)
    figures = {"baseline": {100: 0.80, 101: 0.82, 102: 0.81}, "spectral": {100: 0.60, 101: 0.63, 102: 0.61},
               "qk-norm": {100: 0.81, 101: 0.82, 102: 0.83}}
    text, record = final_table(figures, {arm: 1e-3 for arm in figures}, "baseline", "accuracy", 3, "# t", "Seeds;")
    write_final_table(tmp_path / "protocol-cifar10" / "final", text, record)
    found = headline.tables()
    rows = headline.forest(found)
    assert [(task, arm, verdict) for task, arm, _, verdict in rows] == [
        ("CIFAR-10 (withdrawn 10k copy), ViT, full protocol", "lam = 10 on q, k, v (the paper)", "loss"),
        ("CIFAR-10 (withdrawn 10k copy), ViT, full protocol", "qk-norm", "tie")]
    assert str(rows[0][2]) == "-19.7 +- 1.4"  # the table's interval, in points
    headline.plot(found, tmp_path / "headline.png")
    assert (tmp_path / "headline.png").stat().st_size > 0


def test_a_conditioning_arm_below_a_peer_after_holm_is_written_behind_it(tmp_path, monkeypatch):
    """The goal's table says "behind" when the peer wins the pair (ListOps' lam = auto vs qk-norm), never "tie"."""
    headline = load_script("headline")
    monkeypatch.setattr(headline, "RESULTS", tmp_path)
    seeds = (100, 101, 102, 103, 104)
    noise = (0.0, 0.004, -0.003, 0.002, -0.001)
    figures = {"baseline": {s: 0.70 + e for s, e in zip(seeds, noise)},
               "spectral-target_kappa=2": {s: 0.60 + e for s, e in zip(seeds, noise[::-1])},
               "qk-norm": {s: 0.76 + e for s, e in zip(seeds, noise)}}
    text, record = final_table(figures, {arm: 1e-3 for arm in figures}, "baseline", "accuracy", 5, "# t", "Seeds;")
    [comparison] = headline.versus_peers(record)
    assert comparison.verdict == "loss" and comparison.difference.mean < 0
    write_final_table(tmp_path / "protocol-cifar10" / "final", text, record)
    row = next(line for line in headline.goal(headline.tables()).splitlines()
               if line.startswith("| lam = auto (kappa <= 2) | qk-norm |"))
    assert row.endswith("| behind |") and "| -16." in row
    assert not headline.ahead(record, "spectral-target_kappa=2")


def test_the_committed_xca_correction_table_is_what_its_script_makes_of_the_kept_runs(tmp_path):
    """docs/results/xca-v-correction/holm.md and holm.json (RESULTS' post hoc check of which correction costs
    XCiT without class attention) regenerate from the kept runs beside them, scored on validation."""
    import shutil

    from speccond.harness.protocol import kept_runs

    script = load_script("xca_v_correction")
    shutil.copy(script.FOLDER / "kept.tar.xz", tmp_path / "kept.tar.xz")
    manifest, _ = kept_runs.manifest_for(script.FOLDER / "kept")  # its entry in docs/results/kept-archives.json
    (tmp_path / "kept.manifest.json").write_text(json.dumps(manifest))  # beside the copy, as pack writes it
    assert script.main(tmp_path) == 0
    for name in ("holm.md", "holm.json"):
        assert (tmp_path / name).read_text() == (script.FOLDER / name).read_text(), f"stale: scripts/xca_v_correction.py"
    assert "| validation accuracy, % |" in (tmp_path / "holm.md").read_text()
    assert read_final_table(tmp_path / "holm.json")["owed"] == 0
