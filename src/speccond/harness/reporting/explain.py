"""What the report says about its runs beyond the figures (report.py): whether anything was learnt, the
warm-up and schedule the runs used, the settings that differ from the defaults, and which kappa a method bounds.

- Nothing learnt: a group is within noise of the floor (the majority class's share of the scored split, as
  the runs' final rows record it, else chance, 1 / classes) when its mean final accuracy minus its 95 % noise
  reaches the floor. The noise adds, in quadrature, the t interval over seeds and the binomial 95 % interval
  of one split of ``examples`` targets at the floor's rate (every seed is scored on the same split, so that
  part does not shrink with seeds). When every group is within noise the report says nothing was learnt.
- Warm-up: a run whose warmup_steps was not shorter than the run used a tenth of it instead
  (recipe.warmup_steps, recorded in config.json); runs made before that kept the whole warm-up, and the
  report says their lr never decayed.
- Settings: every shared TrainConfig field whose value differs from TrainConfig's default and which the
  title, the training line and the groups' labels do not already show.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from speccond.harness import methods
from speccond.harness.config.train_config import TIMM_PREFIX, TrainConfig
from speccond.harness.reporting.groups import IGNORED_FIELDS
from speccond.harness.reporting.stats import mean_interval
from speccond.harness.values import show_value

# Fields the report's title or its training line shows (report._title, report._settings).
SHOWN_ELSEWHERE = ("task", "model", "model_args", "embed_dim", "depth", "num_heads", "patch_size", "landmarks",
                   "init_from", "epochs", "train_size", "val_size", "test_size", "batch_size", "lr", "weight_decay",
                   "warmup_steps", "grad_clip", "optimizer", "scheduler", "method")
Z95 = 1.96  # two-sided 95 % quantile of the normal law: the binomial interval of one split


@dataclass(frozen=True)
class Floor:
    """The accuracy a model that learnt nothing gets: the majority class's share, or chance."""
    rate: float
    name: str  # "majority class" or "chance"
    examples: Optional[int]  # targets of the scored split (None: not recorded; the split's sampling then unknown)

    def __str__(self) -> str:
        of = f" of the {self.examples} scored targets" if self.examples else ""
        return f"{self.name} ({100 * self.rate:.2f} %{of})"


def floor(runs: Sequence, classes: Optional[int]) -> Optional[Floor]:
    """The floor of ``runs`` (RunRecord) from their final rows' "majority", else chance; None when neither is known."""
    recorded = [r.majority for r in runs if r.majority is not None]
    examples = [r.examples for r in runs if r.examples]
    if recorded:
        return Floor(max(recorded), "majority class", min(examples) if examples else None)
    if classes:
        return Floor(1.0 / classes, "chance (1 / classes)", min(examples) if examples else None)
    return None


def within_noise(accuracies: Sequence[float], bottom: Floor) -> bool:
    """Whether the mean of ``accuracies`` (one per seed) is within 95 % noise of ``bottom`` or below it."""
    interval = mean_interval(list(accuracies))
    seeds = 0.0 if math.isnan(interval.half_width) else interval.half_width
    split = Z95 * math.sqrt(bottom.rate * (1 - bottom.rate) / bottom.examples) if bottom.examples else 0.0
    return interval.mean - math.hypot(seeds, split) <= bottom.rate


def nothing_learnt_line(bottom: Floor, split: str, every: bool) -> str:
    """The line above the table: every group learnt nothing, or which mark says that some did not."""
    noise = "(95 % interval over seeds and the split's sampling)"
    if every:
        return (f"**Nothing learnt**: every group's final {split} accuracy is within noise of the {bottom} {noise}, "
                "so the table compares models that learnt nothing: raise epochs or lr.")
    return f"(nothing learnt): the group's final {split} accuracy is within noise of the {bottom} {noise}."


def warmup_text(runs: Sequence, asked: str) -> str:
    """The training line's warm-up and schedule: '50 warm-up steps then cosine decay', or what was adapted."""
    adapted = {(r.warmup["asked"], r.warmup["used"], r.warmup["total_steps"]) for r in runs if r.warmup}
    kept = {(r.config.optimizer.warmup_steps, r.total_steps) for r in runs
            if not r.warmup and r.total_steps and r.config.optimizer.warmup_steps >= r.total_steps}
    parts = [f"{a} warm-up steps asked, not shorter than the run's {t} steps, so {u} used (a tenth of the run, "
             "recorded in config.json)" for a, u, t in sorted(adapted)]
    parts += [f"{a} warm-up steps, not shorter than the run's {t} steps: the lr rose through the whole run and never "
              "decayed (a run made before such a warm-up was adapted)" for a, t in sorted(kept)]
    return "; ".join(parts) if parts else f"{asked} warm-up steps"


def schedule_text(shared: dict) -> tuple[str, str]:
    """(optimiser, decay) as the training line names them: ("AdamW", "cosine decay"), or timm's by name."""
    optimizer, scheduler = shared.get("optimizer", "(varies)"), shared.get("scheduler", "(varies)")
    optimizer_text = "AdamW" if optimizer == "adamw" else f"optimiser {optimizer}"
    if scheduler == "cosine":
        return optimizer_text, "cosine decay"
    name = scheduler[len(TIMM_PREFIX):] if scheduler.startswith(TIMM_PREFIX) else scheduler
    return optimizer_text, f"timm's {name} schedule ({scheduler})"


def other_settings(shared: dict) -> list[str]:
    """'name=value' of every shared field that differs from TrainConfig's default and is shown nowhere else."""
    defaults = TrainConfig().to_dict()
    hidden = {*SHOWN_ELSEWHERE, *IGNORED_FIELDS, *methods.parameters()}
    return [f"{name}={show_value(value)}" for name, value in shared.items()
            if name not in hidden and name in defaults and value != defaults[name]]


def head_kappa_note(bounded: Sequence[str]) -> str:
    """The kappa bullet's sentence on the per-head column, naming the groups whose correction bounds it."""
    return ("Largest per-head kappa: the largest kappa of one head's rows of W + C over every layer's q, k and v "
            "blocks and every seed, at the final step (the tracker's rows, else the final checkpoint; - when "
            "neither holds it). A correction sized per head bounds this figure, not the whole block's, whose kappa "
            f"can stay in the hundreds while every head is near the bound: here {', '.join(bounded)}.")
