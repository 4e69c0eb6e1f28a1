"""What a quoted figure stands for, checked against the source row it comes from (used by audit_numbers.py).

A figure in the docs is a claim about one cell of a committed table: an arm's difference on a task, its
Holm p, its verdict, one seed's score. audit_numbers.py checks that the number exists; this module checks
that it is the right one, by what sits beside it:

- **Sign** (applied by audit_numbers.py, with :meth:`Text.negative_ok`). A quoted "-0.54" or "+0.52" must
  match the source's sign. A number written without a sign stands for a positive one, unless the words
  that govern it say the direction ("loses 25.7 +- 4.0", "22.10 points behind"): its table cell with the
  column's header, else the parenthesis around it, else its sentence (parenthesised asides left out), so
  "loses (6.0 +- 3.7, Holm p 0.0331)" must write -6.0.
- **The arm.** In a doc's table row, a figure must be in a source row that names the doc row's first cell
  (its arm: "lam = 10 on q only", also within "qk-norm - baseline (paired)") wherever a source table
  holding the figure names that arm; in a figures passage, every number of such a row, not only its
  intervals. Another arm's figure in the row fails even where it exists for that arm.
- **The row.** An interval quoted with a p-value beside it ("-6.0 +- 3.7 (Holm p 0.0331)", "(-0.98 +- 0.57,
  Holm 0.0267)", "-6.0 +- 3.7 (0.0331)", or the Holm column of the doc's table row) must find one source
  row that holds both: the interval and that p in its "Holm p" column ("p" for "p 0.011"; either for a bare
  number). A Holm p taken from another row, task or arm fails even where the number exists elsewhere.
- **The verdict.** A verdict word beside an interval (", loss" after it, "a tie", "loses"/"ties at"/"is
  behind" just before it, the verdict column of the doc's row) must be what the project's one definition,
  ``speccond.harness.verdict`` (Holm p < 0.05: win or loss by the sign, else tie), gives for the quoted
  Holm p, or for the Holm p of a source row holding the interval. "ahead"/"behind" are win/loss against a
  peer. A verdict word just before a Holm p ("a tie (0.143)") must follow from that p.
- **Seeds.** "80.88 % on test (seed 101: 80.68 %, seed 102: 81.95 %, ...)" and a table cell of per-seed
  scores under a header naming the seeds ("per seed (100 to 104)") must be one arm's row group of one
  source table (rows that share their first cell), each score in the row of its own seed, in one column.

Sources are rows of the markdown tables under docs/results/ (each row keyed by its first cell) and the
per-seed figures of their .json files ({"100": 0.323, ...}, under the key that names the arm). Nothing here
lists numbers or arms: the binding is read from the tables' headers and the text around each figure.
"""
from __future__ import annotations

import bisect
import json
import re
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from speccond.harness import verdict  # noqa: E402  (the project's one verdict rule)

NUM = r"\d+(?:\.\d+)?(?:e-\d+)?"
NUMBER = re.compile(r"(?<![\w.])([-+]?\d+\.\d+|\d+(?=\s?%))(?![\w.])")
INTERVAL = re.compile(r"(?<![\w.])([-+]?\d+(?:\.\d+)?)\s*\+-\s*(\d+(?:\.\d+)?)(?![\w.])")
VERDICTS = {"win": "win", "wins": "win", "won": "win", "ahead": "win",
            "loss": "loss", "loses": "loss", "lose": "loss", "lost": "loss", "behind": "loss",
            "tie": "tie", "ties": "tie", "tied": "tie"}
# a verb just before an interval, with at most a short gap (no other figure) in between: "loses", "ties at"
VERDICT_BEFORE = re.compile(r"\b(wins?|won|loses|lose|lost|ties|tied|ahead|behind)\b(?P<gap>[^;:.)0-9]{0,40})$")
VERDICT_AFTER = re.compile(r"^(?:\s*(?:test\s+)?points?)?\s*(?:\([^()]*\))?\s*,\s*(?:a\s+|an\s+)?(win|loss|tie)\b")
# a p-value beside an interval: "(Holm p 0.0331)", "on CIFAR-10 (Holm 0.000203)", ", Holm 0.0267)", "(0.0331)"
P_AFTER = re.compile(rf"^(?P<gap>[^()+;]{{0,60}}?)[(,]\s*(?P<label>Holm\s+p|Holm|adjusted\s+p|adjusted|p)\s*=?\s*"
                     rf"(?P<value>{NUM})(?P<rest>[^()]*)\)")
BARE_P_AFTER = re.compile(rf"^(?:\s*(?:test\s+)?points?)?\s*\((?P<value>0\.\d+(?:e-\d+)?)\)")
VERDICT_BEFORE_P = re.compile(rf"\b(win|wins|loss|loses|tie|ties)\s*\((?:Holm\s+p\s+|Holm\s+|adjusted\s+p\s+)?(0\.\d+(?:e-\d+)?)\)")
NEGATIVE = re.compile(r"\b(?:lose|loses|lost|losing|loss|losses|behind|below|cost|costs|drops?|dropped|falls?|fell"
                      r"|worse|short)\b", re.I)
SEED_GROUP = re.compile(rf"(?:(?P<lead>{NUM})\s*%?[^()\d]{{0,12}})?\((?P<items>seed\s+\d+:\s*{NUM}\s*%?"
                        rf"(?:,\s*seed\s+\d+:\s*{NUM}\s*%?)*)\)")
SEED_ITEM = re.compile(rf"seed\s+(\d+):\s*({NUM})")
SENTENCE_BOUNDARY = re.compile(r"[.!?](?=\s)|\n\s*\n|\n\s*(?:[-*]|\d+\.)\s|\n(?=\|)|(?<=\|)\n")


def decimals(text: str) -> int:
    """The decimal places ``text`` is written to: 2 for "0.54", 8 for "4.12e-06"."""
    mantissa, _, exponent = text.lower().partition("e")
    return (len(mantissa.split(".")[1]) if "." in mantissa else 0) - int(exponent or 0)


def matches(quoted: str, value: float, negative_ok: bool = True) -> bool:
    """Whether ``value`` (as stored, or times 100: fractions shown as percent) rounds to ``quoted`` at its
    decimals, sign included: a quotation without a sign is a positive number, or a magnitude where
    ``negative_ok`` (its words say the direction)."""
    a = float(quoted)
    tolerance = 0.5 * 10 ** -decimals(quoted) + 1e-9 * max(1.0, abs(a))
    for v in (value, value * 100):
        if abs(v) <= tolerance and abs(a) <= tolerance:
            return True
        if quoted[0] not in "+-" and (v >= 0 or negative_ok):
            v = abs(v)
        if abs(v - a) <= tolerance:
            return True
    return False


def first_number(cell: str) -> float | None:
    found = re.match(rf"\s*\**([-+]?{NUM})", cell)
    return float(found.group(1)) if found else None


@dataclass(frozen=True)
class Row:
    """One row of a table in a results file. Rows of one table share ``table``; ``label`` (the first cell)
    names what the row is about: an arm, a method, a run."""
    table: str
    label: str
    headers: tuple[str, ...]
    cells: tuple[str, ...]

    @cached_property
    def names(self) -> frozenset[str]:
        """The row's cells that are words, not figures: its arm, method, task, setting (as :func:`name` reads them)."""
        return frozenset(name(c) for c in self.cells if re.search(r"[a-z]", re.sub(NUM, "", c.lower())))

    def named(self, label: str) -> bool:
        """Whether a cell of the row names ``label`` (a key), alone or within ("qk-norm - baseline (paired)")."""
        pattern = re.compile(rf"(?<![\w-]){re.escape(label)}(?![\w-])")
        return any(pattern.search(key) for key in self.names)

    @cached_property
    def numbers(self) -> list[float]:
        return [float(m.group(1)) for cell in self.cells for m in NUMBER.finditer(cell)]

    def cell(self, wanted) -> str | None:
        for header, cell in zip(self.headers, self.cells):
            if wanted(header.lower()):
                return cell
        return None

    @cached_property
    def intervals(self) -> list[tuple[float, float]]:
        return [(float(a), float(b)) for cell in self.cells for a, b in INTERVAL.findall(cell)]

    def p_value(self, label: str) -> list[float]:
        """The row's p-values a quotation labelled ``label`` can stand for: its Holm p for "Holm" or
        "adjusted", its raw p for "p", either for a bare number."""
        holm = self.cell(lambda h: "holm" in h or "adjusted" in h)
        raw = self.cell(lambda h: h == "p")
        wanted = {"": [holm, raw], "p": [raw]}.get(label, [holm])
        return [v for v in (first_number(c) for c in wanted if c) if v is not None]

    @property
    def holm(self) -> float | None:
        cell = self.cell(lambda h: "holm" in h or "adjusted" in h)
        return first_number(cell) if cell else None

    @property
    def verdict(self) -> str | None:
        cell = self.cell(lambda h: h == "verdict")
        return VERDICTS.get(cell.strip()) if cell else None

    @property
    def seed(self) -> int | None:
        cell = self.cell(lambda h: h == "seed")
        return int(cell) if cell and cell.strip().isdigit() else None


def name(cell: str) -> str:
    """A table cell as a key: "**lam = auto (kappa <= 2)**" and "lam = auto (kappa <= 2)" are one."""
    return re.sub(r"[*`\s]+", " ", cell).strip().lower()


def split_cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def table_rows(text: str, name: str, only: str = "") -> list[Row]:
    """Every row of the markdown tables in ``text``; with ``only``, the rows whose line holds it or whose
    table's caption (the line above it) does."""
    rows, header, caption, index, previous = [], None, "", 0, ""
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            if line.strip():
                previous = line
            continue
        cells = split_cells(line)
        if header is None:
            header, caption, index = tuple(cells), previous, index + 1
            continue
        if all(set(c) <= set("-: ") for c in cells):
            continue
        if not only or only in line or only in caption:
            rows.append(Row(f"{name}#{index}", cells[0], header, tuple(cells)))
    return rows


def seed_rows(value, name: str, key: str = "") -> Iterable[Row]:
    """Rows of per-seed figures in a .json record: every object whose keys are all seeds ({"100": 0.323, ...})
    gives one row per seed, labelled by the key that holds it (the arm)."""
    if isinstance(value, dict):
        if value and all(k.isdigit() for k in value) and all(isinstance(v, (int, float)) for v in value.values()):
            for seed, figure in value.items():
                yield Row(f"{name}:{key}", key, ("arm", "seed", "figure"), (key, seed, repr(float(figure))))
            return
        for k, v in value.items():
            yield from seed_rows(v, name, key if k == "figures" else k)
    elif isinstance(value, list):
        for item in value:
            yield from seed_rows(item, name, key)


def rows_of(files: Iterable[Path], results: Path, only: str = "", extra: Iterable[tuple[str, str]] = ()) -> list[Row]:
    """The rows of ``files`` (.md tables, .json per-seed figures) and of ``extra`` ((name, markdown) pairs)."""
    rows: list[Row] = []
    for file in files:
        name = str(file.relative_to(results))
        if file.suffix == ".md":
            rows += table_rows(file.read_text(), name, only)
        elif file.suffix == ".json" and not only:
            rows += list(seed_rows(json.loads(file.read_text()), name))
    for name, text in extra:
        rows += table_rows(text, name, only)
    return rows


def table_cell(text: str, position: int) -> tuple[list[str], list[str], int] | None:
    """(the table's header cells, the row's cells, the column) where ``position`` lies in a markdown table row."""
    line_start = text.rfind("\n", 0, position) + 1
    if not text.startswith("|", line_start):
        return None
    header_start = line_start
    while header_start > 0 and text.startswith("|", text.rfind("\n", 0, header_start - 1) + 1):
        header_start = text.rfind("\n", 0, header_start - 1) + 1
    line_end = text.find("\n", position)
    cells = split_cells(text[line_start:len(text) if line_end < 0 else line_end])
    return split_cells(text[header_start:text.find("\n", header_start)]), cells, text[line_start:position].count("|") - 1


def _unmatched(text: str, indices: range, wanted: str, other: str) -> int | None:
    """The first index of ``indices`` (walked in their order) holding a ``wanted`` bracket that no ``other``
    met on the way closes: the parenthesis around a position, walked outwards."""
    depth = 0
    for i in indices:
        if text[i] == other:
            depth += 1
        elif text[i] == wanted:
            if depth == 0:
                return i
            depth -= 1
    return None


class Text:
    """A document's text with its sentence boundaries, to find the words that govern a figure."""

    def __init__(self, text: str):
        self.text = text
        self.starts = [0] + [m.end() for m in SENTENCE_BOUNDARY.finditer(text)]

    def sentence(self, position: int) -> tuple[int, int]:
        i = bisect.bisect_right(self.starts, position) - 1
        end = self.starts[i + 1] if i + 1 < len(self.starts) else len(self.text)
        return self.starts[i], end

    def scope(self, position: int) -> str:
        """The words that govern the figure at ``position``: its table cell with the column's header, else
        the innermost parenthesis around it, else its sentence; nested parentheses left out."""
        text = self.text
        in_table = table_cell(text, position)
        if in_table:
            header, cells, column = in_table
            return (header[column] if column < len(header) else "") + " | " + (cells[column] if column < len(cells) else "")
        start, end = self.sentence(position)
        opened = _unmatched(text, range(position - 1, start - 1, -1), "(", ")")
        if opened is not None:
            close = _unmatched(text, range(position, end), ")", "(")
            start, end = opened + 1, end if close is None else close
        inner = text[start:end]
        while True:
            stripped = re.sub(r"\([^()]*\)", " ", inner)
            if stripped == inner:
                return inner
            inner = stripped

    def negative_ok(self, position: int) -> bool:
        """Whether a figure written without a sign at ``position`` may stand for a negative one: the words
        that govern it say the direction ("loses", "behind", "below")."""
        return bool(NEGATIVE.search(self.scope(position)))

    def before(self, position: int, floor: int) -> str:
        """The text of the figure's sentence before ``position``, from ``floor`` on."""
        return self.text[max(self.sentence(position)[0], floor):position]


class Sources:
    """The rows a passage's figures stand for, indexed by their intervals' half widths and by seed."""

    def __init__(self, rows: list[Row]):
        self.rows = rows
        self.by_half: dict[int, list[tuple[Row, float, float]]] = {}
        for row in rows:
            for m, h in row.intervals:
                for scale in (1.0, 100.0):
                    self.by_half.setdefault(int(abs(h) * scale * 10), []).append((row, m, h))
        self.by_name: dict[str, list[Row]] = {}
        for row in rows:
            for key in row.names:
                self.by_name.setdefault(key, []).append(row)
        self.seed_groups: dict[tuple[str, str], dict[int, Row]] = {}
        for row in rows:
            if row.seed is not None:
                self.seed_groups.setdefault((row.table, row.label), {})[row.seed] = row

    def interval_rows(self, mean: str, half: str, negative_ok: bool) -> list[tuple[Row, float]]:
        """The rows holding the interval "mean +- half", each with the matched mean as stored (signed)."""
        b, tolerance = float(half), 0.5 * 10 ** -decimals(half)
        found: dict[int, tuple[Row, float]] = {}
        for key in range(int((b - tolerance) * 10) - 1, int((b + tolerance) * 10) + 2):
            for row, m, h in self.by_half.get(key, ()):
                if id(row) not in found and matches(half, h) and matches(mean, m, negative_ok):
                    found[id(row)] = (row, m)
        return list(found.values())


def statement_errors(text: str, sources: Sources, every_number: bool = False) -> list[str]:
    """Every quoted figure of ``text`` (a document, or one figures passage of it) whose row, Holm p, verdict
    or seed does not follow from the source rows it stands for; with ``every_number`` (a figures passage),
    every number of a table row that names a source row's arm, not its intervals alone."""
    document = Text(text)
    errors: list[str] = []
    previous_end = 0
    for match in INTERVAL.finditer(text):
        mean, half = match.groups()
        quoted = f"{mean} +- {half}"
        negative_ok = document.negative_ok(match.start())
        candidates = sources.interval_rows(mean, half, negative_ok)
        label = _row_label(text, match.start())
        if label in sources.by_name:  # a table that names this row's arm must hold the figure in its row
            tables = {r.table for r in sources.by_name[label]}
            if any(r.table in tables for r, _ in candidates) and not any(r.named(label) for r, _ in candidates):
                errors.append(f"{quoted}: not in a row of {label!r}")
            candidates = [(r, m) for r, m in candidates if r.named(label)] or candidates
        after = text[match.end():match.end() + 200].split("\n|")[0]
        if text.startswith("|", text.rfind("\n", 0, match.start()) + 1):
            after = after.split("|")[0]
        label, p = _p_beside(after)
        row_p, row_verdict = _row_columns(text, match.start())
        if p is None and row_p is not None:
            label, p = "holm", row_p
        if p is not None and candidates:
            with_p = [(r, m) for r, m in candidates if any(matches(p, v) for v in r.p_value(label))]
            if any(r.p_value(label) for r, _ in candidates) and not with_p:
                errors.append(f"{quoted}: {'Holm ' if label == 'holm' else ''}p {p} is not in the row that holds it")
            candidates = with_p or candidates
        word = _verdict_beside(document, match, previous_end, after) or row_verdict
        if word:
            errors += _verdict_errors(quoted, mean, word, label, p, candidates)
        previous_end = match.end()
    for match in VERDICT_BEFORE_P.finditer(text):
        word, p = VERDICTS[match.group(1)], match.group(2)
        if verdict(-1.0 if word == "loss" else 1.0, float(p)) != word:
            possible = " or ".join(sorted({verdict(1.0, float(p)), verdict(-1.0, float(p))}))
            errors.append(f"{match.group(0)}: a Holm p of {p} makes it a {possible}")
    errors += seed_errors(text, sources.seed_groups)
    if every_number:
        errors += row_number_errors(document, sources)
    return errors


def _row_label(text: str, position: int) -> str | None:
    """The first cell of the doc's table row at ``position`` (what the row is about), as a key."""
    in_table = table_cell(text, position)
    return name(in_table[1][0]) if in_table and in_table[2] > 0 else None


def row_number_errors(document: Text, sources: Sources) -> list[str]:
    """Numbers of the doc's table rows that name a source row (their first cell) and that no such row holds."""
    errors = []
    text = document.text
    blank = INTERVAL.sub(lambda m: " " * len(m.group(0)), text)  # intervals are checked as pairs above
    for match in NUMBER.finditer(blank):
        label = _row_label(text, match.start())
        if label not in sources.by_name:
            continue
        negative_ok = document.negative_ok(match.start())
        if not any(matches(match.group(1), v, negative_ok) for row in sources.by_name[label] for v in row.numbers):
            errors.append(f"{match.group(1)}: not in a row of {label!r}")
    return errors


def _p_beside(after: str) -> tuple[str, str | None]:
    """("holm" | "p" | "", the value) of the p-value quoted right after an interval, if one is."""
    found = P_AFTER.match(after)
    if found and "+-" not in found.group("gap") and not re.search(r"\d\.\d", found.group("rest")):
        return ("p" if found.group("label") == "p" else "holm"), found.group("value")
    found = BARE_P_AFTER.match(after)
    return ("", found.group("value")) if found else ("", None)


def _verdict_beside(document: Text, match: re.Match, previous_end: int, after: str) -> str | None:
    found = VERDICT_AFTER.match(after)
    if found:
        return VERDICTS[found.group(1)]
    before = document.before(match.start(), previous_end)
    if "|" in before:
        before = before.rsplit("|", 1)[1]
    found = VERDICT_BEFORE.search(before)
    return VERDICTS[found.group(1)] if found else None


def _row_columns(text: str, position: int) -> tuple[str | None, str | None]:
    """(Holm p, verdict) of the doc's table row where the interval at ``position`` sits in its "difference"
    column and the table has "Holm p" and "verdict" columns of their own."""
    in_table = table_cell(text, position)
    if not in_table:
        return None, None
    header, cells, column = in_table
    header = [h.lower() for h in header]
    if len(cells) != len(header) or "difference" not in header[column]:
        return None, None
    holm = next((cells[i] for i, h in enumerate(header) if h.startswith("holm p") or h == "adjusted p"), None)
    word = next((cells[i] for i, h in enumerate(header) if h == "verdict"), None)
    holm_value = re.match(rf"({NUM})", holm) if holm else None
    return (holm_value.group(1) if holm_value else None), (VERDICTS.get(word) if word else None)


def _verdict_errors(quoted, mean, word, label, p, candidates) -> list[str]:
    """The verdict ``word`` against the quoted Holm p, else against the Holm p of the rows holding the interval."""
    if label == "holm" and p is not None:
        signs = [float(mean)] if mean[0] in "+-" else [m for _, m in candidates] or [float(mean)]
        if not any(verdict(m, float(p)) == word for m in signs):
            return [f"{quoted}: '{word}' beside Holm p {p}, which makes it a {verdict(signs[0], float(p))}"]
        return []
    known = [(verdict(m, r.holm) if r.holm is not None else r.verdict) for r, m in candidates]
    known = [k for k in known if k]
    if known and word not in known:
        return [f"{quoted}: '{word}', where the Holm p of its source row makes it a {known[0]}"]
    return []


def seed_errors(text: str, groups: dict[tuple[str, str], dict[int, Row]]) -> list[str]:
    """Per-seed scores that are not one arm's rows of one table (``groups``: {(table, label): {seed: row}}),
    each in its own seed's row."""
    errors = []
    flat = re.sub(r"\s+", " ", text)
    for match in SEED_GROUP.finditer(flat):
        items = [(int(s), v) for s, v in SEED_ITEM.findall(match.group("items"))]
        if not _one_group(items, match.group("lead"), groups):
            errors.append(f"{match.group(0)}: not one arm's scores at these seeds in one table")
    for header, cell in _seed_cells(text):
        seeds = _header_seeds(header)
        values = [v.strip() for v in cell.split(",")]
        if len(seeds) == len(values) and not _one_group(list(zip(seeds, values)), None, groups):
            errors.append(f"{cell} (per seed, {header}): not one arm's scores at these seeds in one table")
    return errors


def _one_group(items: list[tuple[int, str]], lead: str | None, groups: dict[tuple[str, str], dict[int, Row]]) -> bool:
    """Whether one arm's rows of one table hold every (seed, score), in one column, and ``lead`` at another seed."""
    for by_seed in groups.values():
        if not all(seed in by_seed for seed, _ in items):
            continue
        for column in range(len(by_seed[items[0][0]].cells)):
            if all(_holds(by_seed[seed], column, value) for seed, value in items) and (
                    lead is None or any(_holds(row, column, lead) for seed, row in by_seed.items()
                                        if seed not in dict(items))):
                return True
    return False


def _holds(row: Row, column: int, value: str) -> bool:
    number = first_number(row.cells[column]) if column < len(row.cells) else None
    return number is not None and matches(value, number, False)


def _seed_cells(text: str) -> Iterable[tuple[str, str]]:
    """(header, cell) of every table cell that lists per-seed scores under a header naming the seeds."""
    header = None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = split_cells(line)
        if header is None:
            header = cells
            continue
        for h, cell in zip(header, cells):
            if "seed" in h and re.fullmatch(rf"{NUM}(?:,\s*{NUM})+", cell):
                yield h, cell


def _header_seeds(header: str) -> list[int]:
    """The seeds a column's header names: "(100 to 104)", "(seed 0, seed 1)"."""
    found = re.search(r"(\d+) to (\d+)", header)
    if found:
        return list(range(int(found.group(1)), int(found.group(2)) + 1))
    return [int(s) for s in re.findall(r"seed (\d+)", header)]
