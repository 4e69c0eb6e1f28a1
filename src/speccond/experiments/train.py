"""One training run, readable top to bottom: ``train(config, run_dir)``; resumable at any step.

The run directory holds config.json (the config, versions, seed, command), metrics.jsonl (rows as they
happen: "train" every 10 steps, "eval" after each epoch, tracker rows if asked) and checkpoints/
(checkpoint.py). Data order and augmentation are functions of (seed, epoch, step), so a run resumed from
any checkpoint ends with the same weights, bit for bit, as one that was never interrupted.
"""
from __future__ import annotations

import json
import logging
import math
import platform
import sys
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

import speccond
from speccond.experiments import checkpoint
from speccond.experiments.config import TrainConfig

log = logging.getLogger(__name__)
TRAIN_ROW_EVERY = 10


def build_model(config: TrainConfig, image_size: int, channels: int, classes: int) -> nn.Module:
    """A timm VisionTransformer for small images (CLS token, no pretrained weights), conditioned or not."""
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(config.seed)
    model = VisionTransformer(
        img_size=image_size, patch_size=config.patch_size, in_chans=channels, num_classes=classes,
        embed_dim=config.embed_dim, depth=config.depth, num_heads=config.num_heads,
    )
    if config.method == "spectral":
        speccond.apply(model, speccond.SpectralConfig(lam=config.lam, correction=config.correction))
    elif config.method == "spectral-svd":
        speccond.apply(model, speccond.SpectralConfig(correction="svd"))
    elif config.method == "shifted-init":  # W0 + C as a plain initialisation: decay then pulls it to 0, not to C
        speccond.apply(model, speccond.SpectralConfig(lam=config.lam))
        speccond.remove(model, merge=True)
    return model


def load_task(config: TrainConfig) -> dict[str, torch.Tensor]:
    """Images as float (N, C, H, W) standardised with the training mean and std; int64 labels."""
    from speccond import data

    arrays = data.load(config.task)
    order = torch.randperm(arrays["train_images"].shape[0], generator=torch.Generator().manual_seed(config.seed))
    train_index = order[: config.train_size or None]
    test_count = config.test_size or arrays["test_images"].shape[0]
    train = arrays["train_images"][train_index].float().div(255).unsqueeze(1)  # (N, 1, 28, 28)
    test = arrays["test_images"][:test_count].float().div(255).unsqueeze(1)
    mean, std = train.mean(), train.std()
    return {
        "train_x": (train - mean) / std,
        "train_y": arrays["train_labels"][train_index],
        "test_x": (test - mean) / std,
        "test_y": arrays["test_labels"][:test_count],
    }


def augment(images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random horizontal flip and a random shift of up to 2 pixels (zero padded): (B, C, H, W)."""
    flip = torch.rand(images.shape[0], generator=generator) < 0.5
    images = torch.where(flip[:, None, None, None], images.flip(-1), images)
    padded = F.pad(images, (2, 2, 2, 2))
    dy, dx = torch.randint(0, 5, (2,), generator=generator).tolist()
    return padded[..., dy : dy + images.shape[-2], dx : dx + images.shape[-1]]


def learning_rate(config: TrainConfig, step: int, total_steps: int) -> float:
    """Linear warm-up to config.lr, then cosine decay to 0."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, total_steps - config.warmup_steps)
    return config.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def evaluate(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, batch_size: int = 500) -> dict:
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for start in range(0, images.shape[0], batch_size):
            logits = model(images[start : start + batch_size])  # (b, classes)
            target = labels[start : start + batch_size]
            loss += float(F.cross_entropy(logits, target, reduction="sum"))
            correct += int((logits.argmax(-1) == target).sum())
    model.train()
    return {"accuracy": correct / images.shape[0], "loss": loss / images.shape[0]}


def train(config: TrainConfig, run_dir: Path, stop_after: Optional[int] = None, progress: bool = True) -> dict:
    """Train (or resume) the run in ``run_dir``; return the final evaluation.

    ``stop_after``: stop right after that global step, as a kill would (for tests of resumption).
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    _write_config(run_dir, config)
    task = load_task(config)
    model = build_model(config, task["train_x"].shape[-1], task["train_x"].shape[1], int(task["train_y"].max()) + 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    steps_per_epoch = math.ceil(task["train_x"].shape[0] / config.batch_size)
    total_steps = steps_per_epoch * config.epochs
    step = _resume(run_dir, model, optimizer)
    metrics = run_dir / "metrics.jsonl"
    _drop_rows_after(metrics, step)
    bar = _progress(total_steps, step, progress)
    tracker = _tracker(config, model, task, metrics)
    if tracker is not None and step == 0:
        tracker.step(0)
    final: dict = {}
    try:
        while step < total_steps:
            epoch, index = divmod(step, steps_per_epoch)
            order = torch.randperm(task["train_x"].shape[0], generator=torch.Generator().manual_seed(config.seed * 1000 + epoch))
            batch = order[index * config.batch_size : (index + 1) * config.batch_size]
            images = augment(task["train_x"][batch], torch.Generator().manual_seed(config.seed * 10**6 + step))
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(config, step, total_steps)
            loss = F.cross_entropy(model(images), task["train_y"][batch])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip:
                nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            step += 1
            loss_value = float(loss.detach())
            bar.update(1)
            bar.set_postfix(loss=f"{loss_value:.3f}")
            if step % TRAIN_ROW_EVERY == 0:
                _append(metrics, {"kind": "train", "step": step, "loss": loss_value, "lr": optimizer.param_groups[0]["lr"]})
            if tracker is not None:
                tracker.step(step)
            epoch_done = step % steps_per_epoch == 0
            if epoch_done:
                final = {"kind": "eval", "step": step, "epoch": step // steps_per_epoch, **evaluate(model, task["test_x"], task["test_y"])}
                _append(metrics, final)
            if epoch_done or step % config.checkpoint_every == 0:
                checkpoint.save(run_dir, step, step // steps_per_epoch, model, {"optimizer": optimizer.state_dict()})
            if stop_after is not None and step >= stop_after:
                return {}
    except KeyboardInterrupt:
        checkpoint.save(run_dir, step, step // steps_per_epoch, model, {"optimizer": optimizer.state_dict()})
        log.warning("interrupted at step %d; checkpoint saved, resume with the same command", step)
        raise
    finally:
        bar.close()
    if not final:  # resumed after the last epoch had finished
        final = {"kind": "eval", "step": step, **evaluate(model, task["test_x"], task["test_y"])}
    return final


def _tracker(config: TrainConfig, model: nn.Module, task: dict, metrics: Path):
    """Spectra and entropy rows every config.track_every steps, on the first 8 test images (None = off)."""
    if not config.track_every:
        return None
    from speccond.diagnostics import Tracker

    return Tracker(model, (task["test_x"][:8],), every=config.track_every, path=metrics)


def _resume(run_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    folder = checkpoint.latest(run_dir)
    if folder is None:
        return 0
    manifest, state = checkpoint.load(folder, model)
    optimizer.load_state_dict(state["optimizer"])
    log.info("resumed %s at step %d", run_dir, manifest["step"])
    return int(manifest["step"])


def _write_config(run_dir: Path, config: TrainConfig) -> None:
    path = run_dir / "config.json"
    if path.is_file():
        recorded = TrainConfig.from_dict(json.loads(path.read_text())["config"])
        if recorded != config:
            raise ValueError(
                f"{run_dir} was started with a different config ({path}); resume with the same config or use a new --out"
            )
        return
    import timm

    record = {
        "config": config.to_dict(),
        "label": f"{config.method} lam={config.lam:g}" if config.method in ("spectral", "shifted-init") else config.method,
        "command": sys.argv,
        "versions": {"speccond": speccond.__version__, "torch": torch.__version__, "timm": timm.__version__,
                     "python": platform.python_version()},
    }
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(record, indent=2))
    partial.replace(path)


def _append(path: Path, row: dict) -> None:
    with path.open("a") as handle:
        handle.write(json.dumps(row) + "\n")


def _drop_rows_after(path: Path, step: int) -> None:
    """On resume, forget rows written after the checkpoint (they will be written again)."""
    if not path.is_file():
        return
    kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line).get("step", 0) <= step]
    path.write_text("".join(line + "\n" for line in kept))


def _progress(total: int, start: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, initial=start, disable=not enabled, unit="step", dynamic_ncols=True, file=sys.stderr)
