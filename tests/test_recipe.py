"""The recipe's parts from timm in the harness: Mixup / CutMix with label smoothing (timm.data.Mixup and
SoftTargetCrossEntropy) and stochastic depth (timm's drop_path_rate), off by default; a mixed run is the
same bytes whether or not it was cut and resumed, and odd last batches train too."""
from __future__ import annotations

import json

import pytest
import torch

from speccond.harness.config.train_config import TrainConfig
from speccond.harness.models.run_model import model_for
from speccond.harness.training.train import train

SETS = ["task=digits", "embed_dim=32", "depth=1", "num_heads=2", "patch_size=2", "epochs=2", "batch_size=45",
        "warmup_steps=2", "method=baseline", "test_size=128", "checkpoint_every=5"]


@pytest.fixture(autouse=True)
def digits(digits_data):
    """Every test here trains on the session's digits cache (conftest.py)."""


def rows(run):
    return (run / "metrics.jsonl").read_text()


def test_mixup_and_cutmix_train_on_soft_targets_and_resume_to_the_same_bytes(tmp_path, monkeypatch):
    import timm.loss

    calls = []
    original = timm.loss.SoftTargetCrossEntropy.forward
    monkeypatch.setattr(timm.loss.SoftTargetCrossEntropy, "forward",
                        lambda self, x, target: calls.append(target.shape) or original(self, x, target))
    config = TrainConfig().with_overrides([*SETS, "mixup=0.8", "cutmix=1.0", "label_smoothing=0.1"])
    straight = train(config, tmp_path / "straight", progress=False)
    assert calls and all(shape[1] == 10 for shape in calls)  # (b, classes) soft targets, every step
    assert any(shape[0] == 1438 % 45 for shape in calls)  # the odd last batch of an epoch (43) trained too
    assert train(config, tmp_path / "cut", stop_after=13, progress=False) == {}
    assert train(config, tmp_path / "cut", progress=False) == straight
    assert rows(tmp_path / "cut") == rows(tmp_path / "straight")
    plain = train(TrainConfig().with_overrides(SETS), tmp_path / "plain", progress=False)
    assert plain != straight


def test_label_smoothing_alone_smooths_without_mixing(tmp_path, monkeypatch):
    from speccond.harness.training.training_tasks import training_task

    task = training_task(TrainConfig().with_overrides([*SETS, "label_smoothing=0.1"]))
    images, soft = task.mix(torch.ones(4, 1, 8, 8), torch.tensor([0, 1, 2, 3]), seed=0)
    assert torch.equal(images, torch.ones(4, 1, 8, 8))
    assert soft[0, 0] == pytest.approx(0.9 + 0.01) and soft[0, 1] == pytest.approx(0.01)


def test_drop_path_builds_timms_stochastic_depth():
    from timm.layers import DropPath

    model = model_for(TrainConfig().with_overrides([*SETS, "drop_path=0.1", "depth=2"]))
    rates = [m.drop_prob for m in model.modules() if isinstance(m, DropPath)]
    assert rates and max(rates) == pytest.approx(0.1)
    assert not any(isinstance(m, DropPath) for m in model_for(TrainConfig().with_overrides(SETS)).modules())


@pytest.mark.parametrize("setting", ["mixup=-1", "label_smoothing=1", "drop_path=1.5"])
def test_out_of_range_recipe_settings_are_refused(setting):
    with pytest.raises(ValueError, match=f"TrainConfig.{setting.split('=')[0]} must be >= 0"):
        TrainConfig().with_overrides([setting])


def test_mixing_asked_of_a_task_that_is_not_image_classification_is_refused_not_ignored(tmp_path):
    config = TrainConfig().with_overrides(["task=lra-listops", "model=nystromformer", "mixup=0.8"])
    with pytest.raises(ValueError, match="TrainConfig.mixup mix image classification batches"):
        train(config, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_drop_path_for_a_model_it_does_not_size_is_refused_not_ignored():
    with pytest.raises(ValueError, match="give drop_path_rate in model_args"):
        TrainConfig().with_overrides(["model=timm:vit_small_patch16_224", "drop_path=0.1"])
