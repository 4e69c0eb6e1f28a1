"""SpectralReport: what was conditioned and what it did to the condition numbers.

One row per conditioned projection (q, k or v block). kappa is computed in float64 on the logical
(out_block, in) block: ``kappa_w`` of the stored trainable weight W, ``kappa_eff`` of W + C, and
``head_kappas_eff`` the kappa of W + C on each head's rows (``head_kappa_eff_max`` the largest).

Which figure to read: a correction sized per head (``per_head``: the SVD correction with
granularity="head", or lam="auto" per head) bounds each head's kappa, not the block's: the heads' rows
are conditioned separately, so the block's kappa can stay in the hundreds while every head is below 2.
The text then says so under the table.

The report ``speccond.apply`` returns computes its spectra on first read (``rows``, iteration, ``str``,
``to_dict``; ``len`` does not need them) or by :meth:`SpectralReport.compute`, not on attach: a ViT-B
holds 504 blocks and heads, whose float64 SVDs were 90 % of apply's time. Each matrix's singular values
are computed once, in one call per block: the stored and the effective block together, then its heads
(``speccond.core.spectral.spectra``); the rows are kept, so reading again computes nothing. Work past
2 s logs its progress (``speccond.progress``). The figures are those of the weights as attached; if the
conditioned weights change before the first read (a training step, refresh, remove), reading refuses with
what to do instead of reporting other weights' figures.

The ``correction`` column names the correction and its lam: "identity lam=10", or for lam="auto" the
lam it chose from the weights, "identity lam=auto(3.1)" (one value: every head carries it) or
"identity lam=auto(2.9..3.4)" (per head: smallest..largest; ``head_lams`` lists them). A k block corrected by
lam R_h per head (``SpectralConfig(key_basis="orthogonal")``) reads "rotated lam=10".
"""
from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass
from typing import Iterator, Optional

import torch

from speccond.core.backends import Attachment, attachments
from speccond.core.config import AUTO
from speccond.core.sharded import gathered
from speccond.core.spectral import spectra
from speccond.progress import tracked

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReportRow:
    module: str
    parameter: str
    role: str
    layout: str
    shape: tuple[int, ...]
    block_shape: tuple[int, int]
    heads: int
    correction: str
    scale: float  # size of C on the block: lam (the largest head's lam under "auto"); svd: sigma_max(W)
    backend: str
    kappa_w: float
    kappa_eff: float
    head_kappa_eff_max: float
    notes: tuple[str, ...] = ()
    head_lams: tuple[float, ...] = ()  # identity, rotated: lam on each head's slice of C (0.0: none there); svd: ()
    head_kappas_eff: tuple[float, ...] = ()  # kappa of W + C on each head's rows, head 0 first
    per_head: bool = False  # C is sized per head (svd/head, lam="auto" per head): it bounds each head's kappa


class SpectralReport:
    """Rows describing every conditioned projection, and the config that made them.

    ``SpectralReport(rows, config)`` holds its rows; ``speccond.apply``'s report holds a
    :class:`PendingRows` instead and computes them on first read (module docstring)."""

    def __init__(self, rows: Optional[list[ReportRow]] = None, config: Optional[dict] = None,
                 pending: Optional[PendingRows] = None) -> None:
        if rows is not None and pending is not None:
            raise ValueError("SpectralReport takes rows or pending rows, not both")
        self._rows = None if pending is not None else list(rows or [])
        self._pending = pending
        self.config = config

    @property
    def rows(self) -> list[ReportRow]:
        if self._rows is None:
            self._rows = self._pending.compute()
            self._pending = None
        return self._rows

    @rows.setter
    def rows(self, rows: list[ReportRow]) -> None:
        self._rows, self._pending = list(rows), None

    def compute(self) -> SpectralReport:
        """Compute the spectra now (if not yet done), e.g. right after apply and before training; returns self."""
        self.rows
        return self

    def __len__(self) -> int:
        return self._pending.count if self._rows is None else len(self._rows)

    def __iter__(self) -> Iterator[ReportRow]:
        return iter(self.rows)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SpectralReport):
            return NotImplemented
        return self.rows == other.rows and self.config == other.config

    def __repr__(self) -> str:
        rows = f"<{len(self)} rows, spectra not yet computed>" if self._rows is None else repr(self._rows)
        return f"SpectralReport(rows={rows}, config={self.config!r})"

    def to_dict(self) -> dict:
        return {"config": self.config, "rows": [_finite(asdict(r)) for r in self.rows]}

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __str__(self) -> str:
        if not self.rows:
            return "SpectralReport: nothing conditioned"
        header = ("module", "param", "qkv", "layout", "block", "heads", "correction", "backend", "kappa W",
                  "kappa W+C (block)", "kappa per head (max)")
        lines = [
            (r.module, r.parameter, r.role, r.layout, "x".join(map(str, r.block_shape)), str(r.heads),
             r.correction, r.backend, _fmt(r.kappa_w), _fmt(r.kappa_eff), _fmt(r.head_kappa_eff_max))
            for r in self.rows
        ]
        widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
        render = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
        out = [render(header), render(["-" * w for w in widths]), *map(render, lines)]
        if any(r.per_head for r in self.rows):
            out.append(PER_HEAD_NOTE)
        if any(math.isinf(k) for r in self.rows for k in (r.kappa_w, r.kappa_eff, r.head_kappa_eff_max)):
            out.append(INF_NOTE)
        notes = sorted({n for r in self.rows for n in r.notes})
        out += [f"note: {n}" for n in notes]
        return "\n".join(out)


PER_HEAD_NOTE = (
    "note: the correction is sized per head here, so it bounds each head's kappa (kappa per head (max)), "
    "not the block's: kappa W+C (block) is that of the q, k or v block with all its heads' rows together, "
    "which the per-head correction does not condition; read the per-head figure"
)


INF_NOTE = (
    "note: kappa inf: sigma_min cannot be told from zero within the rounding of the weights' dtype "
    "(speccond.core.spectral.is_numerically_singular): the matrix is singular, or its kappa is beyond what "
    "that dtype resolves (a few hundred for a bfloat16 weight such as ViT-Ti's at initialisation)"
)


class PendingRows:
    """The rows of a report whose spectra are computed on first read, from the attachments as they were
    at attach time: reading refuses if a conditioned weight or correction changed (or came off) since."""

    def __init__(self, found: list[Attachment]) -> None:
        self.found = found
        self.count = sum(1 for item in found for lam in item.correction.scales.values() if lam != 0)
        self.state = [_state(item) for item in found]

    def compute(self) -> list[ReportRow]:
        for item, state in zip(self.found, self.state):
            if not _still_attached(item) or _state(item) != state:
                raise ValueError(
                    f"this report's spectra are computed on first read, and {item.qualified_name} has changed "
                    "since speccond.apply (trained, refreshed or removed), so they would describe other weights; "
                    "speccond.describe(model) reports the model as it stands now; to keep the figures at attach "
                    "time, call report.compute() right after apply"
                )
        return rows_of(self.found)


def _state(item: Attachment) -> tuple:
    """What changes when a conditioned weight or its correction is written: the stored W (object and
    version counter, which every in-place write such as an optimiser step increments) and C's buffers."""
    stored = item.stored_weight()
    return (id(stored), stored._version, tuple((id(b), b._version) for b in item.correction.buffers()))


def _still_attached(item: Attachment) -> bool:
    return any(found.correction is item.correction for found in attachments(item.module))


def rows_of(found: list[Attachment]) -> list[ReportRow]:
    """The rows of every attachment, in order; long work logs its progress (speccond.progress)."""
    what = "speccond report: spectra of %d/%d conditioned parameters"
    return [row for item in tracked(found, log, what) for row in rows_for(item)]


def rows_for(found: Attachment) -> list[ReportRow]:
    """One row per corrected role of an attachment. Each matrix's spectrum is computed once: the stored
    block's (kappa_w, and the svd correction's scale), the effective block's, and its heads' in one call."""
    correction = found.correction
    layout = correction.layout
    stored = layout.out_in(gathered(found.stored_weight().detach()))  # (out, in), whole under FSDP2
    effective = layout.out_in(gathered(found.effective_weight().detach()))  # (out, in)
    head_out = layout.head_dim(correction.out_features)
    rows = []
    for role, lam in correction.scales.items():
        if lam == 0:
            continue
        head_lams: tuple[float, ...] = ()
        index = layout.block_rows(role, correction.out_features).to(stored.device)
        eff_block = effective[index]  # (width, in)
        if stored.dtype == eff_block.dtype:  # one call; each keeps its dtype's rounding threshold
            plain, conditioned = spectra(torch.stack([stored[index], eff_block]))  # (2, width, in): W, W + C
        else:
            (plain,), (conditioned,) = spectra(stored[index]), spectra(eff_block)
        by_head = eff_block.reshape(layout.heads(role), head_out, correction.in_features)  # (heads, dh, in)
        heads = [one.kappa for one in spectra(by_head)]
        if correction.kind == "svd":
            name, scale = f"svd/{correction.granularity}", plain.sigma_max
        else:
            head_lams = correction.head_lams(role)
            kind = "rotated" if role == "k" and correction.rotates_key else "identity"
            name, scale = f"{kind} lam={_lam_text(lam, head_lams)}", max(head_lams) if lam == AUTO else lam
        rows.append(
            ReportRow(
                module=found.module_name,
                parameter=found.param_name,
                role=role,
                layout=layout.describe(),
                shape=tuple(found.stored_weight().shape),
                block_shape=(index.numel(), correction.in_features),
                heads=layout.heads(role),
                correction=name,
                scale=float(scale),
                backend=found.backend,
                kappa_w=plain.kappa,
                kappa_eff=conditioned.kappa,
                head_kappa_eff_max=max(heads),
                notes=correction.notes,
                head_lams=head_lams,
                head_kappas_eff=tuple(heads),
                per_head=correction.granularity == "head" and (correction.kind == "svd" or lam == AUTO),
            )
        )
    return rows


def _lam_text(lam: float | str, head_lams: tuple[float, ...]) -> str:
    """The lam as the report shows it: "10"; for "auto" the chosen value(s), "auto(3.1)" or "auto(2.9..3.4)"."""
    if lam != AUTO:
        return f"{lam:g}"
    carried = [value for value in head_lams if value != 0] or [0.0]
    low, high = min(carried), max(carried)
    return f"auto({low:.3g})" if f"{low:.3g}" == f"{high:.3g}" else f"auto({low:.3g}..{high:.3g})"


def _fmt(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.3g}"


def _finite(row: dict) -> dict:
    """JSON has no inf: write it as the string "inf" (in tuples of figures too)."""
    def finite(value):
        if isinstance(value, tuple):
            return [finite(v) for v in value]
        return "inf" if isinstance(value, float) and math.isinf(value) else value

    return {k: finite(v) for k, v in row.items()}
