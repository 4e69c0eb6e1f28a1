"""Check that every interval and p-value quoted in README.md and docs/RESULTS.md comes from a committed results file.

    .venv/bin/python scripts/audit_numbers.py          # lists each quotation without a source; exit 1 if any

A quoted interval "a +- b" (a mean and the half width of its 95 % interval, as every report writes
them) is backed when a committed file under docs/results/ holds it:
- verbatim, in any .md, .json or .txt there;
- or as numbers that round to it: an interval in a results.json ({"mean", "half_width"}) whose mean and
  half width, as stored or times 100 (fractions shown as percent), round to a and b at the decimals
  quoted.

A quoted p-value ("p 0.016", "p = 0.016", "adjusted p 0.079", "Holm p 0.0039", "adjusted 0.0739") is
backed when a committed file holds one that rounds to it at the decimals quoted: a "p" or "holm" value
in a .json there, or a number in a column headed "p", "Holm p" or "Holm p (m)" of a markdown table there.

Quotations that no file holds are listed in docs/results/unbacked-numbers.md, each with the reason it
stays in the text. The test suite runs this (tests/test_audit_numbers.py), so a new quotation without a
source fails CI, and so does an entry in that list that has since been backed or removed.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
DOCUMENTS = ("README.md", "docs/RESULTS.md")
KNOWN = RESULTS / "unbacked-numbers.md"
INTERVAL = re.compile(r"(?<![\w.])([-+]?\d+(?:\.\d+)?)\s*\+-\s*(\d+(?:\.\d+)?)(?![\w.])")
P_VALUE = re.compile(r"(?<![\w.])(?:p\s*=?|adjusted(?: p)?|Holm p)\s+(0\.\d+|1\.0*)(?![\w.])")
P_COLUMNS = ("p", "Holm p", "Holm p (m)", "adjusted p")


def decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def objects(value):
    """Every JSON object (dict) in ``value``, itself included, depth first."""
    if isinstance(value, dict):
        yield value
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            yield from objects(item)


def stored_intervals() -> list[tuple[float, float]]:
    """(mean, half width) of every interval in the committed results.json files, as stored."""
    return [(float(o["mean"]), float(o["half_width"])) for path in sorted(RESULTS.rglob("results.json"))
            for o in objects(json.loads(path.read_text()))
            if "mean" in o and "half_width" in o and o["half_width"] is not None]


def backed(mean: str, half: str, corpus: str, intervals: list[tuple[float, float]]) -> bool:
    quoted = f"{mean} +- {half}"
    if quoted in corpus or quoted.lstrip("+") in corpus:
        return True
    a, b = float(mean), float(half)
    tolerance_a, tolerance_b = 0.5 * 10 ** -decimals(mean) + 1e-9, 0.5 * 10 ** -decimals(half) + 1e-9
    for m, h in intervals:
        for scale in (1.0, 100.0):
            if abs(m * scale - a) <= tolerance_a and abs(h * scale - b) <= tolerance_b:
                return True
    return False


def stored_p_values() -> list[float]:
    """Every p-value a committed file holds: "p" and "holm" in the .json files, and the numbers in p columns
    of the markdown tables."""
    found = [float(o[key]) for path in sorted(RESULTS.rglob("*.json")) for o in objects(json.loads(path.read_text()))
             for key in ("p", "holm") if isinstance(o.get(key), (int, float)) and not isinstance(o.get(key), bool)]
    for path in sorted(RESULTS.rglob("*.md")):
        columns: list[int] = []
        for line in path.read_text().splitlines():
            if not line.startswith("|"):
                columns = []
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not columns and any(c in P_COLUMNS for c in cells):
                columns = [i for i, c in enumerate(cells) if c in P_COLUMNS]
                continue
            for i in columns:
                number = re.match(r"(\d+(?:\.\d+)?(?:e-\d+)?)", cells[i]) if i < len(cells) else None
                if number:
                    found.append(float(number.group(1)))
    return found


def p_backed(quoted: str, stored: list[float]) -> bool:
    tolerance = 0.5 * 10 ** -decimals(quoted) + 1e-12
    return any(abs(value - float(quoted)) <= tolerance for value in stored)


def unbacked() -> list[str]:
    """ "document: a +- b" for every quoted interval no committed file holds, in document order."""
    corpus = "\n".join(p.read_text(errors="ignore") for p in sorted(RESULTS.rglob("*"))
                       if p.suffix in (".md", ".json", ".txt") and p != KNOWN)
    intervals, p_values = stored_intervals(), stored_p_values()
    missing = []
    for document in DOCUMENTS:
        text = (ROOT / document).read_text()
        for match in INTERVAL.finditer(text):
            mean, half = match.groups()
            if not backed(mean, half, corpus, intervals):
                missing.append(f"{document}: {mean} +- {half}")
        for match in P_VALUE.finditer(text):
            if not p_backed(match.group(1), p_values):
                missing.append(f"{document}: {match.group(0)}")
    return missing


def known() -> list[str]:
    """The quotations docs/results/unbacked-numbers.md lists (its table's first column)."""
    rows = [line for line in KNOWN.read_text().splitlines() if line.startswith("| ") and "---" not in line][1:]
    return [row.split("|")[1].strip().strip("`") for row in rows]


def main() -> int:
    missing, listed = unbacked(), known()
    new = sorted(set(missing) - set(listed))
    stale = sorted(set(listed) - set(missing))
    for item in new:
        print(f"no committed file backs {item}")
    for item in stale:
        print(f"{KNOWN.relative_to(ROOT)} lists {item}, which is now backed or gone: drop the entry")
    print(f"{len(missing)} quotations without a source, all listed with a reason" if not new and not stale
          else f"{len(new)} unlisted, {len(stale)} stale")
    return 1 if new or stale else 0


if __name__ == "__main__":
    sys.exit(main())
