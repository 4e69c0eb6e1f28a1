"""Shared fixtures: tiny real models built from config, and tolerances set once per dtype."""
from __future__ import annotations

import pytest
import torch

# Tolerances, set once: (rtol, atol) per dtype.
TOL = {
    torch.float64: (1e-9, 1e-9),
    torch.float32: (1e-5, 1e-5),
    torch.bfloat16: (5e-2, 5e-2),
}


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype | None = None) -> None:
    """allclose with the tolerance of ``dtype`` (default: the dtype of ``actual``)."""
    rtol, atol = TOL[dtype or actual.dtype]
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)


@pytest.fixture(autouse=True)
def _seed_and_threads():
    """Tiny models gain nothing from a second thread, and lose a lot when the other core is busy."""
    torch.manual_seed(0)
    torch.set_num_threads(1)


@pytest.fixture
def float64_default():
    """Build models and inputs in float64, so equivalences are checked to near machine precision.

    With lam = 10 the attention logits are large (PAPER.md section 3), so two float32 evaluations of the
    same function that round in a different order differ by up to ~1e-4 relative after the softmax;
    float64 removes that noise and leaves only real differences.
    """
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)
