"""Check that every interval and p-value quoted in README.md and the docs pages comes from a committed results file.

    .venv/bin/python scripts/audit_numbers.py          # lists each quotation without a source; exit 1 if any

A quoted interval "a +- b" (a mean and the half width of its 95 % interval, as every report writes
them) is backed when a committed file under docs/results/ holds it:
- verbatim, in any .md, .json or .txt there, or in the tuning table a choice.json there makes
  (harness/protocol/tuning_table.py: a committed protocol keeps choice.json, not the tuning.md made from it);
- or as numbers that round to it: an interval in a results.json ({"mean", "half_width"}) whose mean and
  half width, as stored or times 100 (fractions shown as percent), round to a and b at the decimals
  quoted.

A quoted p-value ("p 0.016", "p = 0.016", "adjusted p 0.079", "Holm p 0.0039", "adjusted 0.0739") is
backed when a committed file holds one that rounds to it at the decimals quoted: a "p" or "holm" value
in a .json there, or a number in a column headed "p", "Holm p" or "Holm p (m)" of a markdown table there.

A quotation is a whole token: "5.7 +- 4.0" is not backed by "-25.7 +- 4.0", so a dropped digit fails.

Where a passage says which figures it quotes, every number in it is checked against those figures only
(same task and arm, not the whole folder). The passage starts at a line holding
``<!-- figures: SOURCE; SOURCE ... -->`` and ends at ``<!-- /figures -->``; a SOURCE is a path under
docs/results/ (a file or a folder, whose .md and .json files count, kept/ left out), optionally with
``#text``: then only the lines of its .md files that contain that text (a table's row: task and arm).
In the passage, every decimal number (per-seed scores, range bounds, means, p-values, Holm p) and every
whole number followed by "%" must round, at the decimals quoted, to a number of those sources (as
written, or in a .json as stored or times 100; a number quoted without a sign matches either sign), and
every "a +- b" to an interval of theirs, as a pair. Numbers between the headline markers are the
headline script's, regenerated and compared by tests/test_headline.py.

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
sys.path.insert(0, str(ROOT / "src"))

from speccond.harness import table_of_choice  # noqa: E402
DOCUMENTS = ("README.md", "docs/RESULTS.md", "docs/RECOMMENDATIONS.md", "docs/GUIDE.md", "docs/MODELS.md",
             "docs/HARNESS.md", "docs/GPU.md")
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


def stored_intervals(results: Path = RESULTS) -> list[tuple[float, float]]:
    """(mean, half width) of every interval in the committed results.json files, as stored."""
    return [(float(o["mean"]), float(o["half_width"])) for path in sorted(results.rglob("results.json"))
            for o in objects(json.loads(path.read_text()))
            if "mean" in o and "half_width" in o and o["half_width"] is not None]


def backed(mean: str, half: str, corpus: str, intervals: list[tuple[float, float]]) -> bool:
    quoted = re.escape(f"{mean.lstrip('+-')} +- {half}")
    if re.search(rf"(?<![\w.+-]){'[-+]?' if mean[0] not in '+-' else re.escape(mean[0]) + '?'}{quoted}(?![\w.])", corpus):
        return True
    a, b = float(mean), float(half)
    tolerance_a, tolerance_b = 0.5 * 10 ** -decimals(mean) + 1e-9, 0.5 * 10 ** -decimals(half) + 1e-9
    for m, h in intervals:
        for scale in (1.0, 100.0):
            if abs(m * scale - a) <= tolerance_a and abs(h * scale - b) <= tolerance_b:
                return True
    return False


def stored_p_values(results: Path = RESULTS) -> list[float]:
    """Every p-value a committed file holds: "p" and "holm" in the .json files, and the numbers in p columns
    of the markdown tables."""
    found = [float(o[key]) for path in sorted(results.rglob("*.json")) for o in objects(json.loads(path.read_text()))
             for key in ("p", "holm") if isinstance(o.get(key), (int, float)) and not isinstance(o.get(key), bool)]
    for path in sorted(results.rglob("*.md")):
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


def unbacked(root: Path = ROOT) -> list[str]:
    """ "document: quotation" for every quoted figure no committed file backs, in document order: in a
    figures passage, every number against that passage's sources; elsewhere, intervals and p-values
    against every committed file."""
    results = root / "docs" / "results"
    known_list = results / KNOWN.name
    corpus = "\n".join([p.read_text(errors="ignore") for p in sorted(results.rglob("*"))
                        if p.suffix in (".md", ".json", ".txt") and p != known_list]
                       + [table_of_choice(json.loads(p.read_text())) for p in sorted(results.rglob("choice.json"))])
    intervals, p_values = stored_intervals(results), stored_p_values(results)
    missing = []
    for document in DOCUMENTS:
        text = (root / document).read_text()
        passages = list(PASSAGE.finditer(text))
        missing += [f"{document}: {item}" for passage in passages
                    for item in passage_unbacked(passage.group("body"), passage.group("sources"), results)]
        for passage in reversed(passages):  # checked above, against their own sources only
            text = text[:passage.start()] + text[passage.end():]
        for match in INTERVAL.finditer(text):
            mean, half = match.groups()
            if not backed(mean, half, corpus, intervals):
                missing.append(f"{document}: {mean} +- {half}")
        for match in P_VALUE.finditer(text):
            if not p_backed(match.group(1), p_values):
                missing.append(f"{document}: {match.group(0)}")
    return missing


PASSAGE = re.compile(r"<!-- figures: (?P<sources>[^>]*?) -->\n(?P<body>.*?)<!-- /figures -->", re.S)
NUMBER = re.compile(r"(?<![\w.])([-+]?\d+\.\d+|\d+(?=\s?%))(?![\w.])")


def passage_figures(sources: str, results: Path) -> tuple[list[float], list[tuple[float, float]]]:
    """(numbers, intervals) of a passage's sources: "path[#text]; ...", paths under ``results``."""
    numbers: list[float] = []
    intervals: list[tuple[float, float]] = []
    for source in (s.strip() for s in sources.split(";") if s.strip()):
        path, _, only = source.partition("#")
        where = results / path.strip()
        if not where.exists():
            raise ValueError(f"figures source {source!r}: no {where}; name a file or folder under docs/results")
        files = [where] if where.is_file() else [f for f in sorted(where.rglob("*"))
                                                  if f.suffix in (".md", ".json") and "kept" not in f.parts]
        for file in files:
            if file.suffix == ".json" and not only:
                for o in objects(json.loads(file.read_text())):
                    numbers += [float(v) for v in o.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
                    if isinstance(o.get("mean"), (int, float)) and isinstance(o.get("half_width"), (int, float)):
                        intervals.append((float(o["mean"]), float(o["half_width"])))
            elif file.suffix == ".md":
                text = "\n".join(_lines_about(file.read_text().splitlines(), only))
                numbers += [float(m.group(1)) for m in NUMBER.finditer(text)]
                intervals += [(float(a), float(b)) for a, b in INTERVAL.findall(text)]
    return numbers, intervals


def _lines_about(lines: list[str], only: str) -> list[str]:
    """The lines holding ``only`` (all lines without it), each with the table that follows it when it is
    a caption, not a row (headline.md's "**ListOps, ...** (m = 3):" and its table)."""
    if not only:
        return lines
    kept, caption = [], False
    for line in lines:
        if only in line:
            kept.append(line)
            caption = not line.startswith("|")
        elif caption and (line.startswith("|") or not line.strip()):
            kept.append(line)
        elif caption and kept[-1].startswith("|"):
            caption = False
        else:
            caption = False
    return kept


def _rounds_to(quoted: str, value: float) -> bool:
    a = float(quoted)
    tolerance = 0.5 * 10 ** -decimals(quoted) + 1e-9
    signed = quoted[0] in "+-"
    return any(abs((v if signed else abs(v)) - (a if signed else abs(a))) <= tolerance
               for v in (value, value * 100))


def passage_unbacked(body: str, sources: str, results: Path) -> list[str]:
    """Every interval and number of ``body`` that its sources do not hold (same task and arm)."""
    numbers, intervals = passage_figures(sources, results)
    missing = []
    for match in INTERVAL.finditer(body):
        mean, half = match.groups()
        if not any(_rounds_to(mean, m) and _rounds_to(half, h) for m, h in intervals):
            missing.append(f"{mean} +- {half} (not an interval of {sources})")
    rest = INTERVAL.sub(" ", body)
    for match in NUMBER.finditer(rest):
        if not any(_rounds_to(match.group(1), value) for value in numbers):
            missing.append(f"{match.group(1)} (not a figure of {sources})")
    return missing


def known(root: Path = ROOT) -> list[str]:
    """The quotations docs/results/unbacked-numbers.md lists (its table's first column)."""
    rows = [line for line in (root / KNOWN.relative_to(ROOT)).read_text().splitlines() if line.startswith("| ") and "---" not in line][1:]
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
