"""Detection evaluation under torchrun is sharded and scored once (detection/task.py's ``evaluate``, reached
through the task train.py builds): 2 gloo processes each run Mask R-CNN on their test scenes alone (rank,
rank + world, ...; 9 scenes, so 5 and 4, in other batches than one process's), gather the detections and
compute COCO AP over all of them, and report exactly the one-process figures: the rows are gathered, not the
APs averaged, so the tolerance is none (this relies on a scene's detections not depending on which scenes
share its batch, as holds for eval-mode Mask R-CNN on the CPU)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from safetensors.torch import save_file

from speccond.data import fashion_mnist
from speccond.data.fashion_scenes import generate
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.models.run_model import model_for
from speccond.harness.tasks.detection.task import batch_of, evaluate
from tests.torchrun import two_processes

pytest.importorskip("torchvision")
pytest.importorskip("pycocotools")

FASHION = Path("/usr/share/datasets/fashion-mnist")
pytestmark = pytest.mark.skipif(not FASHION.is_dir(), reason="needs the Debian package dataset-fashion-mnist")
WORKER = Path(__file__).parent / "distributed" / "detection_eval_worker.py"
SCENES = 9
CONFIG = TrainConfig().replaced(task="fashion-scenes", model="xcit-maskrcnn", method="spectral", patch_size=8, embed_dim=32, depth=2, num_heads=2,
                     fpn_channels=16, eval_batch_size=4, device="cpu")


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory) -> tuple[dict, list[dict]]:
    """The one-process figures of a detector trained 20 steps on the scenes (so its AP is not 0), and what
    each of the 2 ranks reports for the same weights and scenes."""
    out = tmp_path_factory.mktemp("detection-sharded")
    items = fashion_mnist.read_idx(FASHION / "t10k-images-idx3-ubyte.gz")[:600]
    labels = fashion_mnist.read_idx(FASHION / "t10k-labels-idx1-ubyte.gz")[:600].long()
    scenes = generate(items, labels, count=SCENES, seed="sharded")
    arrays = {}  # the fashion-scenes dataset the worker's task reads: these 9 scenes as its test split
    for split, stored in (("train", generate(items, labels, count=2, seed="train")), ("val", scenes), ("test", scenes)):
        arrays.update({f"{split}_{field}": value.clone() for field, value in stored._asdict().items()})
    (out / "data" / "fashion-scenes").mkdir(parents=True)
    save_file(arrays, str(out / "data" / "fashion-scenes" / "arrays.safetensors"))
    model = model_for(CONFIG)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    with torch.random.fork_rng():
        for step in range(20):
            torch.manual_seed(step)  # the batch, and Mask R-CNN's anchor and proposal sampling
            images, targets = batch_of(scenes, torch.randperm(SCENES)[:3])
            optimizer.zero_grad()
            sum(model(images, targets).values()).backward()
            optimizer.step()
    whole = evaluate(model, scenes, CONFIG.data.eval_batch_size)  # one process: no process group
    torch.save(model.state_dict(), out / "weights.pt")
    (out / "config.json").write_text(json.dumps(CONFIG.to_dict()))
    two_processes(WORKER, ["--config", str(out / "config.json"), "--weights", str(out / "weights.pt"),
                           "--out", str(out / "ranks")], {"SPECCOND_DATA": str(out / "data")})
    return whole, [json.loads((out / "ranks" / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def test_two_ranks_report_exactly_the_one_process_figures(evaluated):
    whole, ranks = evaluated
    assert whole["box_ap"] > 0 and whole["mask_ap"] > 0 and whole["scenes"] == SCENES  # not an equality of zeros
    for rank in ranks:
        assert rank["metrics"] == whole  # every figure, exactly, on every rank


def test_each_rank_ran_the_model_on_its_own_scenes_only(evaluated):
    _, ranks = evaluated
    assert [rank["scenes_run"] for rank in ranks] == [[0, 2, 4, 6, 8], [1, 3, 5, 7]]
