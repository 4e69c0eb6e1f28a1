"""Every interval README.md and docs/RESULTS.md quote comes from a committed results file (issue 17)."""
from __future__ import annotations

import re

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
