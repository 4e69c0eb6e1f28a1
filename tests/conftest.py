"""Shared fixtures: tiny real models built from config, tolerances set once per dtype, and the session's
prepared CIFAR-10 (from the shared JPEG archive)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from speccond.data import cifar10
from speccond.data.store import prepare

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

    With lam = 10 the attention logits are large (docs/THEORY.md section 3), so two float32 evaluations of the
    same function that round in a different order differ by up to ~1e-4 relative after the softmax;
    float64 removes that noise and leaves only real differences.
    """
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


@pytest.fixture(scope="session")
def cifar10_home(tmp_path_factory):
    """A data dir with cifar10 prepared once per session from the shared JPEG archive (speccond.data.shared)."""
    home = tmp_path_factory.mktemp("cifar10") / "data"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECCOND_DATA", str(home))
        try:
            prepare(cifar10.SPEC)
        except FileNotFoundError as error:
            pytest.skip(f"no CIFAR-10 archive here (set SPECCOND_SHARED_DATA to the folder holding it): {error}")
    yield home
    shutil.rmtree(home / "cifar10" / "raw")  # 19 MB; pytest keeps the last three session folders


@pytest.fixture(scope="session")
def digits_home(tmp_path_factory):
    """A data folder holding the prepared digits cache, made once for the session (point SPECCOND_DATA at it)."""
    home = tmp_path_factory.mktemp("digits-data")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECCOND_DATA", str(home))
        from speccond import data

        data.prepare("digits")
    return home


@pytest.fixture
def digits_data(digits_home, monkeypatch):
    """SPECCOND_DATA pointed at the session's digits cache for one test."""
    monkeypatch.setenv("SPECCOND_DATA", str(digits_home))
    return digits_home
