"""What the training harness costs a timm model's training step, and how much of the step is data.

    PYTHONPATH=src .venv/bin/python benchmarks/harness_overhead.py --pairs 5 --steps 60
    PYTHONPATH=src .venv/bin/python benchmarks/harness_overhead.py --quick       # a smoke run, seconds

Both sides train the same run: a registered timm model (``timm:vit_tiny_patch16_224`` with its head width
of 64, 2 blocks, patch 4, on Fashion-MNIST's 28 x 28 images; 49 patch tokens and a class token) conditioned
with SVD per head, the same seeded batches with the same flips and shifts, AdamW with the same decay
groups, the warm-up and cosine schedule, gradient clipping, then one evaluation on the first test images.

    harness  ``speccond.harness.training.train.train``: the run directory, config.json, metrics rows every
             10 steps, the divergence check, the progress bar off, a checkpoint at the end
    plain    a loop written out here with the harness's parts only where they define the run (the model
             builder, the data arrays, the optimiser's decay groups, the lr schedule, the augmentation),
             timing the batch assembly (index, augment) apart from the rest of each step

Pairs alternate which side runs first, so machine noise hits both alike; the figure is the median of the
per-pair ratios harness / plain with their range, in wall time and in this process's CPU time (less
disturbed by other jobs), target <= 1.03. Both sides must end with the same test accuracy and loss (checked:
the same work was timed). The data share is the plain loop's batch-assembly time over its step time:
the in-memory arrays of the built-in tasks, so it is what indexing and augmenting costs, not disk reads.
Subnormal floats are flushed on both sides (``flush_denormal=1``).
"""
from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from speccond.harness.config.train_config import TrainConfig
from speccond.harness.tasks.datasets import load_task
from speccond.harness.training.optimizer import adamw
from speccond.harness.training.preflight import built_model
from speccond.harness.training.recipe import learning_rate
from speccond.harness.training.train import train
from speccond.harness.training.training_tasks import augment, evaluate

warnings.filterwarnings("ignore")
TARGET = 1.03


def benchmark_config(steps: int, batch: int, test_size: int) -> TrainConfig:
    return TrainConfig().replaced(
        task="fashion-mnist", model="timm:vit_tiny_patch16_224", model_args="patch_size=4,depth=2",
        method="spectral-svd", epochs=1, train_size=steps * batch, test_size=test_size, batch_size=batch,
        warmup_steps=max(1, steps // 10), checkpoint_every=10**6, flush_denormal=1, seed=0)


def plain_loop(config: TrainConfig) -> tuple[dict, float, float]:
    """(final figures, seconds assembling batches, seconds of the whole loop) of the run, written out."""
    data = load_task(config)
    model = built_model(config)
    exempt = model.no_weight_decay() if hasattr(model, "no_weight_decay") else ()
    optimizer = adamw(model, config.optimizer.lr, config.optimizer.weight_decay, exempt_names=exempt)
    samples = data["train_x"].shape[0]
    steps_per_epoch = math.ceil(samples / config.data.batch_size)
    total = steps_per_epoch * config.optimizer.epochs
    assembling = 0.0
    start = time.perf_counter()
    for step in range(total):
        epoch, index = divmod(step, steps_per_epoch)
        before = time.perf_counter()
        order = torch.randperm(samples, generator=torch.Generator().manual_seed(config.run.seed * 1000 + epoch))
        chosen = order[index * config.data.batch_size : (index + 1) * config.data.batch_size]
        images = augment(data["train_x"][chosen], torch.Generator().manual_seed(config.run.seed * 10**6 + step))  # (B, C, H, W)
        labels = data["train_y"][chosen]  # (B,)
        assembling += time.perf_counter() - before
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(config, step, total)
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), config.optimizer.grad_clip)
        optimizer.step()
    final = evaluate(model, data["test_x"], data["test_y"], config.data.eval_batch_size)
    return final, assembling, time.perf_counter() - start


def timed(run) -> tuple[object, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = run()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def one_pair(config: TrainConfig, index: int, scratch: Path) -> dict:
    def harness():
        return train(config, scratch / f"run-{index}", progress=False)

    def plain():
        torch.set_flush_denormal(True)
        try:
            return plain_loop(config)
        finally:
            torch.set_flush_denormal(False)

    sides = {}
    for name in (("plain", "harness") if index % 2 == 0 else ("harness", "plain")):
        sides[name] = timed(harness if name == "harness" else plain)
    figures, (_, assembling, loop) = sides["harness"][0], sides["plain"][0]
    plain_figures = sides["plain"][0][0]
    if (figures["accuracy"], round(figures["loss"], 6)) != (plain_figures["accuracy"], round(plain_figures["loss"], 6)):
        raise SystemExit(f"the two sides trained different runs: harness {figures}, plain {plain_figures}")
    return {"wall": sides["harness"][1] / sides["plain"][1], "cpu": sides["harness"][2] / sides["plain"][2],
            "data_share": assembling / loop, "step_seconds": loop / (config.data.train_size // config.data.batch_size)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="2 pairs of 6 steps: a smoke run")
    args = parser.parse_args(argv)
    pairs, steps = (2, 6) if args.quick else (args.pairs, args.steps)
    config = benchmark_config(steps, args.batch, test_size=200)
    print(f"{config.model.name} ({config.model.model_args}), {config.method.name}, {steps} steps of {args.batch} Fashion-MNIST "
          f"images, {torch.get_num_threads()} thread(s), subnormals flushed")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for index in range(pairs):
            rows.append(one_pair(config, index, Path(scratch)))
            row = rows[-1]
            print(f"pair {index}: harness / plain {row['cpu']:.4f} CPU ({row['wall']:.4f} wall); "
                  f"plain step {row['step_seconds'] * 1000:.0f} ms, data {100 * row['data_share']:.1f} % of it")
    for key, name in (("cpu", "CPU"), ("wall", "wall")):
        values = sorted(row[key] for row in rows)
        print(f"median harness / plain, {name} time: {statistics.median(values):.4f} "
              f"(range {values[0]:.4f} to {values[-1]:.4f}; target <= {TARGET})")
    shares = sorted(row["data_share"] for row in rows)
    print(f"data loading share of the plain step: median {100 * statistics.median(shares):.1f} % "
          f"(range {100 * shares[0]:.1f} to {100 * shares[-1]:.1f} %)")


if __name__ == "__main__":
    main()
