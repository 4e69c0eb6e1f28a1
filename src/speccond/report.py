"""SpectralReport: what was conditioned and what it did to the condition numbers.

One row per conditioned projection (q, k or v block). kappa is computed in float64 on the logical
(out_block, in) block: ``kappa_w`` of the stored trainable weight W, ``kappa_eff`` of W + C, and
``head_kappas_eff`` the kappa of W + C on each head's rows (``head_kappa_eff_max`` the largest;
``head_kappa_w_max`` the largest of W's).

Which figure to read: each head's kappa is what the corrections bound (the SVD correction by 2, per head
or per block, whose rows' singular values interlace; an identity lam above sigma_max(W) by Weyl's bound,
as it bounds the block's). A correction sized per head (``per_head``: the SVD
correction with granularity="head", or lam="auto" per head) bounds only that, not the block's: the heads'
rows are conditioned separately, so the block's kappa can stay in the hundreds while every head is below
2. The text then says so under the table.

Two levels of cost. ``print(report)`` (``str``) shows the per-head figures, which cost little (a head's
rows are short and wide: :func:`speccond.core.spectral.spectra` takes them from the small W W^T), and
the whole blocks' kappa only once computed. The whole rows, block figures included, are computed on
first read of ``rows``, iteration, ``to_dict`` or ``==`` (``len`` needs none), or by
:meth:`SpectralReport.compute`: a ViT-B's 36 q, k, v blocks are 72 float64 SVDs of 768 x 768, about 6.5 s
on one core, where the per-head table takes a few tenths (docs/BENCHMARKS.md). Each matrix's singular
values are computed once and kept, so reading again computes nothing. Work past 2 s shows its progress
(``speccond.progress``). The figures are those of the weights as attached; if the conditioned weights
change before a read that computes (a training step, refresh, remove), it refuses with what to do instead
of reporting other weights' figures.

The ``correction`` column names the correction and its lam: "identity lam=10", or for lam="auto" the
lam it chose from the weights, "identity lam=auto(3.1)" (one value: every head carries it) or
"identity lam=auto(2.9..3.4)" (per head: smallest..largest; ``head_lams`` lists them). A k block corrected by
lam R_h per head (``SpectralConfig(key_basis="orthogonal")``) reads "rotated lam=10".
"""
from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, replace
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
    kappa_w: Optional[float]  # None only in the per-head rows str() prints before the block figures exist
    kappa_eff: Optional[float]
    head_kappa_eff_max: float
    notes: tuple[str, ...] = ()
    head_lams: tuple[float, ...] = ()  # identity, rotated: lam on each head's slice of C (0.0: none there); svd: ()
    head_kappas_eff: tuple[float, ...] = ()  # kappa of W + C on each head's rows, head 0 first
    per_head: bool = False  # C is sized per head (svd/head, lam="auto" per head): it bounds each head's kappa
    head_kappa_w_max: float = float("nan")  # the largest kappa of the stored W on one head's rows


class SpectralReport:
    """Rows describing every conditioned projection, and the config that made them.

    ``SpectralReport(rows, config)`` holds its rows; ``speccond.apply``'s report holds a
    :class:`PendingRows` instead and computes them on first read (module docstring)."""

    def __init__(self, rows: Optional[list[ReportRow]] = None, config: Optional[dict] = None,
                 pending: Optional[PendingRows] = None) -> None:
        if rows is not None and pending is not None:
            raise ValueError("SpectralReport takes rows or pending rows, not both")
        self._rows = None if pending is not None else list(rows or [])
        self._head_rows: Optional[list[ReportRow]] = None  # what str() computed before the rows: no block figures
        self._pending = pending
        self.config = config

    @property
    def rows(self) -> list[ReportRow]:
        if self._rows is None:
            self._rows = self._pending.compute(blocks=True, known=self._head_rows)
            self._pending, self._head_rows = None, None
        return self._rows

    @rows.setter
    def rows(self, rows: list[ReportRow]) -> None:
        self._rows, self._pending, self._head_rows = list(rows), None, None

    def compute(self) -> SpectralReport:
        """Compute every figure now (if not yet done), the whole blocks' kappa included, e.g. right after
        apply and before training; returns self."""
        self.rows
        return self

    def _printed_rows(self) -> list[ReportRow]:
        """The rows as computed so far, or else the per-head rows (block figures None), computed now."""
        if self._rows is not None:
            return self._rows
        if self._head_rows is None:
            self._head_rows = self._pending.compute(blocks=False)
        return self._head_rows

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
        rows = self._printed_rows()
        if not rows:
            return "SpectralReport: nothing conditioned"
        blocks = all(r.kappa_eff is not None for r in rows)
        header = ("module", "param", "qkv", "layout", "block", "heads", "correction", "backend",
                  "kappa W per head (max)", "kappa W+C per head (max)")
        header += ("kappa W (block)", "kappa W+C (block)") if blocks else ()
        lines = [
            (r.module, r.parameter, r.role, r.layout, "x".join(map(str, r.block_shape)), str(r.heads),
             r.correction, r.backend, _fmt(r.head_kappa_w_max), _fmt(r.head_kappa_eff_max))
            + ((_fmt(r.kappa_w), _fmt(r.kappa_eff)) if blocks else ())
            for r in rows
        ]
        widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
        render = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
        out = [render(header), render(["-" * w for w in widths]), *map(render, lines)]
        if any(r.per_head for r in rows):
            out.append(PER_HEAD_NOTE)
        if not blocks:
            largest = max(rows, key=lambda r: r.block_shape[0] * r.block_shape[1]).block_shape
            out.append(BLOCKS_NOTE.format(count=2 * len(rows), shape=" x ".join(map(str, largest))))
        figures = [k for r in rows for k in (r.kappa_w, r.kappa_eff, r.head_kappa_w_max, r.head_kappa_eff_max)]
        if any(k is not None and math.isinf(k) for k in figures):
            out.append(INF_NOTE)
        notes = sorted({n for r in rows for n in r.notes})
        out += [f"note: {n}" for n in notes]
        return "\n".join(out)


PER_HEAD_NOTE = (
    "note: the correction is sized per head here, so it bounds each head's kappa (kappa W+C per head (max)), "
    "not the block's: the kappa of a q, k or v block with all its heads' rows together, which the per-head "
    "correction does not condition; read the per-head figure"
)


BLOCKS_NOTE = (
    "note: the whole blocks' kappa (W and W + C with all heads' rows together) is left out of this text: "
    "{count} float64 SVDs of up to {shape}; report.compute() computes it (and rows, to_dict), and print(report) "
    "then shows it"
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

    def compute(self, blocks: bool, known: Optional[list[ReportRow]] = None) -> list[ReportRow]:
        """The rows, with the whole blocks' figures or without them (None); ``known``: per-head rows
        already computed (by a ``blocks=False`` call), whose head figures are kept."""
        for item, state in zip(self.found, self.state):
            if not _still_attached(item) or _state(item) != state:
                raise ValueError(
                    f"this report's spectra are computed on first read, and {item.qualified_name} has changed "
                    "since speccond.apply (trained, refreshed or removed), so they would describe other weights; "
                    "speccond.describe(model) reports the model as it stands now; to keep the figures at attach "
                    "time, call report.compute() right after apply"
                )
        return rows_of(self.found, blocks, known)


def _state(item: Attachment) -> tuple:
    """What changes when a conditioned weight or its correction is written: the stored W (object and
    version counter, which every in-place write such as an optimiser step increments) and C's buffers."""
    stored = item.stored_weight()
    return (id(stored), stored._version, tuple((id(b), b._version) for b in item.correction.buffers()))


def _still_attached(item: Attachment) -> bool:
    return any(found.correction is item.correction for found in attachments(item.module))


def rows_of(found: list[Attachment], blocks: bool = True, known: Optional[list[ReportRow]] = None) -> list[ReportRow]:
    """The rows of every attachment, in order, with the whole blocks' figures or without them (None);
    ``known``: those rows already computed without them, whose per-head figures are kept. Long work shows
    its progress (speccond.progress)."""
    what = "speccond report: spectra of %d/%d conditioned parameters"
    rest = iter(known) if known is not None else None
    return [row for item in tracked(found, log, what) for row in rows_for(item, blocks, rest)]


def rows_for(found: Attachment, blocks: bool = True, known: Optional[Iterator[ReportRow]] = None) -> list[ReportRow]:
    """One row per corrected role of an attachment: its heads' figures (from ``known``, the next rows of an
    earlier ``blocks=False`` call, or computed now: W's and W + C's heads in one call) and, with ``blocks``,
    the stored and the effective block's in one more call."""
    correction = found.correction
    layout = correction.layout
    stored = layout.out_in(gathered(found.stored_weight().detach()))  # (out, in), whole under FSDP2
    effective = layout.out_in(gathered(found.effective_weight().detach()))  # (out, in)
    rows = []
    for role, lam in correction.scales.items():
        if lam == 0:
            continue
        index = layout.block_rows(role, correction.out_features).to(stored.device)
        row = next(known) if known is not None else _head_row(found, role, lam, stored[index], effective[index])
        if blocks:
            row = _with_block_figures(row, stored[index], effective[index])
        rows.append(row)
    return rows


def _head_row(
    found: Attachment, role: str, lam: float | str, stored: torch.Tensor, effective: torch.Tensor
) -> ReportRow:
    """The row of one corrected block (``stored``, ``effective``: its (width, in) rows of W and W + C) with
    its heads' figures and without the whole block's (None)."""
    correction, layout = found.correction, found.correction.layout
    heads, head_out = layout.heads(role), layout.head_dim(correction.out_features)
    by_head = lambda block: block.reshape(heads, head_out, correction.in_features)  # noqa: E731  (heads, dh, in)
    if stored.dtype == effective.dtype:  # one call; each keeps its dtype's rounding threshold
        both = spectra(torch.cat([by_head(stored), by_head(effective)]))  # (2 heads): W's heads, then W + C's
        plain, conditioned = both[:heads], both[heads:]
    else:
        plain, conditioned = spectra(by_head(stored)), spectra(by_head(effective))
    head_lams: tuple[float, ...] = ()
    if correction.kind == "svd":
        name, scale = f"svd/{correction.granularity}", float("nan")  # sigma_max of the block: _with_block_figures
    else:
        head_lams = correction.head_lams(role)
        kind = "rotated" if role == "k" and correction.rotates_key else "identity"
        name, scale = f"{kind} lam={_lam_text(lam, head_lams)}", max(head_lams) if lam == AUTO else lam
    kappas = tuple(one.kappa for one in conditioned)
    return ReportRow(
        module=found.module_name,
        parameter=found.param_name,
        role=role,
        layout=layout.describe(),
        shape=tuple(found.stored_weight().shape),
        block_shape=tuple(stored.shape),
        heads=heads,
        correction=name,
        scale=float(scale),
        backend=found.backend,
        kappa_w=None,
        kappa_eff=None,
        head_kappa_eff_max=max(kappas),
        notes=correction.notes,
        head_lams=head_lams,
        head_kappas_eff=kappas,
        per_head=correction.granularity == "head" and (correction.kind == "svd" or lam == AUTO),
        head_kappa_w_max=max(one.kappa for one in plain),
    )


def _with_block_figures(row: ReportRow, stored: torch.Tensor, effective: torch.Tensor) -> ReportRow:
    """``row`` with the kappa of its whole block, W (``stored``) and W + C (``effective``), both (width, in),
    and for the svd correction its scale, sigma_max of the stored block."""
    if stored.dtype == effective.dtype:  # one call; each keeps its dtype's rounding threshold
        plain, conditioned = spectra(torch.stack([stored, effective]))  # (2, width, in): W, W + C
    else:
        (plain,), (conditioned,) = spectra(stored), spectra(effective)
    scale = plain.sigma_max if row.correction.startswith("svd/") else row.scale
    return replace(row, kappa_w=plain.kappa, kappa_eff=conditioned.kappa, scale=float(scale))


def _lam_text(lam: float | str, head_lams: tuple[float, ...]) -> str:
    """The lam as the report shows it: "10"; for "auto" the chosen value(s), "auto(3.1)" or "auto(2.9..3.4)"."""
    if lam != AUTO:
        return f"{lam:g}"
    carried = [value for value in head_lams if value != 0] or [0.0]
    low, high = min(carried), max(carried)
    return f"auto({low:.3g})" if f"{low:.3g}" == f"{high:.3g}" else f"auto({low:.3g}..{high:.3g})"


def _fmt(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return "inf" if math.isinf(value) else f"{value:.3g}"


def _finite(row: dict) -> dict:
    """JSON has no inf: write it as the string "inf" (in tuples of figures too)."""
    def finite(value):
        if isinstance(value, tuple):
            return [finite(v) for v in value]
        return "inf" if isinstance(value, float) and math.isinf(value) else value

    return {k: finite(v) for k, v in row.items()}
