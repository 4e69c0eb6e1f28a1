"""The recipe's parts around the training loop (harness/training/recipe.py, accumulation.py, image_transforms.py):
gradient accumulation, timm's weight average (ModelEmaV3), timm's optimiser and scheduler factories, timm's
training augmentation, channels_last and torch.compile. Each is off by default, and each run that uses one
resumes from a cut to the same bytes."""
from __future__ import annotations

import json

import pytest
import torch

from speccond.harness.config.train_config import TrainConfig
from speccond.harness.models.run_model import model_for
from speccond.harness.training import checkpoint
from speccond.harness.training.accumulation import backward_over
from speccond.harness.training.distributed import Context
from speccond.harness.training.image_transforms import image_seed
from speccond.harness.training.precision import MixedPrecision
from speccond.harness.training.recipe import Schedule, learning_rate, make_optimizer
from speccond.harness.training.train import train
from speccond.harness.training.training_tasks import training_task

SETS = ["task=digits", "embed_dim=32", "depth=1", "num_heads=2", "patch_size=2", "epochs=2", "batch_size=45",
        "warmup_steps=2", "method=baseline", "test_size=128", "checkpoint_every=5"]
FLOAT32 = dict(rtol=1e-5, atol=1e-6)  # float32 sums over 45 examples taken in another order
# float32 gradients summed over up to 45 slices: the largest difference, relative to the largest entry. lam = 10's
# near one-hot attention amplifies rounding: 4e-5 at 45 slices of one example (1e-6 for the baseline).
SUMS = 1e-4


def assert_same_gradient(sliced, whole, name):
    scale = float(whole.abs().max())
    difference = float((sliced - whole).abs().max())
    assert difference <= SUMS * scale, f"{name}: gradients differ by {difference:.3g}, largest entry {scale:.3g}"


@pytest.fixture(autouse=True)
def digits(digits_data):
    """Every test here trains on the session's digits cache (conftest.py)."""


def rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def cut_and_resumed_equal_straight(config, tmp_path, stop_after=13):
    straight = train(config, tmp_path / "straight", progress=False)
    assert train(config, tmp_path / "cut", stop_after=stop_after, progress=False) == {}
    assert train(config, tmp_path / "cut", progress=False) == straight
    assert (tmp_path / "cut" / "metrics.jsonl").read_bytes() == (tmp_path / "straight" / "metrics.jsonl").read_bytes()
    return straight


def gradients(config, parts, chosen):
    task, model = training_task(config), model_for(config)
    loss, _ = backward_over(task, model, chosen, 3, Context(), MixedPrecision("float32", torch.device("cpu")), parts)
    return loss, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


# --- gradient accumulation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("extra", [[], ["mixup=0.8", "cutmix=1.0", "label_smoothing=0.1"], ["method=spectral"]],
                         ids=["plain", "mixup", "spectral"])
@pytest.mark.parametrize("parts", [2, 3, 45])
def test_accumulated_micro_batches_give_the_gradient_of_the_whole_batch(parts, extra):
    config = TrainConfig().with_overrides([*SETS, *extra])
    chosen = torch.randperm(1438, generator=torch.Generator().manual_seed(1))[:45]
    whole_loss, whole = gradients(config, 1, chosen)
    sliced_loss, sliced = gradients(config, parts, chosen)
    assert sliced_loss == pytest.approx(whole_loss, rel=1e-6)
    assert whole.keys() == sliced.keys() and len(whole) > 5
    for name in whole:
        assert_same_gradient(sliced[name], whole[name], name)


def test_an_accumulating_run_makes_the_same_updates_and_resumes_to_the_same_bytes(tmp_path):
    accumulated = cut_and_resumed_equal_straight(TrainConfig().with_overrides([*SETS, "accumulate_steps=4"]), tmp_path)
    whole = train(TrainConfig().with_overrides(SETS), tmp_path / "whole", progress=False)
    assert accumulated["step"] == whole["step"] == 64  # 32 optimiser steps per epoch either way
    assert accumulated["loss"] == pytest.approx(whole["loss"], rel=1e-4)
    ends = []
    for run in (tmp_path / "straight", tmp_path / "whole"):
        model = model_for(TrainConfig().with_overrides(SETS))
        checkpoint.load(checkpoint.latest(run), model)
        ends.append(model.state_dict())
    initial = model_for(TrainConfig().with_overrides(SETS)).state_dict()
    for name, weight in ends[1].items():  # 64 AdamW steps apart from float32 rounding (SUMS, compounded)
        assert float((ends[0][name] - weight).abs().max()) <= 1e-3 * float((weight - initial[name]).abs().max()), name


def test_accumulation_cuts_a_short_last_batch_into_fewer_slices():
    config = TrainConfig().with_overrides(SETS)
    chosen = torch.arange(3)  # 3 examples, asked for 8 slices: 3 slices of one
    whole_loss, whole = gradients(config, 1, chosen)
    sliced_loss, sliced = gradients(config, 8, chosen)
    assert sliced_loss == pytest.approx(whole_loss, rel=1e-6)
    for name in whole:
        assert_same_gradient(sliced[name], whole[name], name)


@pytest.mark.parametrize("setting, message", [
    ("accumulate_steps=0", "accumulate_steps must be between 1 and batch_size"),
    ("accumulate_steps=46", "accumulate_steps must be between 1 and batch_size"),
    ("ema_decay=1", "ema_decay must be 0 .off. or in .0, 1."),
    ("optimizer=sgd", "optimizer must be 'adamw' or timm:<name>"),
    ("scheduler=timm:", "scheduler must be 'cosine' or timm:<name>"),
    ("random_erasing=1.5", "random_erasing is a probability"),
    ("compile=2", "compile must be 0 or 1"),
])
def test_out_of_range_recipe_settings_are_refused(setting, message):
    with pytest.raises(ValueError, match=f"TrainConfig.{message}"):
        TrainConfig().with_overrides([*SETS, setting])


# --- the weight average (timm.utils.ModelEmaV3) --------------------------------------------------------------


def test_the_weight_average_is_evaluated_kept_in_checkpoints_and_resumed_to_the_same_bytes(tmp_path):
    config = TrainConfig().with_overrides([*SETS, "ema_decay=0.9"])
    final = cut_and_resumed_equal_straight(config, tmp_path)
    evals = [row for row in rows(tmp_path / "straight") if row["kind"] == "eval"]
    assert evals and all(row["weights"] == "ema" for row in evals)
    state = torch.load(checkpoint.latest(tmp_path / "straight") / "state.pt", weights_only=True)
    assert set(state) == {"optimizer", "ema"}
    plain = train(TrainConfig().with_overrides(SETS), tmp_path / "plain", progress=False)
    assert "weights" not in plain and plain["loss"] != final["loss"]


def test_the_weight_average_copies_the_first_step_then_averages_with_the_decay(tmp_path):
    config = TrainConfig().with_overrides([*SETS, "ema_decay=0.9", "checkpoint_every=1"])
    assert train(config, tmp_path / "run", stop_after=2, progress=False) == {}
    weights, averages = [], []
    for folder in reversed(checkpoint.complete(tmp_path / "run")):  # step-000001, step-000002
        model = model_for(config)
        checkpoint.load(folder, model)
        weights.append(model.state_dict())
        averages.append(torch.load(folder / "state.pt", weights_only=True)["ema"])
    assert len(weights) == 2
    moved = 0
    for name, first in weights[0].items():
        assert torch.equal(averages[0][name], first)  # timm's first update (step 1) copies
        if not first.is_floating_point():  # speccond's record of the correction (uint8 JSON): copied
            assert torch.equal(averages[1][name], weights[1][name])
            continue
        torch.testing.assert_close(averages[1][name], 0.9 * first + 0.1 * weights[1][name], **FLOAT32, msg=name)
        moved += not torch.equal(weights[1][name], first)
    assert moved > 5


# --- timm's optimiser and scheduler factories ----------------------------------------------------------------


def test_the_default_optimiser_and_schedule_are_the_published_ones():
    config = TrainConfig().with_overrides(SETS)
    model = model_for(config)
    optimizer = make_optimizer(config, training_task(config), model)
    assert type(optimizer) is torch.optim.AdamW
    schedule = Schedule(config, optimizer, 64)
    for step in (0, 1, 2, 30, 63):
        schedule.set(step)
        assert all(group["lr"] == learning_rate(config, step, 64) for group in optimizer.param_groups)


def test_timm_factories_build_the_named_optimiser_and_a_per_step_schedule(tmp_path):
    from timm.optim import Lamb

    config = TrainConfig().with_overrides([*SETS, "optimizer=timm:lamb", "scheduler=timm:cosine", "warmup_steps=4"])
    optimizer = make_optimizer(config, training_task(config), model_for(config))
    assert isinstance(optimizer, Lamb)
    decayed = {group["weight_decay"] for group in optimizer.param_groups}
    assert decayed == {0.0, config.optimizer.weight_decay}  # timm exempts biases and norms
    schedule = Schedule(config, optimizer, 64)
    lrs = []
    for step in range(65):
        schedule.set(step)
        lrs.append(optimizer.param_groups[0]["lr"])
    assert lrs[0] == 0.0 and lrs[2] == pytest.approx(config.optimizer.lr / 2) and lrs[4] == pytest.approx(config.optimizer.lr)
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:])) and lrs[64] == pytest.approx(0.0, abs=1e-12)
    cut_and_resumed_equal_straight(config, tmp_path)


def test_an_optimiser_timm_does_not_know_is_refused_before_anything_is_written(tmp_path):
    config = TrainConfig().with_overrides([*SETS, "optimizer=timm:adamwx"])
    with pytest.raises(ValueError, match="timm has no optimiser 'adamwx'"):
        train(config, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="scheduler 'timm:plateau': choose timm:<one of cosine"):
        train(TrainConfig().with_overrides([*SETS, "scheduler=timm:plateau"]), tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


# --- timm's training augmentation ------------------------------------------------------------------------------


def test_timm_augmentation_replaces_the_built_in_one_and_resumes_to_the_same_bytes(tmp_path):
    config = TrainConfig().with_overrides([*SETS, "auto_augment=rand-m9-mstd0.5-inc1", "random_erasing=0.25"])
    task = training_task(config)
    batch = task.data["train_x"][:16]  # (16, 1, 8, 8) standardised
    seeds = [image_seed(1, 7, position) for position in range(16)]
    first, again = task.transform(batch, seeds), task.transform(batch, seeds)
    assert first.shape == batch.shape and first.dtype == batch.dtype and torch.equal(first, again)
    assert not torch.equal(task.transform(batch, [image_seed(1, 8, p) for p in range(16)]), first)
    # each image's draw is its own seed's alone: the same image and seed, alone or in any batch, draw the same
    assert torch.equal(task.transform(batch[5:7].flip(0), seeds[5:7][::-1]), first[5:7].flip(0))
    augmented = cut_and_resumed_equal_straight(config, tmp_path)
    assert augmented != train(TrainConfig().with_overrides(SETS), tmp_path / "plain", progress=False)


def test_timm_augmentation_keeps_the_standardised_scale_of_unaugmented_images():
    config = TrainConfig().with_overrides([*SETS, "random_erasing=1.0"])
    task = training_task(config)
    out = task.transform(task.data["train_x"][:256], list(range(256)))  # (256, 1, 8, 8)
    assert abs(float(out.mean())) < 0.5 and 0.5 < float(out.std()) < 1.5


def test_randaugment_posterize_with_zero_bits_gives_a_black_image_as_timm_intends():
    from PIL import Image

    from speccond.harness.training.image_transforms import _posterize

    config = TrainConfig().with_overrides([*SETS, "auto_augment=rand-m10-inc1"])  # magnitude 10: 0 bits kept
    ops = [op for step in training_task(config).transform.transform.transforms for op in getattr(step, "ops", ())]
    assert [op.name for op in ops if op.aug_fn is _posterize] == ["PosterizeIncreasing"]
    image = Image.new("RGB", (8, 8), (200, 100, 50))
    assert set(_posterize(image, 0).getdata()) == {(0, 0, 0)}
    assert set(_posterize(image, 1).getdata()) == {(128, 0, 0)}


@pytest.mark.parametrize("setting", ["auto_augment=rand-m9", "random_erasing=0.5", "channels_last=1"])
def test_image_settings_asked_of_a_sequence_task_are_refused_not_ignored(setting, tmp_path):
    config = TrainConfig().with_overrides(["task=lra-listops", "model=nystromformer", setting])
    with pytest.raises(ValueError, match="act on image batches"):
        training_task(config)


# --- channels_last and torch.compile ---------------------------------------------------------------------------


def test_channels_last_trains_the_same_run_within_float_tolerance(tmp_path):
    plain = train(TrainConfig().with_overrides([*SETS, "epochs=1"]), tmp_path / "plain", progress=False)
    last = train(TrainConfig().with_overrides([*SETS, "epochs=1", "channels_last=1"]), tmp_path / "last", progress=False)
    assert last["loss"] == pytest.approx(plain["loss"], rel=1e-4)


def test_compile_trains_the_same_run_within_float_tolerance(tmp_path):
    """torch.compile on this CPU: 2 steps of a one-block ViT; compiling the forward and backward takes 15 s on
    an idle core, 100 s on a busy one."""
    sets = [*SETS, "epochs=1", "train_size=90", "method=baseline"]
    plain = train(TrainConfig().with_overrides(sets), tmp_path / "plain", progress=False)
    compiled = train(TrainConfig().with_overrides([*sets, "compile=1"]), tmp_path / "compiled", progress=False)
    assert compiled["loss"] == pytest.approx(plain["loss"], rel=1e-4)
    state = torch.load(checkpoint.latest(tmp_path / "compiled") / "state.pt", weights_only=True)
    assert set(state) == {"optimizer"}


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA GPU: bfloat16 autocast, channels_last and torch.compile on CUDA together")
def test_on_cuda_the_recipe_parts_train_and_a_cut_run_resumes_to_the_same_figures(tmp_path):
    """CUDA kernels may sum in another order from run to run, so the resumed run is held to 1e-3, not to bytes."""
    config = TrainConfig().with_overrides([*SETS, "device=cuda", "precision=bfloat16", "channels_last=1", "compile=1",
                                           "accumulate_steps=3", "ema_decay=0.9", "optimizer=timm:adamw",
                                           "scheduler=timm:cosine"])
    straight = train(config, tmp_path / "straight", progress=False)
    assert train(config, tmp_path / "cut", stop_after=13, progress=False) == {}
    resumed = train(config, tmp_path / "cut", progress=False)
    assert resumed["weights"] == "ema" and resumed["step"] == straight["step"] == 64
    assert resumed["loss"] == pytest.approx(straight["loss"], rel=1e-3)
