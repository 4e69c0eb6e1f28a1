"""A streamed image folder (imagefolder:DIR?stream=1, harness/training/streaming.py): the dataset keeps paths,
not pixels, and decodes each image as the in-memory path reads it; a run streams through a DataLoader with
worker processes to the in-memory run's figures, the same bytes with or without workers, resumes to the same
bytes, and trains data-parallel under torchrun (2 gloo processes, each rank decoding its own rows and evaluating
its own shard) to the one-process run's figures. The DeiT recipe's parts stream too: timm's augmentation (each
image drawn from its own seed, the same on any rank), mixing (each rank its own rows: one process equals the
in-memory run) and gradient accumulation (this rank's rows in consecutive slices)."""
from __future__ import annotations

import json
import pickle

import pytest
import torch

from speccond.harness.cli import main
from tests.test_image_folder import write_folder
from tests.torchrun import one_and_two_processes

MODEL = {"model": "timm:vit_small_patch16_224", "model_args": "depth=1,patch_size=4,embed_dim=64,num_heads=2",
         "batch_size": 8, "epochs": 2, "method": "spectral-svd", "warmup_steps": 1}


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "data"))
    return write_folder(tmp_path / "shapes", per_class=(12, 5))  # 24 training and 10 test images


def rows(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def config(**fields):
    from speccond.harness.config.train_config import TrainConfig

    return TrainConfig().replaced(**{**MODEL, **fields})


def test_the_dataset_keeps_paths_not_pixels_and_decodes_what_the_in_memory_path_stores(folder):
    from speccond import data
    from speccond.data import image_folder

    name = f"imagefolder:{folder}?size=64&stream=1"
    dataset = image_folder.FolderImages(image_folder.samples(name)["train"], 64)
    assert not any(isinstance(value, torch.Tensor) for value in vars(dataset).values())
    pixel_bytes = len(dataset) * 3 * 64 * 64
    assert len(pickle.dumps(dataset)) < pixel_bytes / 20  # what a worker receives: paths and labels
    assert not (folder.parent / "data").exists()  # nothing read into a cache
    assert data.prepare(name) == folder  # checked, not read
    with pytest.raises(ValueError, match="streams its images from disk"):
        data.load(name)  # never read whole
    assert not (folder.parent / "data").exists()
    stored = data.load(f"imagefolder:{folder}?size=64")
    for index in (0, 13, len(dataset) - 1):
        image, label, position = dataset[index]
        assert torch.equal(image, stored["train_images"][index]) and label == int(stored["train_labels"][index])
        assert position == index


def test_a_streamed_run_trains_to_the_in_memory_runs_figures_with_or_without_workers(folder, tmp_path):
    """The same examples, batches, augmentation and model: only the normalisation's statistics differ (exact
    integer sums against float32 ones), so the figures agree to 1e-5; workers change nothing, bit for bit."""
    from speccond.harness.training.train import train

    task = f"imagefolder:{folder}?size=16"
    memory = train(config(task=task, val_size=4), tmp_path / "memory", progress=False)
    streamed = train(config(task=f"{task}&stream=1", val_size=4), tmp_path / "stream", progress=False)
    workers = train(config(task=f"{task}&stream=1", val_size=4, num_workers=2), tmp_path / "workers", progress=False)
    assert memory["step"] == streamed["step"] == 6 and memory["accuracy"] == streamed["accuracy"]
    assert abs(memory["loss"] - streamed["loss"]) < 1e-5
    assert [r for r in rows(tmp_path / "memory") if r["kind"] == "val"]  # validation carved as in memory
    for one, other in zip(rows(tmp_path / "memory"), rows(tmp_path / "stream"), strict=True):
        assert one["kind"] == other["kind"] and abs(one["loss"] - other["loss"]) < 1e-5
    assert rows(tmp_path / "stream") == rows(tmp_path / "workers")


TIMM_AUGMENTATION = ["auto_augment=rand-m9-mstd0.5-inc1", "random_erasing=0.25"]
MIXING = ["mixup=0.8", "cutmix=1.0", "label_smoothing=0.1"]


@pytest.mark.parametrize("extra", [TIMM_AUGMENTATION, [*TIMM_AUGMENTATION, *MIXING]], ids=["augmented", "mixed"])
def test_a_streamed_run_with_the_deit_parts_trains_to_the_in_memory_runs_figures(folder, tmp_path, extra):
    """timm's augmentation in the loader's workers draws each image as the in-memory batch draws it, and one
    process mixes its rows as the in-memory task mixes the batch: the figures agree to 1e-5 (the statistics'
    last bits), with or without workers (bit for bit)."""
    from speccond.harness.training.train import train

    task = f"imagefolder:{folder}?size=16"
    memory = train(config(task=task, val_size=4).with_overrides(extra), tmp_path / "memory", progress=False)
    streamed = train(config(task=f"{task}&stream=1", val_size=4).with_overrides(extra), tmp_path / "stream",
                     progress=False)
    workers = train(config(task=f"{task}&stream=1", val_size=4, num_workers=2).with_overrides(extra),
                    tmp_path / "workers", progress=False)
    plain = train(config(task=f"{task}&stream=1", val_size=4), tmp_path / "plain", progress=False)
    assert memory["step"] == streamed["step"] == 6 and memory["accuracy"] == streamed["accuracy"]
    assert abs(memory["loss"] - streamed["loss"]) < 1e-5 and abs(plain["loss"] - streamed["loss"]) > 1e-4
    for one, other in zip(rows(tmp_path / "memory"), rows(tmp_path / "stream"), strict=True):
        assert one["kind"] == other["kind"] and abs(one["loss"] - other["loss"]) < 1e-5
    assert rows(tmp_path / "stream") == rows(tmp_path / "workers")


def test_a_streamed_rank_mixes_its_own_rows_with_its_own_draws(folder):
    """Rank 0 mixes as the in-memory task does (seed alone); another rank seeds with (seed, rank): other draws."""
    from speccond.harness.training.training_tasks import training_task

    task = training_task(config(task=f"imagefolder:{folder}?size=16&stream=1", mixup=0.8, cutmix=1.0))
    images, labels = torch.randn(4, 3, 16, 16), torch.tensor([0, 1, 1, 0])
    first, again, other = (task.mix(images.clone(), labels, 7, rank) for rank in (0, 0, 1))  # timm mixes in place
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[0], other[0])


@pytest.mark.parametrize("extra", [[], [*TIMM_AUGMENTATION, *MIXING]], ids=["plain", "deit"])
@pytest.mark.parametrize("parts", [2, 3, 8])
def test_accumulated_slices_of_a_streamed_batch_give_the_gradient_of_the_whole_batch(folder, parts, extra):
    """One step's rows decoded, augmented and mixed once, then trained on in ``parts`` consecutive slices: the
    gradient of the whole batch's mean within tests/test_recipe_parts.py's tolerance."""
    from speccond.harness.models.run_model import model_for
    from speccond.harness.training.accumulation import backward_over
    from speccond.harness.training.distributed import Context
    from speccond.harness.training.precision import MixedPrecision
    from speccond.harness.training.training_tasks import training_task
    from tests.test_recipe_parts import assert_same_gradient

    chosen_config = config(task=f"imagefolder:{folder}?size=16&stream=1", accumulate_steps=parts).with_overrides(extra)
    step = 4  # epoch 1's second batch of 8: the loop's own (streaming.RankBatches)
    chosen = torch.randperm(24, generator=torch.Generator().manual_seed(chosen_config.run.seed * 1000 + 1))[8:16]
    found = {}
    for count in (1, parts):
        task, model = training_task(chosen_config), model_for(chosen_config)
        loss, _ = backward_over(task, model, chosen, step, Context(), MixedPrecision("float32", torch.device("cpu")),
                                count)
        found[count] = loss, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    (whole_loss, whole), (sliced_loss, sliced) = found[1], found[parts]
    assert sliced_loss == pytest.approx(whole_loss, rel=1e-6)
    assert whole.keys() == sliced.keys() and len(whole) > 5
    for name in whole:
        assert_same_gradient(sliced[name], whole[name], name)


def test_the_augmenting_dataset_pickles_for_spawned_workers_and_draws_from_the_seed_alone(folder):
    """What a worker started by spawn (macOS, Windows) receives: the copy gives image i under seed s the same
    pixels as the original, and another seed other pixels."""
    from speccond.harness.training.streaming import AugmentedImages
    from speccond.harness.training.training_tasks import training_task

    stream = training_task(config(task=f"imagefolder:{folder}?size=16&stream=1").with_overrides(TIMM_AUGMENTATION)).stream
    dataset = AugmentedImages(stream.splits["train"], stream.augmentation)
    copy = pickle.loads(pickle.dumps(dataset))
    image, label, index = dataset[(5, 123)]  # (3, 16, 16) standardised
    assert image.shape == (3, 16, 16) and index == 5 and label == stream.splits["train"].labels[5]
    assert torch.equal(copy[(5, 123)][0], image) and not torch.equal(dataset[(5, 124)][0], image)


@pytest.mark.parametrize("extra", [[], [*TIMM_AUGMENTATION, *MIXING, "accumulate_steps=2"]], ids=["plain", "deit"])
def test_a_streamed_run_resumed_mid_epoch_ends_with_the_same_bytes(folder, tmp_path, extra):
    """Killed after step 2 (a batch into epoch 1's 3), resumed: the loader starts at the resumed step's batch,
    and the metrics and final weights equal the uninterrupted run's exactly, with the recipe's parts too (their
    draws are functions of the step)."""
    from speccond.harness.training import checkpoint
    from speccond.harness.training.train import train

    chosen = config(task=f"imagefolder:{folder}?size=16&stream=1", num_workers=1,
                    checkpoint_every=2).with_overrides(extra)
    train(chosen, tmp_path / "whole", progress=False)
    assert train(chosen, tmp_path / "resumed", progress=False, stop_after=2) == {}
    train(chosen, tmp_path / "resumed", progress=False)
    assert rows(tmp_path / "whole") == rows(tmp_path / "resumed")
    weights = [(checkpoint.latest(tmp_path / run) / "model.safetensors").read_bytes() for run in ("whole", "resumed")]
    assert weights[0] == weights[1]


@pytest.mark.parametrize("setting, message", [
    ("stream=2", "stream must be 0"),
    ("num_workers", "num_workers=2 sets the processes that decode a streamed image folder"),
])
def test_a_wrong_streaming_setting_is_refused_in_one_line_and_nothing_is_written(folder, tmp_path, capsys, setting,
                                                                                  message):
    task = f"imagefolder:{folder}?size=16&" + ("stream=2" if setting == "stream=2" else "stream=1")
    sets = {"num_workers": ["--set", "num_workers=2"]}.get(setting, [])
    if setting == "num_workers":
        task = f"imagefolder:{folder}?size=16"  # held in memory: no worker has anything to decode
    out = tmp_path / "cmp"
    assert main(["compare", "--task", task, "--methods", "baseline", "--seeds", "1", *sets, "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1, error
    assert not out.exists()


@pytest.mark.parametrize("extra", [[], [*TIMM_AUGMENTATION, "accumulate_steps=2"]],
                         ids=["flip-and-shift", "timm-augmentation-accumulated"])
def test_torchrun_two_processes_stream_the_folder_and_shard_evaluation_to_the_one_process_figures(folder, tmp_path,
                                                                                                   extra):
    """torchrun --nproc_per_node 2 on gloo, a worker per rank: each rank decodes (and augments: the built-in flip
    and shift, or timm's RandAugment and random erasing) its rows of every global batch and evaluates its shard
    of the 10 test images (5 each, none twice); with accumulation each rank trains on its rows in 2 slices. The
    final figures are the one-process run's (loss to 1e-4, the same accuracy), and so are the per-epoch
    evaluation rows."""
    sets = [f"{key}={value}" for key, value in MODEL.items()] + [f"task=imagefolder:{folder}?size=16&stream=1",
                                                                 "num_workers=1", *extra]
    sets = [part for pair in sets for part in ("--set", pair)]
    single, double = one_and_two_processes(["train", *sets], tmp_path)
    one, two = (json.loads(run.stdout.strip().splitlines()[-1]) for run in (single, double))
    assert one["step"] == two["step"] == 6
    assert abs(one["loss"] - two["loss"]) < 1e-4 and one["accuracy"] == two["accuracy"]
    evaluations = [[r for r in rows(tmp_path / run) if r["kind"] == "eval"] for run in ("single", "double")]
    assert len(evaluations[0]) == len(evaluations[1]) == 2
    for a, b in zip(*evaluations):
        assert abs(a["loss"] - b["loss"]) < 1e-4 and a["accuracy"] == b["accuracy"]


def test_compare_streams_the_folder_end_to_end_and_caches_no_pixels(folder, tmp_path):
    out = tmp_path / "cmp"
    task = f"imagefolder:{folder}?size=16&stream=1"
    assert main(["compare", "--task", task, "--model", "timm:vit_small_patch16_224", "--methods", "baseline",
                 "--seeds", "1", "--set", "epochs=1", "--set", "batch_size=8", "--set", "num_workers=1",
                 "--set", "model_args=depth=1,patch_size=4,embed_dim=64,num_heads=2", "--out", str(out)]) == 0
    assert (out / "results.md").read_text().startswith(f"# speccond report: {task}")
    cached = sorted(path.name for path in (tmp_path / "data").rglob("*") if path.is_file())
    assert len(cached) == 1 and cached[0].startswith("statistics-")  # the normalisation's sums, no arrays
