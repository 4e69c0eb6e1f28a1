"""One training run, readable top to bottom: ``train(config, run_dir)``; resumable at any step.

Classification tasks train on cross-entropy over classes; the mlm task on cross-entropy over the masked
tokens (mlm.py: masks drawn per step, ``mlm.targets`` lists the labels the model's logits stand for).
A run with ``config.init_from`` starts from a pre-trained encoder (pretrained.py), loaded once, before
the first step; a resumed run reads its own checkpoint instead.

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
import signal
import sys
import threading
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

import speccond
from speccond.experiments import checkpoint, mlm
from speccond.experiments.bert_model import build_bert
from speccond.experiments.config import TrainConfig
from speccond.experiments.distributed import Context
from speccond.experiments.families import FAMILIES, LANGUAGE_FAMILIES, SEQUENCE_FAMILIES, build_backbone
from speccond.experiments.methods import apply_method
from speccond.experiments.pretrained import load_pretrained
from speccond.experiments.sequence_model import build_nystromformer, padded_length
from speccond.experiments.tasks import TaskShape, load_task, task_shape

log = logging.getLogger(__name__)
TRAIN_ROW_EVERY = 10


def build_model(config: TrainConfig, shape: TaskShape) -> nn.Module:
    """The config's model family for the task's inputs, seeded, with the config's method applied: a timm
    family (families.py) for images, a Nystromformer (sequence_model.py) for token sequences (a shared-encoder
    PairClassifier when each example is two texts), BERT (bert_model.py) for WordPiece text."""
    kinds = {"image": (FAMILIES, "an image task"), "sequence": (SEQUENCE_FAMILIES, "a token-sequence task (lra-...)"),
             "text": (LANGUAGE_FAMILIES, "a language task (mlm, glue-...)")}
    kind = next(k for k, (models, _) in kinds.items() if config.model in models)
    if kind != shape.kind:
        raise ValueError(f"model {config.model!r} takes {kinds[kind][1]}, but task {config.task!r} is {shape.kind}s; "
                         f"choose model from {kinds[shape.kind][0]}")
    torch.manual_seed(config.seed)
    if kind == "text":
        model = build_bert(shape.vocab, shape.classes, config.embed_dim, config.depth, config.num_heads,
                           masked_lm=shape.mlm, length=shape.length)
    elif kind == "sequence":
        model = build_nystromformer(
            padded_length(shape.length, config.landmarks), shape.vocab, shape.classes, embed_dim=config.embed_dim,
            depth=config.depth, num_heads=config.num_heads, landmarks=config.landmarks, pairs=shape.pairs,
        )
    else:
        model = build_backbone(
            config.model, shape.image_size, shape.channels, shape.classes, embed_dim=config.embed_dim,
            depth=config.depth, num_heads=config.num_heads, patch_size=config.patch_size,
        )
    if config.attention_norm == "none":
        _drop_attention_norms(model, config)
    apply_method(model, config)
    return model


def _drop_attention_norms(model: nn.Module, config: TrainConfig) -> None:
    """Replace the LayerNorm before every attention (timm blocks' ``norm1``) by the identity (ablation)."""
    blocks = [module for module in model.modules() if isinstance(getattr(module, "norm1", None), nn.LayerNorm)]
    if not blocks:
        raise ValueError(f"attention_norm='none': model {config.model!r} has no blocks with a LayerNorm norm1 "
                         "before attention (the timm families have one; the Nystromformer does not)")
    for block in blocks:
        block.norm1 = nn.Identity()


def model_for(config: TrainConfig) -> nn.Module:
    """The model a run of ``config`` trains, with the input shape of its task (for loading checkpoints)."""
    return build_model(config, task_shape(config.task))


def make_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW with decoupled weight decay on matrices only (the usual recipe, as timm's): biases, norm
    scales, sigma-reparam's gamma and the model's ``no_weight_decay()`` names (position embedding,
    class tokens) are not decayed."""
    exempt = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    decay, keep = [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        plain_name = name.replace("parametrizations.", "").replace(".original", "")
        (keep if parameter.ndim <= 1 or plain_name in exempt else decay).append(parameter)
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": keep, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config.lr)


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


def evaluate(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, batch_size: int = 500) -> dict:
    """Accuracy and mean cross-entropy over the predictions: one per example, or one per masked token (mlm)."""
    device = next(model.parameters()).device
    model.eval()
    correct, loss, count = 0, 0.0, 0
    with torch.no_grad():
        for start in range(0, inputs.shape[0], batch_size):
            logits = model(inputs[start : start + batch_size].to(device))  # (b, classes) or (n, vocab)
            target = mlm.targets(labels[start : start + batch_size]).to(device)  # (b,) or (n,)
            loss += float(F.cross_entropy(logits, target, reduction="sum"))
            correct += int((logits.argmax(-1) == target).sum())
            count += target.shape[0]
    model.train()
    return {"accuracy": correct / count, "loss": loss / count}


def train(config: TrainConfig, run_dir: Path, stop_after: Optional[int] = None, progress: bool = True) -> dict:
    """Train (or resume) the run in ``run_dir``; return the final row.

    The final row is the last evaluation ({"kind": "eval", ...}), or {"kind": "diverged", ...} when the
    training loss became NaN or inf: the run stops before that step's update, keeps its last good
    checkpoint, records the row in metrics.jsonl, and is not trained again when resumed.
    Under torchrun the same call trains data-parallel (distributed.py); only rank 0 writes.
    ``stop_after``: stop right after that global step, as a kill would (for tests of resumption).
    """
    context = Context.from_environment(config.device)
    run_dir = Path(run_dir)
    metrics = run_dir / "metrics.jsonl"
    if context.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        _write_config(run_dir, config)
    context.barrier()
    diverged = _diverged_row(metrics)
    if diverged is not None:
        log.error("%s diverged at step %d (loss %s); not training it again", run_dir, diverged["step"], diverged["loss"])
        return diverged
    task = load_task(config)
    samples = task["train_x"].shape[0]
    _check_shards(samples, config.batch_size, context)
    shape = task_shape(config.task)
    model = build_model(config, shape)
    model.to(context.device)  # the task stays on the CPU; each batch is moved
    optimizer = make_optimizer(model, config)
    steps_per_epoch = math.ceil(samples / config.batch_size)
    total_steps = steps_per_epoch * config.epochs
    step = _resume(run_dir, model, optimizer)
    if step == 0 and config.init_from:
        load_pretrained(model, config)  # in place: the optimiser holds the same parameters
    if context.is_main:
        _drop_rows_after(metrics, step)
    trained = context.wrap(model)
    bar = _progress(total_steps, step, progress and context.is_main)
    tracker = _tracker(config, model, task, metrics) if context.is_main else None
    if tracker is not None and step == 0:
        tracker.step(0)

    def save() -> None:
        if context.is_main:
            checkpoint.save(run_dir, step, step // steps_per_epoch, model, {"optimizer": optimizer.state_dict()})

    final: dict = {}
    interrupt = _StepBoundaryInterrupt()
    try:
        while step < total_steps:
            epoch, index = divmod(step, steps_per_epoch)
            order = torch.randperm(samples, generator=torch.Generator().manual_seed(config.seed * 1000 + epoch))
            batch = order[index * config.batch_size : (index + 1) * config.batch_size]
            inputs = task["train_x"][batch]  # (b, C, H, W) images, (b, L) tokens or (b, 2, L) pairs
            labels = task["train_y"][batch]  # (b,) classes, or (b, L) tokens for mlm
            if inputs.dim() == 4:
                inputs = augment(inputs, torch.Generator().manual_seed(config.seed * 10**6 + step))
            if shape.mlm:  # inputs (b, 2, L) ids and prediction flags, labels (b, L) with IGNORE
                masks = torch.Generator().manual_seed(config.seed * 10**6 + step)
                inputs, labels = mlm.mask_tokens(inputs, masks, shape.vocab)
            inputs = context.shard(inputs).to(context.device)  # (b / world, ...)
            local_labels = context.shard(labels).to(context.device)
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(config, step, total_steps)
            local_targets = mlm.targets(local_labels)  # (b / world,) or (n / world,): what the logits predict
            local_mean = F.cross_entropy(trained(inputs), local_targets)
            counts = (local_targets.shape[0], mlm.targets(labels).shape[0])  # this rank's and the global batch's
            loss_value = context.global_mean(local_mean, *counts)
            if not math.isfinite(loss_value):
                final = {"kind": "diverged", "step": step + 1, "loss": str(loss_value), "total_steps": total_steps}
                if context.is_main:
                    _append(metrics, final)
                    _keep_good_checkpoint(run_dir, step)
                log.error(
                    "training loss is %s at step %d of %s: the run diverged and stops here; its last good checkpoint "
                    "is kept (lower lr or lam, or raise warmup_steps, and start a new --out)", loss_value, step + 1, run_dir,
                )
                return final
            optimizer.zero_grad(set_to_none=True)
            context.local_loss(local_mean, *counts).backward()
            if config.grad_clip:
                nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss_value:.3f}")
            if step % TRAIN_ROW_EVERY == 0 and context.is_main:
                _append(metrics, {"kind": "train", "step": step, "loss": loss_value, "lr": optimizer.param_groups[0]["lr"]})
            if config.refresh_every and step % config.refresh_every == 0:
                speccond.refresh(model)  # svd corrections and auto lams follow the weights (PAPER.md section 5)
            if tracker is not None and step % tracker.every == 0 and _all_finite(model):
                tracker.step(step)  # non-finite weights are left to the next step's divergence check
            epoch_done = step % steps_per_epoch == 0
            if epoch_done:
                final = {"kind": "eval", "step": step, "epoch": step // steps_per_epoch, "total_steps": total_steps,
                         **evaluate(model, task["test_x"], task["test_y"])}
                if context.is_main:
                    _append(metrics, final)
            if epoch_done or step % config.checkpoint_every == 0:
                save()
            if stop_after is not None and step >= stop_after:
                return {}
            if interrupt.requested:
                save()
                log.warning("interrupted after step %d; checkpoint saved, resume with the same command", step)
                raise KeyboardInterrupt
    finally:
        interrupt.restore()
        bar.close()
    if not final:  # resumed after the last epoch had finished
        final = {"kind": "eval", "step": step, "epoch": step // steps_per_epoch, "total_steps": total_steps,
                 **evaluate(model, task["test_x"], task["test_y"])}
    return final


class _StepBoundaryInterrupt:
    """Ctrl-C (SIGINT) during training is honoured at the next step boundary, where the weights, the
    optimiser state and the step counter agree, so the checkpoint saved then resumes exactly. A second
    Ctrl-C interrupts at once (the last checkpoint on disk is still complete)."""

    def __init__(self) -> None:
        self.requested = False
        self.previous = None
        # Not from a worker thread (signals go to the main one), and not where SIGINT is ignored (a shell's
        # background job): the process keeps ignoring it there, as it did before training started.
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            self.previous = signal.signal(signal.SIGINT, self._request)

    def _request(self, signum, frame) -> None:
        self.requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        log.warning("Ctrl-C: stopping after this step (press again to stop at once)")

    def restore(self) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


def _all_finite(model: nn.Module) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def _check_shards(samples: int, batch_size: int, context: Context) -> None:
    """Every rank needs at least one image of every batch, the last (short) one included."""
    last = samples % batch_size or batch_size
    if context.distributed and min(batch_size, last) < context.world:
        raise ValueError(
            f"batch_size {batch_size} over {samples} examples leaves a batch of {min(batch_size, last)} for "
            f"{context.world} processes; choose batch_size and train_size so every batch has >= {context.world} examples"
        )


def _keep_good_checkpoint(run_dir: Path, step: int) -> None:
    """A checkpoint taken at ``step`` holds the weights whose loss was not finite: drop it."""
    folder = checkpoint.latest(run_dir)
    if folder is not None and json.loads((folder / "manifest.json").read_text())["step"] == step:
        checkpoint.discard_latest(run_dir)


def _diverged_row(metrics: Path) -> Optional[dict]:
    for row in _rows(metrics):
        if row.get("kind") == "diverged":
            return row
    return None


def _tracker(config: TrainConfig, model: nn.Module, task: dict, metrics: Path):
    """Spectra and entropy rows every config.track_every steps, on the first 8 test examples (None = off)."""
    if not config.track_every:
        return None
    from speccond.diagnostics import Tracker

    # Head diagnostics (entropy) cover softmax attention over tokens (the ViT and DeiT families) and
    # rebuild q and k from the weights, so they would miss qk-norm's LayerNorm hooks: off for qk-norm.
    entropy = config.model in ("vit", "deit") and config.method != "qk-norm"
    probe = task["test_x"][:8].to(next(model.parameters()).device)  # (8, C, H, W)
    return Tracker(model, (probe,), every=config.track_every, path=metrics, entropy=entropy)


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
        "label": _label(config),
        "command": _command(),
        "versions": {"speccond": speccond.__version__, "torch": torch.__version__, "timm": timm.__version__,
                     "python": platform.python_version()},
    }
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(record, indent=2))
    partial.replace(path)


def _label(config: TrainConfig) -> str:
    if config.method not in ("spectral", "shifted-init"):
        return config.method
    lam = f"auto(kappa<={config.target_kappa:g})" if config.target_kappa else f"{config.lam:g}"
    return f"{config.method} lam={lam}"


def _command() -> list[str]:
    """The command line that started this run, with the program named as a user would type it."""
    program = Path(sys.argv[0]).name if sys.argv else ""
    if program in ("speccond", "__main__.py"):
        return ["speccond", *sys.argv[1:]]
    return list(sys.argv)


def _append(path: Path, row: dict) -> None:
    with path.open("a") as handle:
        handle.write(json.dumps(row) + "\n")


def _rows(path: Path) -> list[dict]:
    """The complete rows of a metrics file; a line cut short by a kill is skipped."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            log.warning("%s: skipping an incomplete line (a run killed while writing)", path)
    return rows


def _drop_rows_after(path: Path, step: int) -> None:
    """On resume, forget rows written after the checkpoint (they will be written again)."""
    if not path.is_file():
        return
    kept = [row for row in _rows(path) if row.get("step", 0) <= step]
    partial = path.with_suffix(".partial")
    partial.write_text("".join(json.dumps(row) + "\n" for row in kept))
    partial.replace(path)


def _progress(total: int, start: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, initial=start, disable=not enabled, unit="step", dynamic_ncols=True, file=sys.stderr)
