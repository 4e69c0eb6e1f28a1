"""One rank of the sharded detection evaluation check (tests/test_detection_sharded_evaluation.py runs it under
torchrun, 2 processes, gloo): the test's Mask R-CNN (its config and weights from files) evaluated on the test
scenes the test wrote as the fashion-scenes dataset ($SPECCOND_DATA), by the task the training loop builds
(``training_task(config, context)``, as train.py does). A forward pre-hook on the detector records which
scenes this rank ran it on, matched by their pixels. Rank r writes rank{r}.json: {"metrics": the figures this
rank reports, "scenes_run": the test scene ids its model saw, in order}."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.distributed as dist

from speccond.harness.config.train_config import TrainConfig
from speccond.harness.models.run_model import model_for
from speccond.harness.training.distributed import Context
from speccond.harness.training.training_tasks import training_task


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--config", "--weights", "--out"):
        parser.add_argument(name, type=Path, required=True)
    args = parser.parse_args()
    context = Context.from_environment("cpu")
    config = TrainConfig.from_dict(json.loads(args.config.read_text()))
    task = training_task(config, context)
    model = model_for(config)
    model.load_state_dict(torch.load(args.weights, weights_only=True))
    pixels = task.scenes["test"].images.float().div(255)  # (N, 1, S, S), as batch_of hands them to the model
    scenes_run: list[int] = []

    def record(module, inputs):  # inputs: ([(1, S, S) image per scene],)
        for image in inputs[0]:
            (scene,) = [n for n in range(pixels.shape[0]) if torch.equal(pixels[n], image)]
            scenes_run.append(scene)

    model.register_forward_pre_hook(record)
    metrics = task.evaluate(model, "test")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"rank{context.rank}.json").write_text(json.dumps({"metrics": metrics, "scenes_run": scenes_run}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
