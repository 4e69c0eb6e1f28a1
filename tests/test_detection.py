"""Detection: the fashion-scenes generator, COCO AP, Mask R-CNN on XCiT / ViT trunks, training and resumption."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from speccond import data
import speccond
from speccond.data import fashion_mnist, fashion_scenes
from speccond.data.fashion_scenes import SceneConfig, generate, resize
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.models.run_model import model_for
from speccond.harness.tasks.detection.metrics import coco_evaluate, coco_ground_truth, detections
from speccond.harness.tasks.detection.task import batch_of
from speccond.harness.training import checkpoint
from speccond.harness.training.train import train

FASHION = Path("/usr/share/datasets/fashion-mnist")
needs_data = pytest.mark.skipif(
    not FASHION.is_dir(),
    reason="needs the Debian package: apt-get install dataset-fashion-mnist (./run installs it as root)",
)
# A detector small enough that a training step takes well under a second on one core.
TINY = TrainConfig().replaced(task="fashion-scenes", model="xcit-maskrcnn", method="spectral", patch_size=8, lr=3e-4, embed_dim=32, depth=2, num_heads=2, fpn_channels=16, batch_size=2, epochs=2, train_size=6,
                   val_size=2, test_size=4, warmup_steps=2, checkpoint_every=2, eval_batch_size=4, device="cpu")


def build_detector(config: TrainConfig):
    return model_for(config)  # the harness's model of a fashion-scenes run: Mask R-CNN, the method on its trunk


@pytest.fixture(scope="module")
def items():
    """The first 600 Fashion-MNIST test items, uint8 (600, 28, 28), and their labels."""
    images = fashion_mnist.read_idx(FASHION / "t10k-images-idx3-ubyte.gz")[:600]
    labels = fashion_mnist.read_idx(FASHION / "t10k-labels-idx1-ubyte.gz")[:600].long()
    return images, labels


@pytest.fixture(scope="module")
def scenes(items):
    return generate(*items, count=60, seed="test")


@pytest.fixture
def tiny_task(monkeypatch, items):
    """data.load / data.prepare answer the fashion-scenes task with 12 / 6 / 6 small generated scenes."""
    arrays = {}
    for split, count in (("train", 12), ("val", 6), ("test", 6)):
        for field, value in generate(*items, count=count, seed=split)._asdict().items():
            arrays[f"{split}_{field}"] = value
    monkeypatch.setattr(data, "load", lambda name: dict(arrays) if name == "fashion-scenes" else pytest.fail(name))
    monkeypatch.setattr(data, "prepare", lambda name: None)
    return arrays


def _truth_as_outputs(scenes, shift: float = 0.0) -> list[dict]:
    """Mask R-CNN-like outputs that repeat the ground truth (score 1), boxes and masks shifted right by ``shift``."""
    outputs = []
    for n in range(scenes.images.shape[0]):
        present = torch.nonzero(scenes.labels[n] >= 0).flatten()
        masks = (scenes.instances[n][None] == (present + 1)[:, None, None]).float()  # (k, S, S)
        outputs.append({"boxes": scenes.boxes[n, present].float() + torch.tensor([shift, 0.0, shift, 0.0]),
                        "labels": scenes.labels[n, present] + 1, "scores": torch.ones(len(present)),
                        "masks": masks.roll(int(shift), dims=-1).unsqueeze(1)})
    return outputs


# ---------------------------------------------------------------------------------------------- generator


@needs_data
def test_fixed_point_resize_is_bilinear_to_within_two_grey_levels(items):
    item = items[0][3]  # (28, 28)
    for side in (20, 31, 44):  # positions and weights rounded to 1/256 pixel: at most 1.8 levels off (200 items)
        exact = torch.nn.functional.interpolate(item[None, None].double(), size=(side, side), mode="bilinear",
                                                align_corners=False)[0, 0]
        assert (torch.from_numpy(resize(item.numpy(), side)).double() - exact).abs().max() <= 2.0


@needs_data
def test_generator_is_deterministic_and_each_split_stream_differs(items, scenes):
    again = generate(*items, count=60, seed="test")
    assert all(torch.equal(a, b) for a, b in zip(scenes, again))
    other = generate(*items, count=60, seed="other")
    assert not torch.equal(scenes.images, other.images)
    present = scenes.labels >= 0
    assert present.sum(1).min() >= 1 and present.sum(1).max() <= SceneConfig().max_objects
    used = scenes.sources[present]
    assert used.unique().numel() == used.numel()  # every source item at most once
    assert torch.equal(scenes.labels[present], items[1][used])  # the label is the item's class


@needs_data
def test_masks_boxes_and_pixels_are_the_pasted_items(items, scenes):
    """Redraw every instance from its source item and placement: its visible pixels are the item's pixels
    there, everything of its mask it does not show is covered by a later instance, the box is tight."""
    config = SceneConfig()
    occluded = 0
    for n in range(scenes.images.shape[0]):
        image, owner = scenes.images[n, 0].numpy(), scenes.instances[n].numpy()
        count = int((scenes.labels[n] >= 0).sum())
        assert set(np.unique(owner)) <= set(range(count + 1))
        for k in range(count):
            top, left, side, flipped = scenes.placements[n, k].tolist()
            scaled = resize(items[0][int(scenes.sources[n, k])].numpy(), side)
            scaled = scaled[:, ::-1] if flipped else scaled
            mask = np.zeros_like(owner, dtype=bool)
            mask[top : top + side, left : left + side] = scaled >= config.mask_threshold
            pasted = np.zeros_like(image)
            pasted[top : top + side, left : left + side] = scaled
            visible = owner == k + 1
            assert not (visible & ~mask).any()  # an instance shows only its own mask pixels
            assert np.array_equal(image[visible], pasted[visible])  # ... with the item's values
            hidden = mask & ~visible
            assert (owner[hidden] > k + 1).all()  # the rest is under later instances only
            occluded += bool(hidden.any())
            assert visible.sum() >= config.min_visible * mask.sum()  # too-occluded instances were dropped
            rows, cols = np.nonzero(visible)
            assert scenes.boxes[n, k].tolist() == [cols.min(), rows.min(), cols.max() + 1, rows.max() + 1]
        assert (image[owner == 0] <= config.texture_max).all()  # the rest is background texture
    assert occluded > 5  # the check above saw real occlusions


@needs_data
def test_splits_draw_from_disjoint_source_items(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path))
    monkeypatch.setattr(fashion_scenes, "SIZES", {"train": 30, "val": 20, "test": 20})
    arrays = fashion_scenes.parse({})
    train, val = (arrays[f"{s}_sources"][arrays[f"{s}_labels"] >= 0] for s in ("train", "val"))
    assert train.max() < fashion_scenes.VAL_FROM <= val.min()  # both from Fashion-MNIST's training items
    test = arrays["test_sources"][arrays["test_labels"] >= 0]
    assert test.max() < 10_000  # Fashion-MNIST's test items
    source = data.load("fashion-mnist")
    assert torch.equal(arrays["val_labels"][arrays["val_labels"] >= 0], source["train_labels"][val])


def test_the_spec_is_registered_and_pinned_but_not_an_image_classification_task():
    from speccond.harness.tasks.datasets import image_tasks

    spec = data.spec("fashion-scenes")
    assert spec.generated_sha256 and len(spec.generated_sha256) == 64 and spec.classes == fashion_mnist.CLASSES
    assert "fashion-scenes" not in image_tasks()


# ------------------------------------------------------------------------------------------------- metric


@needs_data
def test_coco_ap_is_one_on_the_ground_truth_and_lower_on_shifted_boxes(scenes):
    truth = coco_ground_truth(scenes.instances, scenes.labels, scenes.boxes)
    ids = list(range(scenes.images.shape[0]))
    perfect = coco_evaluate(truth, detections(ids, _truth_as_outputs(scenes)))
    assert {name: perfect[name] for name in ("box_ap", "box_ap50", "box_ap75", "mask_ap")} == pytest.approx(
        {"box_ap": 1.0, "box_ap50": 1.0, "box_ap75": 1.0, "mask_ap": 1.0})
    shifted = coco_evaluate(truth, detections(ids, _truth_as_outputs(scenes, shift=4.0)))
    assert shifted["box_ap"] < 0.8 and shifted["box_ap75"] < perfect["box_ap75"] and shifted["mask_ap"] < 0.8
    assert shifted["box_ap50"] > shifted["box_ap"]  # a 4 px shift keeps most boxes above IoU 0.5
    assert coco_evaluate(truth, [])["box_ap"] == 0.0


# -------------------------------------------------------------------------------------------------- model


@pytest.mark.parametrize("model", ["xcit-maskrcnn", "vit-maskrcnn"])
def test_spectral_conditions_every_attention_block_of_the_trunk(model):
    detector = build_detector(TINY.replaced(model=model, depth=3, method="spectral"))
    trunk = detector.backbone.trunk
    assert len(trunk.blocks) == 3 and speccond.is_conditioned(detector)
    attention = [name for name, module in detector.named_modules() if type(module).__name__ in ("XCA", "Attention")]
    assert attention == [f"backbone.trunk.blocks.{i}.attn" for i in range(3)]  # the trunk's, and nothing else has any
    rows = speccond.describe(detector)
    assert {(row.module, row.role) for row in rows} == {(f"{name}.qkv", role) for name in attention for role in "qkv"}
    assert all(row.scale == 10.0 and row.kappa_eff < row.kappa_w for row in rows)
    baseline = build_detector(TINY.replaced(model=model, depth=3, method="baseline"))
    assert not speccond.is_conditioned(baseline)


def test_lam_10_bounds_xcas_logits_by_the_temperature_but_makes_vits_nearly_one_hot():
    """scripts/detection_attention_at_init.py's explanation of docs/RESULTS.md's detection row: XCiT's XCA logits
    are cosines times the temperature whatever lam is; a ViT's grow like lam^2 and its attention collapses."""
    from speccond.diagnostics.entropy import row_entropy
    from tests.scripts import load_script

    script = load_script("detection_attention_at_init")
    tokens = torch.randn(2, 144, TINY.model.embed_dim)  # (B, N, C): 144 tokens, as a 96 px canvas in patches of 8
    for lam in (0.0, 10.0):
        config = TINY.replaced(model="xcit-maskrcnn", method="spectral" if lam else "baseline", lam=lam)
        attention = build_detector(config).backbone.trunk.blocks[0].attn
        logits = script.attention_logits(attention, tokens)  # (B, H, d, d)
        assert logits.shape == (2, TINY.model.num_heads, 16, 16)
        assert logits.abs().max() <= attention.temperature.abs().max() * (1 + 1e-5)
    entropy = {}
    for lam in (0.0, 10.0):
        config = TINY.replaced(model="vit-maskrcnn", method="spectral" if lam else "baseline", lam=lam)
        attention = build_detector(config).backbone.trunk.blocks[0].attn
        p = script.attention_logits(attention, tokens).softmax(-1)  # (B, H, N, N)
        entropy[lam] = float(row_entropy(p).mean().detach())
    assert entropy[0.0] > 0.95 * np.log(144) and entropy[10.0] < 0.3 * np.log(144), entropy


@needs_data
@pytest.mark.parametrize("method", ["baseline", "spectral"])
def test_a_training_step_and_an_evaluation_step_run(scenes, method):
    model = build_detector(TINY.replaced(method=method))
    images, targets = batch_of(scenes, torch.arange(2), flip=torch.tensor([True, False]))
    batch, _ = model.transform(images)  # torchvision's resizing and normalisation: the scenes keep their 96 px
    assert batch.tensors.shape == (2, 1, 96, 96)
    assert torch.allclose(batch.tensors[0] * model.transform.image_std[0] + model.transform.image_mean[0], images[0], atol=1e-6)
    model.train()
    losses = model(images, targets)
    assert set(losses) == {"loss_classifier", "loss_box_reg", "loss_mask", "loss_objectness", "loss_rpn_box_reg"}
    sum(losses.values()).backward()
    assert all(torch.isfinite(v) for v in losses.values())
    trunk = dict(model.backbone.trunk.named_parameters())  # a conditioned weight is stored under parametrizations
    stored = trunk.get("blocks.0.attn.qkv.weight", trunk.get("blocks.0.attn.qkv.parametrizations.weight.original"))
    assert stored.grad is not None and stored.grad.abs().sum() > 0
    model.eval()
    with torch.no_grad():
        outputs = model(images)
    assert len(outputs) == 2
    for output in outputs:
        n = output["boxes"].shape[0]
        assert output["boxes"].shape == (n, 4) and output["masks"].shape == (n, 1, 96, 96)
        assert output["labels"].shape == output["scores"].shape == (n,)


@needs_data
def test_flipped_targets_follow_the_flipped_image(scenes):
    (plain,), (plain_target,) = batch_of(scenes, torch.tensor([0]))
    (flipped,), (target,) = batch_of(scenes, torch.tensor([0]), flip=torch.tensor([True]))
    assert torch.equal(flipped, plain.flip(-1)) and torch.equal(target["masks"], plain_target["masks"].flip(-1))
    for box, mask in zip(target["boxes"], target["masks"]):
        rows, cols = torch.nonzero(mask, as_tuple=True)
        assert box.tolist() == [cols.min(), rows.min(), cols.max() + 1, rows.max() + 1]


# -------------------------------------------------------------------------------------- training, resumption


@needs_data
@pytest.mark.parametrize("method", ["baseline", "spectral"])
def test_killed_run_resumes_to_the_same_weights(tiny_task, tmp_path, method):
    config = TINY.replaced(method=method)  # 3 steps per epoch, 6 in all, checkpoints every 2
    straight = train(config, tmp_path / "straight", progress=False)
    assert straight["kind"] == "eval" and straight["step"] == 6 and 0 <= straight["box_ap"] <= 1
    assert "accuracy" not in straight and straight["scenes"] == 4  # COCO figures under their own keys
    assert train(config, tmp_path / "killed", stop_after=5, progress=False) == {}  # dies after step 5
    resumed = train(config, tmp_path / "killed", progress=False)  # resumes from the checkpoint of step 4
    assert resumed == straight
    a = checkpoint.latest(tmp_path / "straight") / "model.safetensors"
    b = checkpoint.latest(tmp_path / "killed") / "model.safetensors"
    assert a.read_bytes() == b.read_bytes()
    rows = [json.loads(line) for line in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows if r["kind"] == "val"] == [1, 2] and [r["kind"] for r in rows].count("eval") == 1
    assert train(config, tmp_path / "killed", progress=False) == straight  # finished: the recorded row
    with pytest.raises(ValueError, match="different config"):
        train(config.replaced(lr=0.5), tmp_path / "killed", progress=False)


@needs_data
def test_cli_compare_and_report_for_the_detection_task(tiny_task, tmp_path, capsys):
    from speccond.harness.cli import main

    # target_kappa (the bound lam=auto aims at) is refused beside a numeric lam: TINY's default is left out
    sets = [f"{k}={v}" for k, v in TINY.replaced(epochs=1).to_dict().items()
            if k not in ("task", "model", "method", "seed", "target_kappa")]
    out = tmp_path / "compare"
    args = ["compare", "--task", "fashion-scenes", "--model", "xcit-maskrcnn", "--seeds", "2", "--out", str(out),
            "--methods", "baseline,spectral", *[word for s in sets for word in ("--set", s)]]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "| baseline | 2 | 0/2 |" in printed and "| spectral lam=10 | 2 | 0/2 |" in printed
    for method in ("baseline", "spectral"):
        for seed in (0, 1):
            recorded = json.loads((out / method / f"seed-{seed}" / "config.json").read_text())
            assert "kind" not in recorded and recorded["config"]["task"] == "fashion-scenes"
            assert recorded["config"]["seed"] == seed
            assert (out / method / f"seed-{seed}" / "timing.json").is_file()
    results = json.loads((out / "results.json").read_text())
    assert [g["label"] for g in results["groups"]] == ["baseline", "spectral lam=10"]
    assert set(results["groups"][1]["differences"]) == {"box_ap", "mask_ap"}
    before = (out / "results.md").read_text()
    assert "](detection.png)" in before and (out / "detection.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (out / "detection.png").unlink()
    assert main(["report", str(out)]) == 0  # rebuilt from the folder alone: the same table and the figure
    assert (out / "results.md").read_text() == before and (out / "detection.png").is_file()


@needs_data
def test_a_detection_run_written_before_the_one_harness_resumes_and_reports(tiny_task, tmp_path):
    """Run directories of detection/train.py (config.json with "kind": "detection" and DetectionConfig's
    fields, a final row with "split" and "accuracy") stay readable: resumed, they return their recorded row;
    reported, they give the table of a new run."""
    from speccond.harness.reporting.report import write_report

    new, old = tmp_path / "new" / "baseline" / "seed-0", tmp_path / "old" / "baseline" / "seed-0"
    config = TINY.replaced(method="baseline", epochs=1)
    final = train(config, new, progress=False)
    shutil.copytree(new, old)
    record = json.loads((old / "config.json").read_text())
    for field in ("attention_norm", "track_every", "landmarks", "init_from"):  # DetectionConfig had none of these
        del record["config"][field]
    (old / "config.json").write_text(json.dumps({"kind": "detection", **record}))
    rows = [json.loads(line) for line in (old / "metrics.jsonl").read_text().splitlines()]
    rows[-1] = {**rows[-1], "split": "test", "accuracy": rows[-1]["box_ap"]}
    (old / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert train(config, old, progress=False) == rows[-1]  # finished: recorded row, nothing trained
    assert final["box_ap"] == rows[-1]["box_ap"]
    table = lambda folder: write_report([folder], folder).markdown.split("## Runs")[1].split("## Commands")[0]  # noqa: E731
    assert table(tmp_path / "old") == table(tmp_path / "new")


@needs_data
def test_torchrun_trains_the_detection_task_data_parallel(items, tmp_path):
    """Detection goes through the one loop's Context: under torchrun each rank takes its scenes of every
    batch and DDP averages the gradients. Mask R-CNN normalises each loss over the anchors and proposals a
    rank samples, so two ranks are near one process, not equal to it: the step moves the weights the way
    one process does (the cosine of the two updates of the trunk, 0.9996 measured)."""
    import os
    import subprocess
    import sys

    from safetensors.torch import load_file, save_file

    home = tmp_path / "data"
    (home / "fashion-scenes").mkdir(parents=True)
    arrays = {}
    for split, count in (("train", 8), ("val", 2), ("test", 4)):
        for field, value in generate(*items, count=count, seed=split)._asdict().items():
            arrays[f"{split}_{field}"] = value.contiguous()
    save_file(arrays, str(home / "fashion-scenes" / "arrays.safetensors"))
    env = {**os.environ, "SPECCOND_DATA": str(home), "OMP_NUM_THREADS": "1"}
    overrides = {**{k: v for k, v in TINY.to_dict().items() if k not in ("seed", "device", "val_size", "target_kappa")},
                 "method": "spectral", "epochs": 1, "train_size": 8, "batch_size": 4}
    sets = [word for k, v in overrides.items() for word in ("--set", f"{k}={v}")]
    runs = {"single": [sys.executable, "-m", "speccond"],
            "double": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "speccond"]}
    finals = {}
    for name, program in runs.items():
        done = subprocess.run([*program, "train", "--out", str(tmp_path / name), *sets], env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        finals[name] = json.loads(done.stdout.strip().splitlines()[-1])  # only rank 0 prints
    assert finals["single"]["step"] == finals["double"]["step"] == 2
    assert all(0 <= final["box_ap"] <= 1 and "accuracy" not in final for final in finals.values())
    weights = {name: load_file(str(checkpoint.latest(tmp_path / name) / "model.safetensors")) for name in runs}
    start = model_for(TINY.replaced(**overrides, val_size=0)).state_dict()  # the seeded initial model
    names = [n for n, w in weights["single"].items() if n.startswith("backbone.trunk.") and w.is_floating_point()]
    assert "backbone.trunk.blocks.0.attn.qkv.parametrizations.weight.original" in names
    moved = {run: torch.cat([(weights[run][n] - start[n]).flatten() for n in names]) for run in runs}
    cosine = torch.nn.functional.cosine_similarity(moved["single"], moved["double"], dim=0)
    assert moved["single"].norm() > 0 and cosine > 0.99, float(cosine)  # 0.9996 measured


@needs_data
@pytest.mark.parametrize("other", ["spectral", "sigma-reparam"])  # sigma-reparam: the peer XCiT tasks take
def test_the_tuning_protocol_runs_the_detection_task_on_box_ap(tiny_task, tmp_path, other):
    """speccond tune on detection, as scripts/protocol.sh runs it: tuning runs score the stored validation
    scenes, the choice and the final table read box AP, and the final runs score test once."""
    from speccond.diagnostics.records import read_metrics
    from speccond.harness.cli import main

    sets = [f"{k}={v}" for k, v in TINY.to_dict().items()
            if k not in ("task", "model", "method", "seed", "lr", "val_size", "epochs", "tuning", "flush_denormal",
                         "target_kappa")]
    out = tmp_path / "tune"
    assert main(["tune", "--task", "fashion-scenes", "--model", "xcit-maskrcnn", "--val-size", "2", "--lrs", "3e-4,1e-3",
                 "--tuning-seeds", "1", "--final-seeds", "2", "--arms", f"baseline,{other}", "--out", str(out),
                 *[word for s in sets for word in ("--set", s)], "--set", "epochs=1"]) == 0
    choice = json.loads((out / "choice.json").read_text())
    for arm in ("baseline", other):
        for lr, (value,) in choice[arm]["validation"].items():
            rows = read_metrics(out / "tune" / f"{arm}-lr={lr}" / "seed-0" / "metrics.jsonl")
            (final,) = [r for r in rows if r["kind"] == "eval"]
            assert final["split"] == "val" and final["box_ap"] == value
    record = json.loads((out / "final" / "holm.json").read_text())
    assert record["metric"] == "box_ap" and record["owed"] == 0 and record["comparisons"][0]["arm"] == other
    for seed in ("100", "101"):
        rows = read_metrics(out / "final" / other / f"seed-{seed}" / "metrics.jsonl")
        (final,) = [r for r in rows if r["kind"] == "eval"]
        assert "split" not in final and final["box_ap"] == record["arms"][other]["figures"][seed]
    assert (out / "final" / "detection.png").is_file()
