"""What apply and its report cost: print(report) decomposes heads only and each spectrum is computed once and
kept, the per-head SVD correction is one batched call with the same bits as head by head, and progress is
logged for long work.

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
from speccond.core.spectral import spectra, spectrum, svd_correction
from tests.models import CASE_IDS, CASES, build_case, timm_vit


DECOMPOSITIONS = (torch.ops.aten._linalg_svd.default, torch.ops.aten._linalg_eigh.default)


class CountSVDs(TorchDispatchMode):
    """Counts the SVD and symmetric eigen-decomposition calls (svdvals, svd, eigh, eigvalsh) run inside it,
    and keeps the shape of each matrix decomposed."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.shapes: list[tuple[int, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in DECOMPOSITIONS:
            self.calls += 1
            self.shapes.append(tuple(args[0].shape[-2:]))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("correction", ["identity", "svd"])
def test_print_computes_only_the_heads_and_rows_add_only_the_blocks(correction):
    """print(report) decomposes head-sized matrices only, one call per row (W's and W + C's heads together);
    reading the rows then adds one call per row (the stored and the effective block together) and keeps
    the printed head figures; a third read computes nothing. (Before: print decomposed every whole block.)"""
    model = timm_vit()  # 2 layers x (q, k, v), 4 heads of 16 rows, in 64
    report = speccond.apply(model, speccond.SpectralConfig(correction=correction))
    with CountSVDs() as printing:
        text = str(report)
    assert printing.calls == len(report) == 6
    assert {shape[0] for shape in printing.shapes} == {16}  # a head's rows (its Gram matrix is 16 x 16), no block
    assert "kappa W+C per head (max)" in text and "(block)" not in text and "report.compute()" in text
    printed = [line.split()[-2:] for line in text.splitlines()[2:8]]  # kappa W and W + C per head (max)
    with CountSVDs() as reading:
        rows = report.rows
    assert reading.calls == len(report) and {shape for shape in reading.shapes} == {(64, 64)}  # (W, W + C) blocks
    assert [[f"{row.head_kappa_w_max:.3g}", f"{row.head_kappa_eff_max:.3g}"] for row in rows] == printed
    assert all(row.kappa_w is not None and row.kappa_eff is not None for row in rows)
    with CountSVDs() as again:
        assert "kappa W+C (block)" in str(report) and report.to_dict()["rows"] and report.rows
    assert again.calls == 0


def test_describe_and_compute_give_the_block_figures_in_the_text():
    """speccond.describe(model) and report.compute() hold every figure, so their text has the block columns."""
    model = timm_vit()
    report = speccond.apply(model, speccond.SpectralConfig()).compute()
    assert "kappa W+C (block)" in str(report) and "report.compute()" not in str(report)
    assert str(speccond.describe(model)) == str(report)


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
    """C is computed for every head of a block in one batched call: each head's C is bit for bit the one
    svd_correction gives that head alone, and within 2e-13 of its SVD's sigma_max U V^T (tests/test_gram_route.py
    checks the published width-64 models' float32 C against the SVD's bit for bit)."""
    model = build_case(case)
    plain = {name: p.detach().clone() for name, p in model.named_parameters()}
    speccond.apply(model, speccond.SpectralConfig(correction="svd", **case.config))
    for found in attachments(model):
        correction, layout = found.correction, found.correction.layout
        w = layout.out_in(plain[found.qualified_name]).double()  # (out, in)
        alone, by_svd = torch.zeros_like(w), torch.zeros_like(w)
        for role in layout.roles:
            for head in range(layout.heads(role)):
                rows = layout.head_rows(role, head, w.shape[0])
                alone[rows] = svd_correction(w[rows])
                u, s, vh = torch.linalg.svd(w[rows], full_matrices=False)
                by_svd[rows] = s[0] * (u @ vh)
        assert torch.equal(correction.matrix, alone.to(correction.matrix.dtype))
        assert float((alone - by_svd).abs().max()) <= 2e-13 * float(by_svd.abs().max())


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
