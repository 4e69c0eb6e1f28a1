"""Records: rows of plain values that print as a table and save as JSON.

Every diagnostic returns Records, one row per layer / head / projection, so results can be printed,
written to metrics.jsonl and plotted without knowing which function made them.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Iterator


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
        return json.dumps([_jsonable(r) for r in self.rows], indent=indent)

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


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    """JSON has no inf or nan: write them as strings."""
    out = {}
    for key, value in row.items():
        if isinstance(value, float) and not math.isfinite(value):
            value = str(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[key] = value
    return out
