"""SpectralReport: what was conditioned and what it did to the condition numbers.

One row per conditioned projection (q, k or v block). kappa is computed in float64 on the logical
(out_block, in) block: ``kappa_w`` of the stored trainable weight W, ``kappa_eff`` of W + C, and
``head_kappa_eff_max`` the largest kappa of W + C over the block's heads.

The ``correction`` column names the correction and its lam: "identity lam=10", or for lam="auto" the
lam it chose from the weights, "identity lam=auto(3.1)" (one value: every head carries it) or
"identity lam=auto(2.9..3.4)" (per head: smallest..largest; ``head_lams`` lists them).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Iterator, Optional

from speccond.backends import Attachment
from speccond.config import AUTO
from speccond.sharded import gathered
from speccond.spectral import spectrum


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
    head_lams: tuple[float, ...] = ()  # identity: lam on each head's slice of C (0.0: none there); svd: ()


@dataclass
class SpectralReport:
    """Rows describing every conditioned projection, and the config that made them."""

    rows: list[ReportRow] = field(default_factory=list)
    config: Optional[dict] = None

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[ReportRow]:
        return iter(self.rows)

    def to_dict(self) -> dict:
        return {"config": self.config, "rows": [_finite(asdict(r)) for r in self.rows]}

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __str__(self) -> str:
        if not self.rows:
            return "SpectralReport: nothing conditioned"
        header = ("module", "param", "qkv", "layout", "block", "heads", "correction", "backend", "kappa W", "kappa W+C", "max head")
        lines = [
            (r.module, r.parameter, r.role, r.layout, "x".join(map(str, r.block_shape)), str(r.heads),
             r.correction, r.backend, _fmt(r.kappa_w), _fmt(r.kappa_eff), _fmt(r.head_kappa_eff_max))
            for r in self.rows
        ]
        widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
        render = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
        out = [render(header), render(["-" * w for w in widths]), *map(render, lines)]
        notes = sorted({n for r in self.rows for n in r.notes})
        out += [f"note: {n}" for n in notes]
        return "\n".join(out)


def rows_for(found: Attachment) -> list[ReportRow]:
    """One row per corrected role of an attachment."""
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
        heads = [spectrum(eff_block[h * head_out : (h + 1) * head_out]).kappa for h in range(layout.heads(role))]
        if correction.kind == "svd":
            name, scale = f"svd/{correction.granularity}", spectrum(stored[index]).sigma_max
        else:
            head_lams = correction.head_lams(role)
            name, scale = f"identity lam={_lam_text(lam, head_lams)}", max(head_lams) if lam == AUTO else lam
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
                kappa_w=spectrum(stored[index]).kappa,
                kappa_eff=spectrum(eff_block).kappa,
                head_kappa_eff_max=max(heads),
                notes=correction.notes,
                head_lams=head_lams,
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
    """JSON has no inf: write it as the string "inf"."""
    return {k: ("inf" if isinstance(v, float) and math.isinf(v) else v) for k, v in row.items()}
