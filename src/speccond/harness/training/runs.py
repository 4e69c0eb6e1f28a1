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
"""
from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from speccond.diagnostics.records import read_metrics
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.training import checkpoint
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
    kappa = kappa_step = None
    entropy = _tracked_entropy(rows, step) if status != "unfinished" else None
    if status != "unfinished":
        kappa, kappa_step = _final_kappa(run_dir, config, rows, latest)
    return RunRecord(
        path=run_dir, config=config, command=_command(record.get("command")), status=status, step=step,
        total_steps=total_steps, accuracy=accuracy, loss=loss, kappa_qkv=kappa, kappa_step=kappa_step,
        entropy=entropy, seconds=recorded_seconds(run_dir), last_eval=last_eval,
        diverged_loss=None if diverged is None else str(diverged["loss"]),
    )


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


KEPT_KAPPA = "kappa.json"  # {"kappa_qkv": float or null, "step": int}: read_run's kappa of a run kept without checkpoints


def write_kept_kappa(run_dir: Path, target: Path) -> None:
    """TARGET/kappa.json: the kappa that :func:`read_run` gives the finished run in RUN_DIR (which must still
    have its checkpoints), so that a copy of its records without them reports the same figure."""
    config = _config(run_dir / "config.json", _read_config(run_dir / "config.json"))
    kappa, step = _final_kappa(run_dir, config, read_metrics(run_dir / "metrics.jsonl"), checkpoint.latest(run_dir))
    (target / KEPT_KAPPA).write_text(json.dumps({"kappa_qkv": kappa, "step": step}) + "\n")


def _final_kappa(run_dir: Path, config: TrainConfig, rows: list[dict],
                 latest: Optional[Path]) -> tuple[Optional[float], Optional[int]]:
    """(kappa, its step) of a finished or diverged run: at its LATEST checkpoint, from the tracker's rows at
    that step or else from the checkpoint; from kappa.json when only the kept records are here."""
    if latest is None:
        return _read_kept_kappa(run_dir / KEPT_KAPPA) if (run_dir / KEPT_KAPPA).is_file() else (None, None)
    step = checkpoint.manifest_step(latest)
    kappa = _tracked_kappa(rows, step)
    if kappa is not None:
        return kappa, step
    try:
        return checkpoint_kappa(config, latest), step
    except checkpoint.DamagedCheckpoint as error:
        log.warning("%s; its kappa is left blank (run the same compare or train --resume to write it again)", error)
        return None, None


def _read_kept_kappa(path: Path) -> tuple[Optional[float], Optional[int]]:
    try:
        record = json.loads(path.read_text())
        kappa, step = record["kappa_qkv"], record["step"]
        return (None if kappa is None else float(kappa)), (None if step is None else int(step))
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

    model, _ = load_model(config, folder)
    if spectra_refusal(model):
        return None
    return _mean_kappa(projection_spectra(model, per_head=False))


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


def _tracked_kappa(rows: list[dict], step: int) -> Optional[float]:
    spectra = [r for r in rows if r.get("kind") == "spectra" and r.get("step") == step and r.get("head") is None]
    return _mean_kappa(spectra) if spectra else None


def _tracked_entropy(rows: list[dict], step: int) -> Optional[float]:
    """The mean attention entropy over layers and heads at the last tracked step up to ``step``, or None."""
    tracked = [r for r in rows if r.get("kind") == "entropy" and int(r["step"]) <= step
               and isinstance(r.get("entropy"), (int, float)) and math.isfinite(r["entropy"])]
    if not tracked:
        return None
    last = max(int(r["step"]) for r in tracked)
    values = [float(r["entropy"]) for r in tracked if int(r["step"]) == last]
    return sum(values) / len(values)


def _mean_kappa(rows) -> float:
    values = [float(r["kappa"]) for r in rows if r["projection"] in ("q", "k", "v")]
    return sum(values) / len(values)


def _classes(config: TrainConfig) -> int:
    """The number of classes of the run's task (the vocabulary for mlm), for chance accuracy."""
    from speccond.harness.tasks.datasets import task_shape

    return task_shape(config.data.task).classes


def _command(command) -> tuple[str, ...]:
    if isinstance(command, str):
        return (command,)
    return tuple(str(part) for part in command or ())
