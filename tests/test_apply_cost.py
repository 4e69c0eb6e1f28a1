"""What apply and its report cost: each spectrum computed once and kept, the per-head SVD correction in one
batched SVD with the same bits as head by head, and progress logged for long work.

Speed itself is measured by benchmarks/apply_time.py (paired against the plain model's construction time,
docs/BENCHMARKS.md), not by timed tests."""
from __future__ import annotations

import logging
import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import speccond
import speccond.progress
from speccond.core.backends import attachments
from speccond.core.spectral import spectra, spectrum
from tests.models import CASE_IDS, CASES, build_case, timm_vit


class CountSVDs(TorchDispatchMode):
    """Counts the SVD calls (svdvals and svd both dispatch to aten._linalg_svd) run inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += func is torch.ops.aten._linalg_svd.default
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("correction", ["identity", "svd"])
def test_the_report_computes_each_spectrum_once_and_keeps_it(correction):
    """Per row: one SVD call for the stored and the effective block together, one for all its heads; a
    second read (str, rows, to_dict) computes nothing. (Before: the stored block's SVD twice under svd, and
    one call per head.)"""
    model = timm_vit()  # 2 layers x (q, k, v), 4 heads
    report = speccond.apply(model, speccond.SpectralConfig(correction=correction))
    with CountSVDs() as first:
        text = str(report)
    assert first.calls == 2 * len(report) == 12
    with CountSVDs() as again:
        assert str(report) == text and report.to_dict()["rows"] and report.rows
    assert again.calls == 0


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_the_reports_figures_are_those_of_spectrum(case):
    """The batched figures (wide heads are passed transposed) agree with spectrum() of each matrix."""
    model = build_case(case)
    speccond.apply(model, speccond.SpectralConfig(correction="svd", **case.config))
    for found, row in zip(
        [a for a in attachments(model) for lam in a.correction.scales.values() if lam],
        speccond.describe(model).rows,
    ):
        layout = found.correction.layout
        effective = layout.out_in(found.effective_weight().detach())  # (out, in)
        block = effective[layout.block_rows(row.role, effective.shape[0])]  # (width, in)
        stored = layout.out_in(found.stored_weight().detach())[layout.block_rows(row.role, effective.shape[0])]
        dh = block.shape[0] // row.heads
        heads = [spectrum(block[h * dh : (h + 1) * dh]).kappa for h in range(row.heads)]
        assert row.head_kappas_eff == pytest.approx(heads, rel=1e-12)
        assert row.kappa_eff == pytest.approx(spectrum(block).kappa, rel=1e-12)
        assert row.kappa_w == pytest.approx(spectrum(stored).kappa, rel=1e-12)
        assert row.scale == pytest.approx(spectrum(stored).sigma_max, rel=1e-12)


@pytest.mark.parametrize("shape", [(4, 16, 64), (12, 64, 768), (3, 96, 64), (2, 3, 5), (1, 8, 8)])
def test_spectra_of_a_stack_match_spectrum_of_each(shape):
    stack = torch.randn(*shape) * torch.logspace(-3, 0, shape[-1])  # kappa in the hundreds to thousands
    for batched, matrix in zip(spectra(stack), stack):
        one = spectrum(matrix)
        assert batched.singular == one.singular
        assert math.isclose(batched.kappa, one.kappa, rel_tol=1e-12)
        assert math.isclose(batched.sigma_max, one.sigma_max, rel_tol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_the_per_head_svd_correction_is_bit_for_bit_the_head_by_head_one(case):
    """The published runs' bits depend on C: the batched SVD gives each head's C exactly as its own SVD."""
    model = build_case(case)
    plain = {name: p.detach().clone() for name, p in model.named_parameters()}
    speccond.apply(model, speccond.SpectralConfig(correction="svd", **case.config))
    for found in attachments(model):
        correction, layout = found.correction, found.correction.layout
        w = layout.out_in(plain[found.qualified_name]).double()  # (out, in)
        expected = torch.zeros_like(w)
        for role in layout.roles:
            for head in range(layout.heads(role)):
                rows = layout.head_rows(role, head, w.shape[0])
                u, s, vh = torch.linalg.svd(w[rows], full_matrices=False)
                expected[rows] = s[0] * (u @ vh)
        assert torch.equal(correction.matrix, expected.to(correction.matrix.dtype))


def _progress_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("speccond") and " s" in r.getMessage()
            and "/" in r.getMessage()]


def test_long_work_logs_its_progress(caplog, monkeypatch):
    """Past PROGRESS_AFTER_S (set to 0 here: every item counts as long work), apply's corrections, its
    collapse prediction and the report's spectra log how far they are, through logging."""
    monkeypatch.setattr(speccond.progress, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(speccond.progress, "PROGRESS_EVERY_S", 0.0)
    with caplog.at_level(logging.INFO, logger="speccond"):
        report = speccond.apply(timm_vit(), speccond.SpectralConfig(correction="svd"))
        str(report)
    lines = _progress_lines(caplog)
    assert "speccond.apply: corrections of 1/2 projections built" in lines[0]
    assert any("speccond.apply: corrections of 2/2 projections built" in line for line in lines)
    assert any("speccond.apply: collapse prediction of 2/2 attention modules" in line for line in lines)
    assert any("speccond report: spectra of 1/2 conditioned parameters" in line for line in lines)
    assert "speccond report: spectra of 2/2 conditioned parameters" in lines[-1]


def test_short_work_logs_no_progress(caplog):
    with caplog.at_level(logging.INFO, logger="speccond"):
        str(speccond.apply(timm_vit(), speccond.SpectralConfig(correction="svd")))
    assert _progress_lines(caplog) == []
