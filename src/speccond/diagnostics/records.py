"""Records: rows of plain values that print as a table and save as JSON; and the one owner of the
metrics.jsonl format (one JSON object per line, appended as it happens) and of the JSON form of values.

Every diagnostic returns Records, one row per layer / head / projection, so results can be printed,
written to metrics.jsonl and plotted without knowing which function made them. JSON has no inf or nan:
:func:`json_value` writes them as the strings "inf", "-inf", "nan", and :func:`read_metrics` turns those
back into floats. The training harness, the tracker and the reports all write and read rows here.
"""
from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

log = logging.getLogger(__name__)
NON_FINITE = ("inf", "-inf", "nan")  # how json_value writes non-finite floats


class Records:
    """A list of dict rows with a fixed column order."""

    def __init__(self, rows: Iterable[dict[str, Any]], title: str = "") -> None:
        self.rows = [dict(r) for r in rows]
        self.title = title

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.rows[index]

    @property
    def columns(self) -> list[str]:
        seen: dict[str, None] = {}
        for row in self.rows:
            seen.update(dict.fromkeys(row))
        return list(seen)

    def where(self, **equal: Any) -> "Records":
        """The rows whose fields equal the given values."""
        return Records([r for r in self.rows if all(r.get(k) == v for k, v in equal.items())], self.title)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps([json_value(r) for r in self.rows], indent=indent)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())

    def __str__(self) -> str:
        if not self.rows:
            return f"{self.title}: no rows" if self.title else "no rows"
        columns = self.columns
        cells = [[_fmt(r.get(c)) for c in columns] for r in self.rows]
        widths = [max(len(c), *(len(line[i]) for line in cells)) for i, c in enumerate(columns)]
        render = lambda items: "  ".join(s.ljust(w) for s, w in zip(items, widths)).rstrip()  # noqa: E731
        lines = [render(columns), render(["-" * w for w in widths]), *map(render, cells)]
        return "\n".join(([self.title] if self.title else []) + lines)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.4g}"
    return str(value)


def json_value(value: Any) -> Any:
    """``value`` with non-finite floats as strings and tuples as lists, recursively through dicts and lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return value


def append_rows(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    """Append each row to a metrics.jsonl as one JSON line (the file is created if missing)."""
    with Path(path).open("a") as handle:
        for row in rows:
            handle.write(json.dumps(json_value(row)) + "\n")


def read_metrics(path: str | Path, kind: Optional[str] = None, *, as_written: bool = False) -> list[dict]:
    """The rows of a metrics.jsonl, optionally only those of one ``kind`` ([] when the file is missing).

    A last line cut short by a kill is skipped with a warning; any other unreadable line is a ValueError
    (a damaged file is never silently shortened). "inf", "-inf" and "nan" strings become floats, unless
    ``as_written`` (the harness, which writes rows it read back, keeps them as they are)."""
    path = Path(path)
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):
                log.warning("%s: skipping an incomplete last line (a run killed while writing)", path)
                continue
            raise ValueError(f"{path}, line {number}: not a JSON row ({error}); the metrics file is damaged") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}, line {number}: expected a JSON object (a metrics row), got {line[:80]!r}")
        if kind is None or row.get("kind") == kind:
            rows.append(row if as_written else {k: (float(v) if isinstance(v, str) and v in NON_FINITE else v) for k, v in row.items()})
    return rows
