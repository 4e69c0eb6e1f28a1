"""Where the plain-loop monitor writes: TensorBoard's SummaryWriter (anything with ``add_scalar``) or a CSV file.

The CSV is long: one ``step,name,value`` row per metric (the header written once, when the file is
new), appended and flushed at each measurement, so a killed run keeps what it measured and a column
set that grows (a layer sampled later) needs no rewrite. Read it back with :func:`read_csv_metrics`, which
reads a resumed run's rows in place of those the interrupted run wrote past its checkpoint.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Protocol

CSV_HEADER = ("step", "name", "value")


class ScalarWriter(Protocol):
    def add_scalar(self, tag: str, scalar_value: float, global_step: int) -> Any: ...


class CsvWriter:
    """Appends ``step,name,value`` rows to ``path`` (created with its folder if missing)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.exists() or self.path.stat().st_size == 0:
            with self.path.open("w", newline="") as handle:
                csv.writer(handle).writerow(CSV_HEADER)

    def write(self, metrics: dict[str, float], step: int) -> None:
        with self.path.open("a", newline="") as handle:
            csv.writer(handle).writerows((step, name, repr(float(value))) for name, value in metrics.items())


class ScalarWriterSink:
    """Writes each metric with ``add_scalar(name, value, step)`` and flushes when the writer can."""

    def __init__(self, writer: ScalarWriter) -> None:
        self.writer = writer

    def write(self, metrics: dict[str, float], step: int) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, step)
        if hasattr(self.writer, "flush"):
            self.writer.flush()


def sink(writer: Any) -> CsvWriter | ScalarWriterSink:
    """The sink for ``writer``: a path ending in .csv (the file is made now), or an object with add_scalar
    (a SummaryWriter)."""
    check_writer(writer)
    return CsvWriter(writer) if isinstance(writer, (str, Path)) else ScalarWriterSink(writer)


def check_writer(writer: Any) -> None:
    """Refuse a ``writer`` that :func:`sink` cannot write to, making nothing (every rank checks; one writes)."""
    if isinstance(writer, (str, Path)):
        if Path(writer).suffix.lower() != ".csv":
            raise ValueError(
                f"writer {str(writer)!r} is a path but not a .csv file; pass a path ending in .csv or a "
                "torch.utils.tensorboard.SummaryWriter"
            )
        return
    if callable(getattr(writer, "add_scalar", None)):
        return
    raise TypeError(
        f"writer must be a path ending in .csv, an object with add_scalar(tag, value, step) such as "
        f"torch.utils.tensorboard.SummaryWriter, or None (write nothing), got {type(writer).__name__}"
    )


def read_csv_metrics(path: str | Path) -> dict[str, list[tuple[int, float]]]:
    """{name: [(step, value), ...]} from a monitor CSV (this module's long format), steps increasing.

    A run resumed from a checkpoint appends again from the checkpoint's step, after the rows the interrupted
    run wrote past it. As TensorBoard does with its event files, a metric's step that goes back drops that
    metric's earlier rows from that step on: what is read is the run that continued."""
    out: dict[str, list[tuple[int, float]]] = {}
    with Path(path).open(newline="") as handle:
        rows = csv.reader(handle)
        header = tuple(next(rows, ()))
        if header != CSV_HEADER:
            raise ValueError(f"{path}: expected the header {','.join(CSV_HEADER)}, got {','.join(header)!r}")
        for step, name, value in rows:
            points = out.setdefault(name, [])
            while points and points[-1][0] >= int(step):  # written by the run that was interrupted
                points.pop()
            points.append((int(step), float(value)))
    return out
