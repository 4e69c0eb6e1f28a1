"""Your own images as a task (speccond/data/image_folder.py): a generated folder of PNGs in torchvision's
ImageFolder layout is read, resized and cached as the built-in image datasets are, trains end to end with a
timm model by name, and is read again when the folder changes; a folder in another layout is refused in one
line before anything is written."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from speccond.harness.cli import main
from tests.torchrun import one_and_two_processes


def write_folder(root, per_class=(12, 4), size=(20, 24), classes=("spots", "stripes")):
    """root/train/<class>/<i>.png and root/test/<class>/<i>.png: stripes vs a bright block, seeded."""
    rng = np.random.default_rng(0)
    for split, count in zip(("train", "test"), per_class):
        for label, name in enumerate(classes):
            (root / split / name).mkdir(parents=True, exist_ok=True)
            for i in range(count):
                pixels = rng.integers(0, 60, (*size, 3), dtype=np.uint8)
                if label:
                    pixels[::4] += 180
                else:
                    pixels[8:12, 8:14] += 190
                Image.fromarray(pixels).save(root / split / name / f"{i}.png")
    return root


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "data"))
    return write_folder(tmp_path / "shapes")


def test_the_folder_is_read_as_uint8_images_with_imagefolders_classes_and_a_manual_resize(folder):
    from torchvision.transforms import v2

    from speccond import data

    arrays = data.load(f"imagefolder:{folder}?size=16")
    assert arrays["train_images"].shape == (24, 3, 16, 16) and arrays["train_images"].dtype == torch.uint8
    assert arrays["test_images"].shape == (8, 3, 16, 16)
    assert arrays["train_labels"].tolist() == [0] * 12 + [1] * 12  # classes sorted by name: spots, stripes
    first = sorted((folder / "train" / "spots").iterdir())[0]
    pixels = torch.from_numpy(np.asarray(Image.open(first).convert("RGB"))).permute(2, 0, 1)  # (3, H, W)
    expected = v2.Compose([v2.Resize(16, antialias=True), v2.CenterCrop(16)])(pixels)
    assert torch.equal(arrays["train_images"][0], expected)


def test_a_changed_folder_is_read_again_not_served_from_the_cache(folder):
    from speccond import data

    name = f"imagefolder:{folder}?size=8"
    first = data.prepare(name)
    assert data.prepare(name) == first  # unchanged: the same cache
    Image.fromarray(np.zeros((20, 24, 3), dtype=np.uint8)).save(folder / "train" / "spots" / "new.png")
    assert data.prepare(name) != first and data.load(name)["train_images"].shape[0] == 25


def test_compare_trains_a_timm_model_on_the_folder_and_reports_it(folder, tmp_path):
    out = tmp_path / "cmp"
    task = f"imagefolder:{folder}?size=16"
    assert main(["compare", "--task", task, "--model", "timm:vit_small_patch16_224", "--methods",
                 "baseline,spectral-svd", "--seeds", "1", "--set", "epochs=2", "--set", "batch_size=8",
                 "--set", "val_size=4", "--set", "model_args=depth=1,patch_size=4", "--out", str(out)]) == 0
    report = (out / "results.md").read_text()
    assert report.startswith(f"# speccond report: {task}, timm:vit_small_patch16_224 (depth=1,patch_size=4)")
    rows = [json.loads(line) for line in (out / "spectral-svd" / "seed-0" / "metrics.jsonl").read_text().splitlines()]
    assert any(r["kind"] == "eval" and r.get("split", "test") == "test" for r in rows)
    assert any(r["kind"] == "val" for r in rows)  # val_size carved out of train/, evaluated each epoch


@pytest.mark.parametrize("layout, message", [
    ("no test split", "is not an image folder: expected"),
    ("other classes", "must name the same classes"),
    ("size", "size must be a whole number of pixels"),
])
def test_a_folder_in_another_layout_is_refused_in_one_line_and_nothing_is_written(tmp_path, monkeypatch, capsys,
                                                                                   layout, message):
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "data"))
    root = tmp_path / "images"
    if layout == "no test split":
        write_folder(root, per_class=(3, 0))
        shutil.rmtree(root / "test")
    elif layout == "other classes":
        write_folder(root, per_class=(3, 2))
        (root / "test" / "stripes").rename(root / "test" / "zigzags")
    else:
        write_folder(root, per_class=(3, 2))
    task = f"imagefolder:{root}" + ("?size=big" if layout == "size" else "")
    out = tmp_path / "cmp"
    assert main(["compare", "--task", task, "--methods", "baseline", "--seeds", "1", "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1, error
    assert not out.exists() and not (tmp_path / "data").exists()


def test_torchrun_two_processes_train_a_timm_model_on_the_folder_as_one_process_does(folder, tmp_path):
    """Your model on your images, data-parallel: torchrun --nproc_per_node 2 on gloo, each rank its half of
    every global batch, gives the one-process run's final figures (loss to 1e-4, the same test accuracy)."""

    sets = ["--set", f"task=imagefolder:{folder}?size=16", "--set", "model=timm:vit_small_patch16_224",
            "--set", "model_args=depth=1,patch_size=4,embed_dim=64,num_heads=2", "--set", "batch_size=8",
            "--set", "epochs=2", "--set", "method=spectral-svd", "--set", "warmup_steps=1"]
    single, double = one_and_two_processes(["train", *sets], tmp_path)
    one, two = (json.loads(run.stdout.strip().splitlines()[-1]) for run in (single, double))
    assert one["step"] == two["step"] == 6
    assert abs(one["loss"] - two["loss"]) < 1e-4 and one["accuracy"] == two["accuracy"]


@pytest.mark.parametrize("stream", ["", "?stream=1"])
def test_a_truncated_jpeg_is_one_line_naming_its_file(tmp_path, monkeypatch, capsys, stream):
    """Read whole, the folder is refused before anything is written; streamed, its images are decoded as the run
    reads them (the first pass, for the pixel statistics), so the run stops there, naming the file."""
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "data"))
    root = write_folder(tmp_path / "images", per_class=(3, 2))
    bad = root / "train" / "spots" / "cut.jpg"
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (20, 24, 3), dtype=np.uint8)).save(bad, quality=90)
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])  # a copy cut short
    out = tmp_path / "cmp"
    argv = ["compare", "--task", f"imagefolder:{root}{stream}", "--methods", "baseline", "--seeds", "1",
            "--set", "model=timm:vit_small_patch16_224", "--set", "model_args=depth=1,patch_size=4,embed_dim=64,num_heads=2",
            "--out", str(out)]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert f"{bad}: unreadable image (OSError: " in error and "replace it or remove it" in error, error
    assert len(error.splitlines()) == 1 and "Traceback" not in error, error
    assert not out.exists() if not stream else not list(out.rglob("config.json"))
