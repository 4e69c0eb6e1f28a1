"""The paper's conditioning figures from tracked runs (``speccond plot RUN_DIR ...``).

For each run directory (holding a metrics.jsonl written by :class:`Tracker`), plots over training steps,
averaged over layers: sigma_min and kappa of W_Q, W_K, W_V (effective weights), the attention entropy,
and kappa(J) when Jacobian rows were tracked. One line per run, labelled by the run's folder name (or
``label`` in its config.json), kappa on a log scale. matplotlib is imported only here.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Sequence

from speccond.diagnostics.entropy import uniform_reference
from speccond.diagnostics.records import read_metrics

ROLES = ("q", "k", "v")


def plot_runs(run_dirs: Sequence[str | Path], out_dir: str | Path) -> list[Path]:
    """Write PNGs comparing the runs; return their paths. Raises ValueError if a run has no metrics."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {_label(Path(d)): _metrics_path(Path(d)) for d in run_dirs}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []

    figure, axes = plt.subplots(2, 3, figsize=(13, 7), sharex=True)
    for label, path in runs.items():
        spectra = read_metrics(path, kind="spectra")
        for column, role in enumerate(ROLES):
            for row, field in enumerate(("sigma_min", "kappa")):
                steps, values = mean_by_step(spectra, field, projection=role)
                axes[row][column].plot(steps, values, marker="o", markersize=3, label=label)
    for column, role in enumerate(ROLES):
        axes[0][column].set_title(f"W_{role.upper()}")
        axes[0][column].set_ylabel("sigma_min (mean over layers)")
        axes[1][column].set_ylabel("kappa (mean over layers)")
        axes[1][column].set_yscale("log")
        axes[1][column].set_xlabel("training step")
        axes[0][column].set_yscale("log")
    axes[0][0].legend()
    figure.suptitle("Conditioning of the q, k, v projections (effective weights W + C)")
    figure.tight_layout()
    written.append(save_figure(figure, out / "projection_conditioning.png"))

    figure, axis = plt.subplots(figsize=(6, 4))
    for label, path in runs.items():
        steps, values = mean_by_step(read_metrics(path, kind="entropy"), "entropy")
        axis.plot(steps, values, marker="o", markersize=3, label=label)
    uniform = uniform_reference([r for p in runs.values() for r in read_metrics(p, kind="entropy")])
    if uniform is not None:
        axis.axhline(uniform, color="grey", linestyle="--", label="uniform attention")
    axis.set_xlabel("training step")
    axis.set_ylabel("attention entropy, nats (mean over layers and heads)")
    axis.legend()
    figure.tight_layout()
    written.append(save_figure(figure, out / "attention_entropy.png"))

    jacobian = {label: read_metrics(path, kind="jacobian") for label, path in runs.items()}
    if any(jacobian.values()):
        figure, axis = plt.subplots(figsize=(6, 4))
        for label, rows in jacobian.items():
            steps, values = mean_by_step(rows, "kappa_nonzero")
            axis.plot(steps, values, marker="o", markersize=3, label=label)
        axis.set_yscale("log")
        axis.set_xlabel("training step")
        axis.set_ylabel("kappa(J) over nonzero singular values")
        axis.set_title("Attention Jacobian w.r.t. W_Q, W_K, W_V")
        axis.legend()
        figure.tight_layout()
        written.append(save_figure(figure, out / "jacobian_kappa.png"))
    return written


def _metrics_path(run_dir: Path) -> Path:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise ValueError(f"{run_dir} has no metrics.jsonl; expected a run directory written by a Tracker")
    return path


def _label(run_dir: Path) -> str:
    config = run_dir / "config.json"
    if config.is_file():
        label = json.loads(config.read_text()).get("label")
        if label:
            return str(label)
    return run_dir.name


def mean_by_step(rows: list[dict], field: str, **equal) -> tuple[list[int], list[float]]:
    """(steps, mean of ``field`` at each step) over the rows whose fields equal ``equal`` (e.g. the layers of
    one projection), skipping values that are not finite numbers: the curve every training plot draws."""
    by_step: dict[int, list[float]] = defaultdict(list)
    for row in rows:
        if all(row.get(k) == v for k, v in equal.items()) and finite_number(row.get(field)):
            by_step[int(row["step"])].append(float(row[field]))
    steps = sorted(by_step)
    return steps, [sum(by_step[s]) / len(by_step[s]) for s in steps]


def finite_number(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def save_figure(figure, path: Path) -> Path:
    """Lay out (unless the figure was made with a layout engine of its own), write (110 dpi) and close
    ``figure``; return ``path``."""
    import matplotlib.pyplot as plt

    if figure.get_layout_engine() is None:
        figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
