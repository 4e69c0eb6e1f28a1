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
Its sign counts: "-0.54" is not backed by "+0.54"; a number without a sign is a positive one, unless the
words that govern it say the direction ("loses 25.7 +- 4.0", "22.10 points behind"; see audit_statements.py
for which words govern a figure: its table cell, the parenthesis around it, else its sentence).

Where a passage says which figures it quotes, every number in it is checked against those figures only
(same task and arm, not the whole folder). The passage starts at a line holding
``<!-- figures: SOURCE; SOURCE ... -->`` and ends at ``<!-- /figures -->``; a SOURCE is a path under
docs/results/ (a file or a folder, whose .md and .json files count, kept/ left out), optionally with
``#text``: then only the lines of its .md files that contain that text (a table's row: task and arm).
In the passage, every decimal number (per-seed scores, range bounds, means, p-values, Holm p) and every
whole number followed by "%" must round, at the decimals quoted, to a number of those sources (as
written, or in a .json as stored or times 100; with its sign, as above), and every "a +- b" to an
interval of theirs, as a pair. Numbers between the headline markers are the
headline script's, regenerated and compared by tests/test_headline.py.

Then, in and out of passages, each figure must be the one of the source row it stands for
(audit_statements.py): the Holm p beside an interval is that row's, a verdict word beside it is what
``speccond.harness.verdict`` gives for its Holm p, and per-seed scores are one arm's, each at its seed.

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

sys.path.insert(0, str(ROOT / "scripts"))

from audit_statements import INTERVAL, NUMBER, Sources, Text, decimals, matches, rows_of, statement_errors  # noqa: E402
from speccond.harness import table_of_choice  # noqa: E402

DOCUMENTS = ("README.md", "docs/RESULTS.md", "docs/RECOMMENDATIONS.md", "docs/GUIDE.md", "docs/MODELS.md",
             "docs/HARNESS.md", "docs/GPU.md")
KNOWN = RESULTS / "unbacked-numbers.md"
P_VALUE = re.compile(r"(?<![\w.])(?:p\s*=?|adjusted(?: p)?|Holm p)\s+(0\.\d+|1\.0*)(?![\w.])")
P_COLUMNS = ("p", "Holm p", "Holm p (m)", "adjusted p")


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


def verbatim(corpus: str) -> set[tuple[str, str]]:
    """Every "a +- b" written in ``corpus``, as (a with its sign as written, b)."""
    return set(INTERVAL.findall(corpus))


def backed(mean: str, half: str, corpus: str | set[tuple[str, str]], intervals: list[tuple[float, float]],
           negative_ok: bool) -> bool:
    """Whether a committed file holds "mean +- half" with its sign: written so in ``corpus`` (its text or
    :func:`verbatim` of it), or as numbers of ``intervals`` that round to it. A mean without a sign is a
    positive one, or a magnitude of either sign where ``negative_ok`` (the words around it say "loses")."""
    written = verbatim(corpus) if isinstance(corpus, str) else corpus
    magnitude = mean.lstrip("+-")
    signs = [mean[0]] if mean[0] in "+-" else ["", "+"] + (["-"] if negative_ok else [])
    if any((sign + magnitude, half) in written for sign in signs) or (
            mean[0] == "+" and (magnitude, half) in written):
        return True
    return any(matches(half, h) and matches(mean, m, negative_ok) for m, h in intervals)


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
    against every committed file. Then, everywhere, each figure against the source row it stands for:
    its sign, the Holm p and verdict beside it, its seed (audit_statements.py)."""
    results = root / "docs" / "results"
    known_list = results / KNOWN.name
    files = [p for p in sorted(results.rglob("*")) if p.suffix in (".md", ".json", ".txt") and p != known_list]
    choices = [(str(p.relative_to(results)), table_of_choice(json.loads(p.read_text())))
               for p in sorted(results.rglob("choice.json"))]
    written = verbatim("\n".join([p.read_text(errors="ignore") for p in files] + [text for _, text in choices]))
    intervals, p_values = stored_intervals(results), stored_p_values(results)
    every_row = Sources(rows_of(files, results, extra=choices))
    missing = []
    for document in DOCUMENTS:
        text = (root / document).read_text()
        passages = list(PASSAGE.finditer(text))
        for passage in passages:
            body, sources = passage.group("body"), passage.group("sources")
            missing += [f"{document}: {item}" for item in passage_unbacked(body, sources, results)]
            missing += [f"{document}: {item}" for item in statement_errors(body, passage_rows(sources, results), True)]
        for passage in reversed(passages):  # checked above, against their own sources only
            text = text[:passage.start()] + text[passage.end():]
        words = Text(text)
        for match in INTERVAL.finditer(text):
            mean, half = match.groups()
            if not backed(mean, half, written, intervals, words.negative_ok(match.start())):
                missing.append(f"{document}: {mean} +- {half}")
        for match in P_VALUE.finditer(text):
            if not p_backed(match.group(1), p_values):
                missing.append(f"{document}: {match.group(0)}")
        missing += [f"{document}: {item}" for item in statement_errors(text, every_row)]
    return missing


PASSAGE = re.compile(r"<!-- figures: (?P<sources>[^>]*?) -->\n(?P<body>.*?)<!-- /figures -->", re.S)


def passage_files(sources: str, results: Path) -> list[tuple[str, list[Path]]]:
    """(the text a source keeps its lines to, its files) of each SOURCE of "path[#text]; ...", under ``results``."""
    found = []
    for source in (s.strip() for s in sources.split(";") if s.strip()):
        path, _, only = source.partition("#")
        where = results / path.strip()
        if not where.exists():
            raise ValueError(f"figures source {source!r}: no {where}; name a file or folder under docs/results")
        found.append((only, [where] if where.is_file() else [f for f in sorted(where.rglob("*"))
                                                             if f.suffix in (".md", ".json") and "kept" not in f.parts]))
    return found


def passage_rows(sources: str, results: Path) -> Sources:
    """The table rows (and per-seed .json figures) of a passage's sources."""
    return Sources([row for only, files in passage_files(sources, results) for row in rows_of(files, results, only)])


def passage_figures(sources: str, results: Path) -> tuple[list[float], list[tuple[float, float]]]:
    """(numbers, intervals) of a passage's sources: "path[#text]; ...", paths under ``results``."""
    numbers: list[float] = []
    intervals: list[tuple[float, float]] = []
    for only, files in passage_files(sources, results):
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


def passage_unbacked(body: str, sources: str, results: Path) -> list[str]:
    """Every interval and number of ``body`` that its sources do not hold (same task and arm), with its sign."""
    numbers, intervals = passage_figures(sources, results)
    words = Text(body)
    missing = []
    for match in INTERVAL.finditer(body):
        mean, half = match.groups()
        negative_ok = words.negative_ok(match.start())
        if not any(matches(mean, m, negative_ok) and matches(half, h) for m, h in intervals):
            missing.append(f"{mean} +- {half} (not an interval of {sources})")
    rest = INTERVAL.sub(lambda m: " " * len(m.group(0)), body)
    for match in NUMBER.finditer(rest):
        negative_ok = words.negative_ok(match.start())
        if not any(matches(match.group(1), value, negative_ok) for value in numbers):
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
