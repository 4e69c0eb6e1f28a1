"""Tracker: conditioning diagnostics over training, appended to metrics.jsonl as they are taken.

    tracker = speccond.diagnostics.Tracker(model, probe, every=200, path=run_dir / "metrics.jsonl")
    for step in range(steps):
        ...
        tracker.step(step)

Each measurement appends one JSON line per row, tagged with ``step`` and ``kind`` ("spectra",
"entropy", and "jacobian" when asked). Projection spectra are one row per projection (whole q, k, v
blocks) to keep the file small, each with ``head_kappa_max``, the largest kappa of one head's rows of that
block (the figure a correction sized per head bounds); entropy is per head on the probe batch.

Under torch.distributed (DDP, FSDP2) make it, and call ``step``, on every rank: every rank measures (a
sharded weight is gathered by a collective all ranks must join) and returns its rows, and rank 0 alone
appends them (speccond.ranks), so a path all ranks name gets each row once.
"""
from __future__ import annotations

import logging
import numbers
from pathlib import Path
from typing import Optional, Sequence

from torch import nn

from speccond.checks import received, require_module
from speccond.diagnostics.entropy import attention_entropy
from speccond.diagnostics.heads import measured_layers
from speccond.diagnostics.layer_jacobian import jacobian_rows
from speccond.diagnostics.records import append_rows
from speccond.diagnostics.spectra import projection_spectra
from speccond.ranks import writes_files

log = logging.getLogger(__name__)


class Tracker:
    """Measures ``model`` on a fixed ``probe`` batch every ``every`` steps and appends rows to ``path``.

    Args:
        model: the model being trained (conditioned or not).
        probe: a tuple of model inputs (a small fixed batch).
        every: measure when ``step % every == 0``.
        path: the metrics.jsonl to append to (created with its folder if missing).
        spectra: measure the projections' spectra (needs q, k, v that the weights tell: no hook that
            changes a projection's output, such as qk-norm's; diagnostics.spectra_refusal says why not).
        entropy: also measure attention entropy (needs a model the head diagnostics support).
        jacobian: also estimate kappa(J) w.r.t. the weights of head 0 of every layer, matrix-free with
            ``jacobian_iterations`` Lanczos steps (about 1 s per ViT-tiny head here).
        layers: the attention layers entropy and kappa(J) are measured on (default every one). Checked here,
            before any step: where the head diagnostics refuse a layer (an attention pooling head, say), the
            error names the ``layers=`` that measures the others.
    """

    def __init__(
        self,
        model: nn.Module,
        probe: tuple,
        every: int = 200,
        path: str | Path = "metrics.jsonl",
        entropy: bool = True,
        jacobian: bool = False,
        jacobian_iterations: int = 50,
        spectra: bool = True,
        layers: Optional[Sequence[int]] = None,
    ) -> None:
        require_module(model, "speccond.diagnostics.Tracker")
        if isinstance(every, bool) or not isinstance(every, numbers.Integral) or every < 1:
            raise ValueError(f"Tracker.every must be >= 1, an int (measure every that many steps), got {received(every)}")
        every = int(every)  # a numpy integer too
        self.layers = measured_layers(model, layers, "Tracker") if entropy or jacobian else None
        self.model = model
        self.probe = probe if isinstance(probe, tuple) else (probe,)
        self.every = every
        self.path = Path(path)
        self.spectra = spectra
        self.entropy = entropy
        self.jacobian = jacobian
        self.jacobian_iterations = jacobian_iterations

    def step(self, step: int) -> Optional[list[dict]]:
        """Measure and append when ``step`` is due; return the rows written (None when not due)."""
        if step % self.every:
            return None
        return self.measure(step)

    def measure(self, step: int) -> list[dict]:
        rows = []
        if self.spectra:
            rows += [dict(row, kind="spectra") for row in block_rows(projection_spectra(self.model, per_head=True))]
        if self.entropy:
            rows += [dict(row, kind="entropy") for row in attention_entropy(self.model, self.probe, self.layers)]
        if self.jacobian:
            measured = jacobian_rows(self.model, self.probe, self.layers, max_iter=self.jacobian_iterations)
            rows += [dict(row, kind="jacobian") for row in measured]
        rows = [dict(row, step=step) for row in rows]
        if writes_files():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            append_rows(self.path, rows)
        log.debug("tracked %d rows at step %d", len(rows), step)
        return rows


def block_rows(spectra) -> list[dict]:
    """The whole-block rows of per-head ``spectra`` (projection_spectra), each with ``head_kappa_max``: the
    largest kappa among its heads' rows."""
    heads: dict[tuple, float] = {}
    for row in spectra:
        if row["head"] is not None:
            key = (row["layer"], row["module"], row["projection"])
            heads[key] = max(heads.get(key, 0.0), float(row["kappa"]))
    return [dict(row, head_kappa_max=heads.get((row["layer"], row["module"], row["projection"])))
            for row in spectra if row["head"] is None]
