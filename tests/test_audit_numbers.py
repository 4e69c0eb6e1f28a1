"""Every interval README.md and docs/RESULTS.md quote comes from a committed results file
(scripts/audit_numbers.py over docs/results/)."""
from __future__ import annotations

import re

import pytest

from tests.scripts import load_script


def test_every_quoted_interval_has_a_committed_source_or_a_listed_reason():
    audit = load_script("audit_numbers")
    missing, listed = audit.unbacked(), audit.known()
    assert sorted(set(missing) - set(listed)) == [], "quoted without a source (see scripts/audit_numbers.py)"
    assert sorted(set(listed) - set(missing)) == [], "listed in docs/results/unbacked-numbers.md but now backed or gone"


def test_the_audit_matches_by_rounding_and_catches_an_invented_figure():
    audit = load_script("audit_numbers")
    intervals = [(0.66254, 0.00569)]  # a fraction, as results.json stores accuracy
    assert audit.backed("66.25", "0.57", "", intervals) and audit.backed("66.3", "0.6", "", intervals)
    assert not audit.backed("66.4", "0.6", "", intervals) and not audit.backed("66.25", "0.7", "", intervals)
    assert audit.backed("+3.9", "1.4", "... +3.9 +- 1.4 ...", [])
    assert [m.groups() for m in audit.INTERVAL.finditer("a -27.2 +- 10 % and 0.71 +- 0.62, v1.2+-3")] == [
        ("-27.2", "10"), ("0.71", "0.62")]


def test_the_committed_multiple_comparisons_table_is_what_the_script_makes_of_the_committed_results():
    comparisons = load_script("multiple_comparisons")
    assert comparisons.OUT.read_text() == comparisons.markdown(comparisons.rows()), (
        "docs/results/multiple-comparisons.md is stale: .venv/bin/python scripts/multiple_comparisons.py --write")
    # RESULTS' correction across all families names how many arms the file holds
    quoted = re.findall(r"the (\d+) arms of the file", (comparisons.ROOT / "docs" / "RESULTS.md").read_text())
    assert quoted == [str(len(comparisons.rows()))], "RESULTS' count of the arms in multiple-comparisons.md is stale"


def test_quoted_p_values_are_found_in_their_forms_and_checked_by_rounding():
    audit = load_script("audit_numbers")
    text = "gains (p 0.016), p = 0.2, adjusted p 0.079, Holm p 0.0039, adjusted 0.0739; not top 0.5 or p0.3"
    assert [m.group(1) for m in audit.P_VALUE.finditer(text)] == ["0.016", "0.2", "0.079", "0.0039", "0.0739"]
    stored = [0.0039062, 0.0160, 0.07912]
    assert audit.p_backed("0.0039", stored) and audit.p_backed("0.016", stored) and audit.p_backed("0.079", stored)
    assert audit.p_backed("0.08", stored) and not audit.p_backed("0.0040", stored) and not audit.p_backed("0.07", stored)


# Each edit is planted in a scratch copy of README.md and docs/RESULTS.md (docs/results/ is the
# committed one) and must make the audit report a quotation without a source.
PLANTED = {
    "a difference swapped in from another task (CIFAR-10's lam = 10 into ListOps' table)": (
        "docs/RESULTS.md", "| 33.00, 17.50, 32.20, 32.10, 18.90 | -5.7 +- 9.6 |",
        "| 33.00, 17.50, 32.20, 32.10, 18.90 | -15.1 +- 1.9 |"),
    "a dropped leading digit (the recommendation's -25.7 +- 4.0 as 5.7 +- 4.0)": (
        "docs/RECOMMENDATIONS.md", "loses\n  25.7 +- 4.0 test points", "loses\n  5.7 +- 4.0 test points"),
    "a changed Holm p (ListOps, auto against qk-norm)": (
        "docs/RESULTS.md", "points (Holm p 0.0267)**", "points (Holm p 0.0276)**"),
    "a changed range bound (ListOps, the arms that learn)": (
        "docs/RESULTS.md", "land at 31.2 to 33.7 %", "land at 31.2 to 34.7 %"),
    "a changed per-seed score (ListOps, lam = auto's seed 102)": (
        "docs/RESULTS.md", "| 31.20, 32.20, 32.60, 32.10, 32.10 |", "| 31.20, 32.20, 32.90, 32.10, 32.10 |"),
    "a per-encoder difference from the rounded averages (language, auto: 1.26 for 1.25)": (
        "docs/RESULTS.md", "is 1.46 and 1.25 points below", "is 1.46 and 1.26 points below"),
}


def _scratch_copy(tmp_path, audit):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "results").symlink_to(audit.RESULTS, target_is_directory=True)
    for document in audit.DOCUMENTS:
        (tmp_path / document).write_text((audit.ROOT / document).read_text())
    return tmp_path


@pytest.mark.parametrize("planted", list(PLANTED))
def test_each_planted_error_in_a_copy_of_the_docs_fails_the_audit(tmp_path, planted):
    audit = load_script("audit_numbers")
    root = _scratch_copy(tmp_path, audit)
    document, right, wrong = PLANTED[planted]
    text = (root / document).read_text()
    assert text.count(right) == 1, f"the text the test edits moved: {right!r}"
    assert set(audit.unbacked(root)) <= set(audit.known(root)), "the unedited copy must pass"
    (root / document).write_text(text.replace(right, wrong))
    new = set(audit.unbacked(root)) - set(audit.known(root))
    assert new, f"{planted}: the audit accepted it"


def test_a_passage_is_checked_against_its_own_sources_not_every_file():
    """-15.1 +- 1.9 is CIFAR-10's (so the old folder-wide check accepted it in ListOps' table); 5.7 +- 4.0 is
    inside -25.7 +- 4.0 and must not be taken for it."""
    audit = load_script("audit_numbers")
    corpus = "| -25.7 +- 4.0 | ... | -15.1 +- 1.9 |"
    assert not audit.backed("5.7", "4.0", corpus, []) and audit.backed("-25.7", "4.0", corpus, [])
    assert audit.backed("25.7", "4.0", corpus, []) and audit.backed("-15.1", "1.9", corpus, [])
    assert audit.passage_unbacked("ties (-5.7 +- 9.6) at 31.2 %", "protocol-lra-listops/final", audit.RESULTS) == []
    assert audit.passage_unbacked("ties (-15.1 +- 1.9)", "protocol-lra-listops/final", audit.RESULTS) == [
        "-15.1 +- 1.9 (not an interval of protocol-lra-listops/final)"]
