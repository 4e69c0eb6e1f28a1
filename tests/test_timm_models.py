"""Any registered timm model in the harness (``--model timm:<name>``, constructor arguments in
``model_args``): the model a run trains is timm's own, built from config and conditioned by the run's
method; unknown names and misplaced arguments are one-line errors before anything is written."""
from __future__ import annotations

import json

import pytest
import torch

from speccond.harness.cli import main
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.models.run_model import model_for

VIT_FAMILY = ["vit_small_patch16_224", "deit_tiny_patch16_224", "vit_base_patch16_224", "eva02_tiny_patch14_224",
              "vit_relpos_small_patch16_224"]


@pytest.fixture(autouse=True)
def digits(digits_data):
    """Every test here trains on the session's digits cache (conftest.py)."""


@pytest.mark.parametrize("name", VIT_FAMILY)
def test_a_registered_timm_vit_is_the_model_a_run_trains_with_its_method_applied(name):
    """The run's model has timm's class and timm's parameters for the task's images (8 x 8, 1 channel, 10
    classes) and the given constructor arguments; the SVD method conditions every attention block of it."""
    import timm

    import speccond

    config = TrainConfig().replaced(task="digits", model=f"timm:{name}", model_args="depth=1,patch_size=2", method="spectral-svd")
    model = model_for(config)
    expected = timm.create_model(name, pretrained=False, num_classes=10, in_chans=1, img_size=8, depth=1, patch_size=2)
    assert type(model) is type(expected) and model.training
    assert speccond.is_conditioned(model)
    speccond.remove(model, merge=True)
    assert {n: p.shape for n, p in model.named_parameters()} == {n: p.shape for n, p in expected.named_parameters()}
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)


def test_a_timm_model_that_takes_no_image_size_builds_without_one():
    model = model_for(TrainConfig().replaced(task="digits", model="timm:resnet18", method="baseline"))
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)


def test_compare_trains_and_reports_a_timm_model_by_name(tmp_path):
    out = tmp_path / "cmp"
    assert main(["compare", "--task", "digits", "--model", "timm:vit_small_patch16_224", "--methods",
                 "baseline,spectral-svd", "--seeds", "1", "--set", "epochs=1", "--set", "model_args=depth=1,patch_size=2",
                 "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert "timm:vit_small_patch16_224" in (out / "results.md").read_text()
    recorded = json.loads((out / "baseline" / "seed-0" / "config.json").read_text())["config"]
    assert recorded["model"] == "timm:vit_small_patch16_224" and recorded["model_args"] == "depth=1,patch_size=2"
    assert results


@pytest.mark.parametrize("arguments, message", [
    (["--model", "timm:vit_smal_patch16_224"], "unknown timm model 'vit_smal_patch16_224'; nearest: vit_small_patch16_224"),
    (["--model", "timm:"], "TrainConfig.model must be one of"),
    (["--set", "model_args=depth=1"], "TrainConfig.model_args sets a timm:<name> or hf:<type> model's constructor arguments"),
    (["--model", "timm:vit_small_patch16_224", "--set", "model_args=depth"], "TrainConfig.model_args takes key=value pairs"),
])
def test_a_wrong_timm_model_or_argument_is_one_line_and_writes_nothing(tmp_path, capsys, arguments, message):
    out = tmp_path / "cmp"
    assert main(["compare", "--task", "digits", "--methods", "baseline", "--seeds", "1", *arguments,
                 "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1, error
    assert not out.exists()
