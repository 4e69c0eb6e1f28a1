"""Reading finished runs back from their run directories, without training: ``read_run(run_dir)``.

A run directory (train.py) holds config.json, metrics.jsonl, checkpoints/ and, when ``speccond compare``
trained it, timing.json (harness/training/timing.py). From those alone a run's outcome is:

- status "finished": an eval row at the final step (``total_steps`` in the row, or else the eval of the
  last epoch, ``epoch == config.optimizer.epochs``); accuracy and loss are that row's.
- status "diverged": a row {"kind": "diverged", "step": k, "loss": "nan"} (train.py stops the run there
  and keeps its last good checkpoint). Runs written before that row existed are recognised by their
  first non-finite training or test loss. Their accuracy for statistics is chance (1 / classes): the
  model the run would have produced gives NaN logits; the last evaluation before divergence is kept
  in ``last_eval`` for the record but may itself already be broken (a NaN test loss).
- status "unfinished": neither (killed, or still running); ``step`` is where a resume would continue.

kappa: the mean condition number of the effective W_q, W_k, W_v blocks (W + C when conditioned) over
layers, at the step of the latest checkpoint (the final step of a finished run, the last good step of a
diverged one), from the tracker's "spectra" rows at that step when the run was tracked, otherwise
computed from the checkpoint itself. A run kept without its checkpoints (harness/protocol/kept_runs.py: the
records of a finished run committed to the repository) carries that figure in kappa.json, written by
:func:`write_kept_kappa` while the checkpoint was still there.

head_kappa_max: the largest kappa of one head's rows of W + C over every layer's q, k, v blocks, at the same
step: the figure a correction sized per head bounds (speccond.report's ``head_kappa_eff_max``), where the
block's kappa can stay in the hundreds. From the tracker's rows (``head_kappa_max``), else the checkpoint,
else kappa.json; None for runs recorded before the tracker wrote it and kept without their checkpoints.
``kappa_per_head``: whether the run's correction is sized per head and so bounds that figure.
"""
from __future__ import annotations

import functools
import json
import logging
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from speccond.diagnostics.records import read_metrics
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.training import checkpoint
from speccond.harness.training.recipe import ADAPTED_WARMUP
from speccond.harness.training.timing import recorded_seconds

log = logging.getLogger(__name__)

RUN_EXPECTED = "a run directory (holding config.json) or a comparison folder holding <method>/seed-<k>/ run directories"


@dataclass(frozen=True)
class RunRecord:
    path: Path  # the run directory, as found under the folders given
    config: TrainConfig
    command: tuple[str, ...]  # config.json "command": the argv that started the run
    status: str  # "finished", "diverged" or "unfinished"
    step: int  # finished: the final step; diverged: the step whose loss was not finite; unfinished: resume step
    total_steps: Optional[int]  # None when no row records it and the training set size is not in the config
    accuracy: Optional[float]  # for statistics: final test accuracy; chance when diverged; None when unfinished
    loss: Optional[float]  # final test loss (finished runs only)
    kappa_qkv: Optional[float]  # mean kappa of the effective q, k, v blocks over layers (None: no checkpoint)
    kappa_step: Optional[int]  # the step kappa_qkv was measured at
    entropy: Optional[float]  # attention entropy, nats, mean over layers and heads at the last tracked step
    #   up to ``step`` (None: not tracked, or unfinished)
    uniform_entropy: Optional[float]  # the entropy of uniform attention over the same keys (None as entropy)
    head_kappa_max: Optional[float]  # the largest per-head kappa of W + C at kappa_step (module docstring)
    kappa_per_head: bool  # the run's correction is sized per head: it bounds head_kappa_max, not kappa_qkv
    majority: Optional[float]  # the share of the scored split's most common class (None: not recorded)
    examples: Optional[int]  # how many targets the final row scored (None: not recorded)
    warmup: dict  # config.json's adapted warm-up (recipe.adapted_warmup; {} when the asked one was used)
    seconds: Optional[float]  # training wall time from timing.json (None: not recorded, or incomplete)
    last_eval: Optional[dict]  # the last eval row (before divergence for a diverged run)
    diverged_loss: Optional[str]  # the non-finite loss ("nan", "inf") of a diverged run

    @property
    def seed(self) -> int:
        return self.config.run.seed


def find_runs(folders: Iterable[str | Path]) -> list[Path]:
    """Run directories under ``folders``, in the order given (sorted within a folder), each once.

    A folder holding config.json is a run; otherwise its run directories one or two levels down
    (<method>/seed-<k>/) are. Raises ValueError for a folder that is neither.
    """
    found: dict[Path, Path] = {}
    for folder in map(Path, folders):
        if not folder.is_dir():
            raise ValueError(f"{folder}: no such directory; expected {RUN_EXPECTED}")
        if (folder / "config.json").exists():
            runs = [folder]
        else:
            runs = sorted({p.parent for pattern in ("*/config.json", "*/*/config.json") for p in folder.glob(pattern)})
        if not runs:
            raise ValueError(f"{folder} holds no runs: expected {RUN_EXPECTED}, found no config.json there")
        for run in runs:
            found.setdefault(run.resolve(), run)
    return list(found.values())


def read_run(run_dir: str | Path) -> RunRecord:
    """The outcome of one run, from its directory only (see the module docstring)."""
    run_dir = Path(run_dir)
    record = _read_config(run_dir / "config.json")
    config = _config(run_dir / "config.json", record)
    rows = read_metrics(run_dir / "metrics.jsonl")
    evals = [r for r in rows if r.get("kind") == "eval"]
    total_steps = next((int(r["total_steps"]) for r in reversed(rows) if r.get("total_steps") is not None), None)
    if total_steps is None and config.data.train_size:
        total_steps = math.ceil(config.data.train_size / config.data.batch_size) * config.optimizer.epochs
    diverged, final = _diverged(rows), _final_eval(evals, config)
    latest = checkpoint.latest(run_dir)
    checkpoint_step = checkpoint.manifest_step(latest) if latest is not None else 0
    accuracy = loss = None
    if diverged is not None:
        status, step, accuracy = "diverged", int(diverged["step"]), 1.0 / _classes(config)
        last_eval = next((r for r in reversed(evals) if int(r["step"]) <= step), None)
    elif final is not None:
        status, step, last_eval = "finished", int(final["step"]), final
        accuracy, loss = float(final["accuracy"]), float(final["loss"])
    else:
        status, step, last_eval = "unfinished", checkpoint_step, evals[-1] if evals else None
    kappa = kappa_step = head_kappa = None
    entropy, uniform = _tracked_entropy(rows, step) if status != "unfinished" else (None, None)
    if status != "unfinished":
        kappa, kappa_step, head_kappa = _final_kappa(run_dir, config, rows, latest)
    scored = final or {}
    return RunRecord(
        path=run_dir, config=config, command=_command(record.get("command")), status=status, step=step,
        total_steps=total_steps, accuracy=accuracy, loss=loss, kappa_qkv=kappa, kappa_step=kappa_step,
        entropy=entropy, uniform_entropy=uniform, head_kappa_max=head_kappa, kappa_per_head=sized_per_head(config),
        majority=_number(scored.get("majority")), examples=_number(scored.get("examples"), int),
        warmup=record.get(ADAPTED_WARMUP) or {}, seconds=recorded_seconds(run_dir), last_eval=last_eval,
        diverged_loss=None if diverged is None else str(diverged["loss"]),
    )


def sized_per_head(config: TrainConfig) -> bool:
    """Whether the run's method leaves a correction sized per head on q, k, v, as speccond.report reads one
    (``per_head``: granularity "head" with the SVD correction or lam="auto"), so that it bounds each head's
    kappa rather than the block's. Asked of the library on a small model with the method applied, so that a
    method added to the registry is read the same way."""
    from speccond.harness import methods

    method = methods.REGISTRY.get(config.method.name)
    if method is None or not method.conditions:
        return False
    return _per_head_after(config.method)


@functools.lru_cache(maxsize=None)
def _per_head_after(settings) -> bool:
    """speccond.describe's ``per_head`` of a one-layer, two-head timm ViT the method ``settings`` is applied to."""
    import torch
    from timm.models.vision_transformer import VisionTransformer

    import speccond
    from speccond.harness.methods import apply_method

    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the collapse warning of a lam on this tiny model is not the run's
        torch.manual_seed(0)
        model = VisionTransformer(img_size=8, patch_size=4, embed_dim=16, depth=1, num_heads=2, num_classes=2)
        try:
            apply_method(model, settings)
        except (ValueError, TypeError) as error:  # a method this probe cannot take: read as not sized per head
            log.info("whether %s is sized per head is not known (%s); its kappa is read per block", settings.name, error)
            return False
    return speccond.is_conditioned(model) and any(row.per_head for row in speccond.describe(model))


def _number(value, kind=float):
    return kind(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def run_status(run_dir: str | Path) -> str:
    """:func:`read_run`'s status ("finished", "diverged" or "unfinished") from the config and metrics
    alone: no checkpoint is opened and no kappa computed, so counting runs stays cheap."""
    run_dir = Path(run_dir)
    config = _config(run_dir / "config.json", _read_config(run_dir / "config.json"))
    rows = read_metrics(run_dir / "metrics.jsonl")
    if _diverged(rows) is not None:
        return "diverged"
    evals = [r for r in rows if r.get("kind") == "eval"]
    return "finished" if _final_eval(evals, config) is not None else "unfinished"


KEPT_KAPPA = "kappa.json"  # {"kappa_qkv", "step", "head_kappa_max"}: read_run's kappas of a run kept without checkpoints


def write_kept_kappa(run_dir: Path, target: Path) -> None:
    """TARGET/kappa.json: the kappas that :func:`read_run` gives the finished run in RUN_DIR (which must still
    have its checkpoints), so that a copy of its records without them reports the same figures."""
    config = _config(run_dir / "config.json", _read_config(run_dir / "config.json"))
    kappa, step, head = _final_kappa(run_dir, config, read_metrics(run_dir / "metrics.jsonl"), checkpoint.latest(run_dir))
    (target / KEPT_KAPPA).write_text(json.dumps({"kappa_qkv": kappa, "step": step, "head_kappa_max": head}) + "\n")


def _final_kappa(run_dir: Path, config: TrainConfig, rows: list[dict],
                 latest: Optional[Path]) -> tuple[Optional[float], Optional[int], Optional[float]]:
    """(kappa, its step, the largest per-head kappa) of a finished or diverged run: at its LATEST checkpoint,
    from the tracker's rows at that step or else from the checkpoint; from kappa.json when only the kept
    records are here."""
    if latest is None:
        return _read_kept_kappa(run_dir / KEPT_KAPPA) if (run_dir / KEPT_KAPPA).is_file() else (None, None, None)
    step = checkpoint.manifest_step(latest)
    kappa, head = _tracked_kappa(rows, step)
    if kappa is not None and head is not None:
        return kappa, step, head
    try:
        measured, head = checkpoint_kappas(config, latest)
    except checkpoint.DamagedCheckpoint as error:
        log.warning("%s; its kappa is left blank (run the same compare or train --resume to write it again)", error)
        return kappa, (None if kappa is None else step), None
    return (measured if kappa is None else kappa), step, head


def _read_kept_kappa(path: Path) -> tuple[Optional[float], Optional[int], Optional[float]]:
    try:
        record = json.loads(path.read_text())
        kappa, step, head = record["kappa_qkv"], record["step"], record.get("head_kappa_max")
        return ((None if kappa is None else float(kappa)), (None if step is None else int(step)),
                (None if head is None else float(head)))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: unreadable kept kappa ({error}); expected JSON with \"kappa_qkv\" and "
                         "\"step\", as harness/protocol/kept_runs.py writes it") from None


def load_model(config: TrainConfig, folder: Path):
    """(model, manifest): the model a run of ``config`` trains, with the checkpoint ``folder`` loaded
    (checksums verified by checkpoint.load); the global random generator is left as it was."""
    import torch

    from speccond.harness.models.run_model import model_for

    with torch.random.fork_rng(devices=[]):  # building the model seeds the global generator
        model = model_for(config)
    manifest, _ = checkpoint.load(folder, model)
    return model, manifest


def checkpoint_kappa(config: TrainConfig, folder: Path) -> Optional[float]:
    """Mean kappa of the effective q, k, v blocks over layers of the model saved in ``folder``; None when the
    weights do not tell q, k, v (qk-norm's LayerNorms act after them: diagnostics.spectra_refusal)."""
    from speccond.diagnostics import projection_spectra
    from speccond.diagnostics.spectra import spectra_refusal

    return checkpoint_kappas(config, folder)[0]


def checkpoint_kappas(config: TrainConfig, folder: Path) -> tuple[Optional[float], Optional[float]]:
    """(mean kappa of the effective q, k, v blocks over layers, the largest kappa of one head's rows) of the
    model saved in ``folder``; (None, None) when the weights do not tell q, k, v (qk-norm's LayerNorms)."""
    from speccond.diagnostics import projection_spectra
    from speccond.diagnostics.spectra import spectra_refusal

    model, _ = load_model(config, folder)
    if spectra_refusal(model):
        return None, None
    rows = projection_spectra(model, per_head=True)
    return _mean_kappa([r for r in rows if r["head"] is None]), _largest_head_kappa(rows)


def read_config(run_dir: str | Path) -> TrainConfig:
    """The TrainConfig recorded in ``run_dir``/config.json; ValueError naming the file when it is unreadable."""
    path = Path(run_dir) / "config.json"
    return _config(path, _read_config(path))


def _read_config(path: Path) -> dict:
    expected = 'the JSON object speccond train writes: {"config": {...}, "label", "command", "versions"}'
    if not path.is_file():
        raise ValueError(f"{path}: missing; expected {expected}")
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: unreadable run config ({error}); expected {expected}") from None
    if not isinstance(record, dict) or not isinstance(record.get("config"), dict):
        raise ValueError(f"{path}: no \"config\" object; expected {expected}")
    return record


def _config(path: Path, record: dict) -> TrainConfig:
    try:
        return TrainConfig.from_record(record)  # either form (train_config.py, CONFIG_FORM)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: not a valid TrainConfig ({error})") from None


def _diverged(rows: list[dict]) -> Optional[dict]:
    """The "diverged" row, or for older runs the first train or eval row whose loss is not finite."""
    for row in rows:
        if row.get("kind") == "diverged":
            return row
    for row in rows:
        if row.get("kind") in ("train", "eval") and not math.isfinite(float(row.get("loss", 0.0))):
            log.info("no diverged row; loss %s at step %s counts as divergence", row["loss"], row["step"])
            return {"step": row["step"], "loss": str(row["loss"])}
    return None


def _final_eval(evals: list[dict], config: TrainConfig) -> Optional[dict]:
    return next((r for r in reversed(evals) if _is_final(r, config)), None)


def _is_final(row: dict, config: TrainConfig) -> bool:
    if row.get("total_steps") is not None:
        return int(row["step"]) == int(row["total_steps"])
    return row.get("epoch") == config.optimizer.epochs


def _tracked_kappa(rows: list[dict], step: int) -> tuple[Optional[float], Optional[float]]:
    """(mean block kappa, largest per-head kappa) from the tracker's spectra rows at ``step`` (None where the
    rows do not hold it: not tracked then, or tracked before the rows carried ``head_kappa_max``)."""
    spectra = [r for r in rows if r.get("kind") == "spectra" and r.get("step") == step and r.get("head") is None]
    if not spectra:
        return None, None
    heads = [r.get("head_kappa_max") for r in spectra if r["projection"] in ("q", "k", "v")]
    known = all(isinstance(h, (int, float)) for h in heads)
    return _mean_kappa(spectra), (max(float(h) for h in heads) if heads and known else None)


def _tracked_entropy(rows: list[dict], step: int) -> tuple[Optional[float], Optional[float]]:
    """(the mean attention entropy over layers and heads at the last tracked step up to ``step``, the mean
    entropy of uniform attention over the same rows' keys), or (None, None)."""
    tracked = [r for r in rows if r.get("kind") == "entropy" and int(r["step"]) <= step
               and isinstance(r.get("entropy"), (int, float)) and math.isfinite(r["entropy"])]
    if not tracked:
        return None, None
    last = [r for r in tracked if int(r["step"]) == max(int(r["step"]) for r in tracked)]
    uniform = [r.get("uniform_entropy", r.get("log_n")) for r in last]
    known = all(isinstance(u, (int, float)) and u > 0 for u in uniform)
    return (sum(float(r["entropy"]) for r in last) / len(last),
            sum(uniform) / len(uniform) if known else None)


def _mean_kappa(rows) -> float:
    values = [float(r["kappa"]) for r in rows if r["projection"] in ("q", "k", "v")]
    return sum(values) / len(values)


def _largest_head_kappa(rows) -> Optional[float]:
    values = [float(r["kappa"]) for r in rows if r["projection"] in ("q", "k", "v") and r["head"] is not None]
    return max(values) if values else None


def _classes(config: TrainConfig) -> int:
    """The number of classes of the run's task (the vocabulary for mlm), for chance accuracy."""
    from speccond.harness.tasks.datasets import task_shape

    return task_shape(config.data.task).classes


def _command(command) -> tuple[str, ...]:
    if isinstance(command, str):
        return (command,)
    return tuple(str(part) for part in command or ())
