"""What the training harness costs: ``train()`` against a bare loop doing the same training.

    .venv/bin/python benchmarks/harness_overhead.py [--steps 200] [--repeats 5]

Both sides load the same task, build the same model, take the same seeded batches with the same
augmentation, clip, step AdamW and evaluate once at the end. The harness adds its bookkeeping:
metrics.jsonl rows, atomic checkpoints (every 100 steps and at the end), the progress bar, the loss
check for divergence and the config record. Pairs alternate (bare, harness) so that machine noise hits
both alike; the figure is the median of the per-pair ratios harness / bare with its range, in CPU
time of this process (``time.process_time``, one thread), which other jobs on the machine disturb far
less than wall time; wall-time ratios are printed too.
"""
from __future__ import annotations

import argparse
import math
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from speccond import data
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.models.run_model import build_model
from speccond.harness.tasks.datasets import task_shape
from speccond.harness.training.train import augment, evaluate, learning_rate, load_task, make_optimizer, train


def bare_loop(config: TrainConfig) -> float:
    """The same training as train(config), without any bookkeeping; returns the final accuracy."""
    task = load_task(config)
    model = build_model(config, task_shape(config.task))
    optimizer = make_optimizer(model, config)
    samples = task["train_x"].shape[0]
    steps_per_epoch = math.ceil(samples / config.batch_size)
    total = steps_per_epoch * config.epochs
    for step in range(total):
        epoch, index = divmod(step, steps_per_epoch)
        order = torch.randperm(samples, generator=torch.Generator().manual_seed(config.seed * 1000 + epoch))
        batch = order[index * config.batch_size : (index + 1) * config.batch_size]
        images = augment(task["train_x"][batch], torch.Generator().manual_seed(config.seed * 10**6 + step))
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(config, step, total)
        loss = F.cross_entropy(model(images), task["train_y"][batch])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
    return evaluate(model, task["test_x"], task["test_y"])["accuracy"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data.prepare("fashion-mnist")
    config = TrainConfig(embed_dim=64, patch_size=7, batch_size=128, train_size=128 * args.steps, test_size=1000,
                         epochs=1, warmup_steps=20, method="spectral", lam=1.0)
    ratios = []
    for repeat in range(args.repeats):
        started, wall = time.process_time(), time.perf_counter()
        bare_accuracy = bare_loop(config)
        bare, bare_wall = time.process_time() - started, time.perf_counter() - wall
        folder = Path(tempfile.mkdtemp(prefix="harness-"))
        started, wall = time.process_time(), time.perf_counter()
        harness_accuracy = train(config, folder, progress=True)["accuracy"]
        harness, harness_wall = time.process_time() - started, time.perf_counter() - wall
        shutil.rmtree(folder)
        assert bare_accuracy == harness_accuracy, "the two loops must do the same training"
        ratios.append(harness / bare)
        print(f"pair {repeat}: CPU bare {bare:.2f} s, harness {harness:.2f} s, ratio {harness / bare:.3f} "
              f"(wall ratio {harness_wall / bare_wall:.3f})")
    print(f"harness / bare over {args.steps} steps: median {statistics.median(ratios):.3f} "
          f"[min {min(ratios):.3f}, max {max(ratios):.3f}], {args.repeats} pairs, {args.threads} thread(s)")


if __name__ == "__main__":
    main()
