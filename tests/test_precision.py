"""Mixed precision in the harness (harness/training/precision.py): bfloat16 and float16 autocast of the training
forward on the CPU, float16's gradient scaler kept in checkpoints so an interrupted run resumes to the same
bytes, and float32, the default, left untouched."""
from __future__ import annotations

import json

import pytest
import torch

from speccond.harness.config.train_config import TrainConfig
from speccond.harness.training import checkpoint
from speccond.harness.training.train import train

SETS = ["task=digits", "embed_dim=32", "depth=1", "num_heads=2", "patch_size=2", "epochs=2", "batch_size=64",
        "warmup_steps=2", "method=spectral-svd", "test_size=128", "checkpoint_every=5"]


@pytest.fixture(autouse=True)
def digits(digits_data):
    """Every test here trains on the session's digits cache (conftest.py)."""


def metrics(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("precision, dtype", [("bfloat16", torch.bfloat16), ("float16", torch.float16)])
def test_the_training_forward_runs_in_the_chosen_precision(tmp_path, monkeypatch, precision, dtype):
    seen = []
    original = torch.nn.Linear.forward

    def spy(self, x):
        out = original(self, x)
        if torch.is_grad_enabled():  # training steps, not the float32 evaluation
            seen.append(out.dtype)
        return out

    monkeypatch.setattr(torch.nn.Linear, "forward", spy)
    final = train(TrainConfig().with_overrides([*SETS, f"precision={precision}"]), tmp_path / "run", progress=False)
    assert seen and set(seen) == {dtype}
    assert 0.0 <= final["accuracy"] <= 1.0 and torch.isfinite(torch.tensor(final["loss"]))


def test_float32_uses_no_autocast_and_stores_no_scaler(tmp_path, monkeypatch):
    entered = []
    monkeypatch.setattr(torch, "autocast", lambda *a, **k: entered.append(a) or (_ for _ in ()).throw(AssertionError))
    train(TrainConfig().with_overrides(SETS), tmp_path / "run", progress=False)
    assert not entered
    state = torch.load(checkpoint.latest(tmp_path / "run") / "state.pt", weights_only=True)
    assert set(state) == {"optimizer"}  # the checkpoint of every published run


def test_an_interrupted_float16_run_resumes_to_the_same_bytes_with_its_gradient_scaler(tmp_path):
    config = TrainConfig().with_overrides([*SETS, "precision=float16"])
    straight = train(config, tmp_path / "straight", progress=False)
    assert train(config, tmp_path / "cut", stop_after=7, progress=False) == {}
    resumed = train(config, tmp_path / "cut", progress=False)
    assert resumed == straight
    assert metrics(tmp_path / "cut") == metrics(tmp_path / "straight")
    state = torch.load(checkpoint.latest(tmp_path / "cut") / "state.pt", weights_only=True)
    assert state["grad_scaler"]["scale"] > 0


def test_an_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="TrainConfig.precision must be 'float32', 'bfloat16' or 'float16'"):
        TrainConfig().replaced(precision="fp8")
