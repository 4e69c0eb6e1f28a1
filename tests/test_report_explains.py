"""The report explains itself: runs that learnt nothing are flagged by a statistical
criterion against the majority class of the scored split; a warm-up not shorter than the run is adapted,
recorded and said; every setting that differs from the defaults is listed; where a correction is sized per
head, the largest per-head kappa of W + C stands beside the block's, labelled, in the table and the figure;
attention entropy reads as a fraction of uniform too. Real tiny runs on the digits task."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import speccond
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.reporting.report import write_report
from speccond.harness.training import checkpoint
from speccond.harness.training.recipe import Schedule, make_optimizer
from speccond.harness.training.runs import load_model, read_run
from speccond.harness.training.train import train
from speccond.harness.training.training_tasks import training_task
from speccond.harness.models.run_model import model_for

# digits: 1438 training images, batch 45: 32 steps an epoch (a run shorter than the default warm-up of 50)
SETS = ["task=digits", "embed_dim=32", "depth=1", "num_heads=2", "patch_size=2", "batch_size=45", "test_size=128",
        "checkpoint_every=100"]
LEARNS = ("depth=2", "batch_size=64", "epochs=15", "lr=3e-3", "warmup_steps=20")  # 345 steps: 30 % on digits


@pytest.fixture(autouse=True)
def digits(digits_data):
    """Every test here trains on the session's digits cache (conftest.py)."""


def run(folder: Path, *sets: str, seed: int = 0) -> Path:
    config = TrainConfig().with_overrides([*SETS, *sets, f"seed={seed}"])
    path = folder / config.method.name / f"seed-{seed}"
    train(config, path, progress=False)
    return path


# -- nothing learnt ---------------------------------------------------------------------------------------------
def test_runs_that_learnt_nothing_are_flagged_against_the_majority_class(tmp_path):
    """lr = 0: every arm keeps its initial weights, so its accuracy is noise around the floor; the report used to
    table a confident-looking difference. Its eval rows record the test split's majority class share."""
    for method in ("baseline", "spectral-svd"):
        for seed in (0, 1):
            run(tmp_path / "still", f"method={method}", "lr=0", "warmup_steps=2", seed=seed)
    record = read_run(tmp_path / "still" / "baseline" / "seed-0")
    labels = training_task(record.config).data["test_y"]  # (128,)
    assert record.majority == pytest.approx(int(torch.bincount(labels).max()) / labels.numel())
    assert record.examples == 128
    report = write_report([tmp_path / "still"])
    assert all(s.nothing_learnt for s in report.summaries)
    assert "**Nothing learnt**: every group's final test accuracy is within noise of the majority class" in report.markdown
    assert "raise epochs or lr" in report.markdown and "(nothing learnt)" in report.markdown
    # A group that learnt beside them: digits needs a few hundred steps to leave chance (345 here; 2 epochs stay
    # near 11 %, and are flagged). The others are marked, and the mark explained.
    run(tmp_path / "learnt", "method=baseline", *LEARNS)
    report = write_report([tmp_path / "still", tmp_path / "learnt"], tmp_path / "both")
    learnt = next(s for s in report.summaries if "epochs=15" in s.label)
    assert learnt.nothing_learnt is False and learnt.accuracy.mean > 0.25
    assert sum(bool(s.nothing_learnt) for s in report.summaries) == 2
    assert "Nothing learnt**" not in report.markdown
    assert "(nothing learnt): the group's final test accuracy is within noise of the majority class" in report.markdown


@pytest.mark.parametrize("accuracies, examples, expected", [
    ([0.52, 0.51, 0.50], 2000, True),  # a text run at 50.92 %: every seed at the majority class
    ([0.62, 0.63, 0.61], 2000, False),
    ([0.53], 100, True),  # one seed, 100 targets: 1.96 sqrt(0.5 * 0.5 / 100) = 9.8 points of noise
    ([0.53], 100_000, False),
])
def test_within_noise_adds_the_seeds_and_the_splits_sampling(accuracies, examples, expected):
    from speccond.harness.reporting import explain

    assert explain.within_noise(accuracies, explain.Floor(0.5092, "majority class", examples)) is expected


# -- warm-up ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scheduler", ["cosine", "timm:cosine"])
def test_a_warmup_not_shorter_than_the_run_is_adapted_to_a_tenth_of_it(scheduler):
    """32 steps with warmup_steps = 50: the lr used to rise through the whole run (to 32/50 of its peak) and
    never decay; now it peaks after 3 steps and decays to near 0."""
    config = TrainConfig().with_overrides([*SETS, "method=baseline", "warmup_steps=50", f"scheduler={scheduler}"])
    optimizer = make_optimizer(config, training_task(config), model_for(config))
    schedule, lrs = Schedule(config, optimizer, 32), []
    for step in range(32):
        schedule.set(step)
        lrs.append(optimizer.param_groups[0]["lr"])
    assert max(lrs) == pytest.approx(config.optimizer.lr) and lrs.index(max(lrs)) <= 3
    assert lrs[-1] < 0.02 * config.optimizer.lr


def test_an_adapted_warmup_is_recorded_and_the_report_says_so(tmp_path):
    run(tmp_path / "short", "method=baseline", "warmup_steps=50")
    recorded = json.loads((tmp_path / "short" / "baseline" / "seed-0" / "config.json").read_text())
    assert recorded["warmup_adapted"] == {"asked": 50, "used": 3, "total_steps": 32}
    report = write_report([tmp_path / "short"])
    assert "50 warm-up steps asked, not shorter than the run's 32 steps, so 3 used" in report.markdown
    assert "50 warm-up steps then" not in report.markdown
    run(tmp_path / "long", "method=baseline", "warmup_steps=5")  # shorter than the run: used as asked, no record
    assert "warmup_adapted" not in json.loads((tmp_path / "long" / "baseline" / "seed-0" / "config.json").read_text())
    assert "5 warm-up steps then cosine decay" in write_report([tmp_path / "long"]).markdown


# -- settings that differ from the defaults ------------------------------------------------------------------------
def test_every_setting_that_differs_from_the_default_is_listed(tmp_path):
    run(tmp_path / "recipe", "method=baseline", "warmup_steps=2", "precision=bfloat16", "label_smoothing=0.1",
        "ema_decay=0.9", "optimizer=timm:lamb", "scheduler=timm:cosine")
    text = write_report([tmp_path / "recipe"]).markdown
    assert "optimiser timm:lamb lr 0.001" in text and "then timm's cosine schedule (timm:cosine)" in text
    assert "AdamW" not in text.split("\n- Accuracy")[0]
    listed = text.split("Other settings that differ from the defaults: ")[1].split(".\n")[0]
    assert set(listed.split(", ")) == {"precision=bfloat16", "label_smoothing=0.1", "ema_decay=0.9"}


# -- kappa per head beside the block's; entropy as a fraction of uniform ----------------------------------------------
def test_the_per_head_kappa_stands_beside_the_blocks_where_a_correction_is_sized_per_head(tmp_path):
    """spectral-svd (sized per head) tracked, spectral lam = 10 (sized per block) not: the table labels the block's
    kappa and adds the largest per-head kappa, the figure the library's report gives for the final weights."""
    svd = run(tmp_path / "cmp", "method=spectral-svd", "warmup_steps=2", "track_every=16")
    block = run(tmp_path / "cmp", "method=spectral", "warmup_steps=2")
    report = write_report([tmp_path / "cmp"])
    rows = {s.label: s for s in report.summaries}
    assert rows["spectral-svd"].kappa_per_head and not rows["spectral lam=10"].kappa_per_head
    for path in (svd, block):
        model, _ = load_model(read_run(path).config, checkpoint.latest(path))
        library = max(row.head_kappa_eff_max for row in speccond.describe(model))
        assert read_run(path).head_kappa_max == pytest.approx(library, rel=1e-6)  # tracked rows and checkpoint alike
    assert rows["spectral-svd"].head_kappa_max < rows["spectral-svd"].kappa_qkv
    header = next(line for line in report.markdown.splitlines() if line.startswith("| method | seeds"))
    assert "kappa(W_q,k,v) of the whole block at end | largest per-head kappa at end" in header
    assert "A correction sized per head bounds this figure, not the whole block's" in report.markdown
    assert "here spectral-svd." in report.markdown
    assert "dotted: the largest per-head kappa" in report.plot_notes["comparison.png"]
    entropy = rows["spectral-svd"]
    record = read_run(svd)
    assert entropy.entropy_fraction.mean == pytest.approx(record.entropy / record.uniform_entropy)
    assert f"{entropy.entropy} ({entropy.entropy_fraction.mean:.2f})" in report.markdown


def test_without_a_per_head_correction_the_table_keeps_one_kappa_column(tmp_path):
    run(tmp_path / "plain", "method=spectral", "warmup_steps=2")
    text = write_report([tmp_path / "plain"]).markdown
    assert "largest per-head kappa" not in text and "| kappa(W_q,k,v) at end |" in text
