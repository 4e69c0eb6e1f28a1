"""The collapse warning raised in a worker process speaks the flags of the command that started the workers.

``speccond tune --jobs 2`` (and ``compare`` through it) trains its runs in spawned worker processes, and
``--engine submitit`` in submitit's; the command line phrases the advice as its flags only in its own process
(``collapse_advice.phrased``), so a worker's warning used to name ``SpectralConfig(correction='svd')`` to a
user of the command line. Each worker is handed the phrasing and installs it (tuning._worker_start,
engines.train_job). Tested through a real spawned pool with the pool's own initializer.
"""
from __future__ import annotations

import multiprocessing
import warnings
from concurrent.futures import ProcessPoolExecutor

import pytest

from speccond.collapse_advice import current_phrasing, phrased, python_call
from speccond.harness.cli_advice import phrasing
from speccond.harness.protocol import tuning


def collapse_warning_in_this_process() -> str:
    """apply's collapse warning on a ViT-Ti block under the paper's lam = 10, as this process phrases it."""
    import timm
    import torch

    import speccond

    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, depth=1, num_classes=10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        speccond.apply(model, speccond.SpectralConfig.paper())
    (message,) = [str(w.message) for w in caught if "nearly one-hot" in str(w.message)]
    return message


def _in_a_worker(installed) -> str:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context, initializer=tuning._worker_start, initargs=(1, 1, installed)) as pool:
        return pool.submit(collapse_warning_in_this_process).result()


@pytest.mark.parametrize("command, flags", [("tune", "--arms spectral-svd"), ("compare", "--methods spectral-svd")])
def test_a_pool_workers_warning_names_the_commands_flags(command, flags):
    with phrased(phrasing(command)):
        handed = current_phrasing()  # what run_jobs passes to the pool's initializer
    message = _in_a_worker(handed)
    assert f"; {flags} keeps attention spread" in message and "SpectralConfig(" not in message


def test_outside_a_command_a_worker_keeps_the_python_call():
    assert current_phrasing() is python_call
    assert "SpectralConfig(correction='svd') keeps attention spread" in _in_a_worker(current_phrasing())
