"""The run directory the training loop keeps (harness/training/train.py).

    run_dir/config.json      the config and its form, its method label, the command that started the run, library versions
    run_dir/metrics.jsonl    one JSON row per line, appended as it happens: "train", "eval", "diverged", ...
    run_dir/checkpoints/     atomic checkpoints (checkpoint.py)

A loop writes config.json once (``write_config``; a second start with another config is refused),
returns a recorded divergence instead of training again (``recorded_divergence``), resumes from the
latest checkpoint and forgets the rows written after it (``resume``, ``drop_rows_after``), appends rows
(``append_row``), records a divergence when a loss is not finite (``record_divergence``), and runs its
steps inside a ``StepLoop`` (progress bar, Ctrl-C at a step boundary, checkpoint cadence).
"""
from __future__ import annotations

import importlib
import json
import logging
import os
import platform
import signal
import sys
import threading
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch
from torch import nn

import speccond
from speccond.diagnostics.records import append_rows, json_value, read_metrics
from speccond.harness import methods
from speccond.harness.config.forms import CONFIG_FORM
from speccond.harness.training import checkpoint

log = logging.getLogger(__name__)
METRICS = "metrics.jsonl"
TRAIN_ROW_EVERY = 10  # steps between "train" rows: a run that reached step 10 has written one
VOCABULARY_RECORD = "vocabulary_sha256"  # config.json's key: the vocabulary a run on your own texts tokenised with


def check_config(run_dir: Path, config) -> bool:
    """True when ``run_dir`` records ``config`` in its config.json, False when it has none; ValueError naming the
    file when it records another config or one that cannot be read (the folder's own record is the authority)."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        return False
    try:
        recorded = type(config).from_record(json.loads(path.read_text()))  # either form (train_config.py)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{path}: not a readable run config ({type(error).__name__}: {error}); restore it, or "
                         "use a new --out") from None
    if recorded != config:
        theirs, ours = recorded.to_dict(), config.to_dict()
        differing = ", ".join(f"{key}={ours[key]!r} (recorded {theirs[key]!r})" for key in ours if ours[key] != theirs[key])
        raise ValueError(f"{run_dir} was started with a different config ({path}): {differing}; resume with the same "
                         "config or use a new --out")
    return True


def check_records(run_dir: Path, config=None) -> None:
    """ValueError, before anything is written, when ``run_dir`` holds a run whose own records are incomplete:
    checkpoints or metrics.jsonl without the config.json they were trained with (another config would take
    them over: its report would pair their figures with settings they never had), or a checkpoint past the
    first "train" row without metrics.jsonl (resuming would lose every row before it). With ``config``, also
    when its config.json records another (:func:`check_config`)."""
    run_dir = Path(run_dir)
    if config is not None:
        check_config(run_dir, config)
    saved = checkpoint.complete(run_dir)
    metrics = (run_dir / METRICS).is_file()
    if not (run_dir / "config.json").is_file() and (saved or metrics):
        held = " and ".join(([f"checkpoints ({saved[0].name})"] if saved else []) + ([METRICS] if metrics else []))
        raise ValueError(f"{run_dir} holds a run's {held} but no config.json, so the config they were trained with is "
                         f"lost and no other may take them over; restore {run_dir / 'config.json'}, or train into a "
                         "new --out")
    if saved and not metrics and checkpoint.manifest_step(saved[0]) >= TRAIN_ROW_EVERY:
        raise ValueError(f"{run_dir} holds checkpoints up to {saved[0].name} but no {METRICS}, so resuming would lose "
                         f"the rows written before it; restore {run_dir / METRICS}, or delete {run_dir / checkpoint.FOLDER} "
                         "to train the run again from step 0, or train into a new --out")


def write_config(run_dir: Path, config, libraries: Sequence[str] = ("timm",), splits: Optional[dict] = None,
                 vocabulary: str = "", warmup: Optional[dict] = None) -> None:
    """Create ``run_dir`` and write its config.json, or check that the one there records ``config``.

    ``config`` is a TrainConfig (anything with ``to_dict`` and ``from_record``); config.json records its
    ``"config_form"`` (train_config.py: how its "config" says lam="auto"). ``libraries`` are imported
    to record their versions beside speccond's, torch's and python's; ``splits`` (when not empty) says how
    the validation split was drawn (its size, seed and the SHA-256 of its indices); ``vocabulary`` (when not empty)
    is the SHA-256 of the vocabulary a text task of your own tokenised with (pretrained.py reads it); ``warmup`` (when not
    empty) is the warm-up the schedule adapted because the one asked for was not shorter than the run
    (recipe.adapted_warmup, under recipe.ADAPTED_WARMUP). Detection runs written before the
    one harness also carry ``"kind": "detection"``; their config, read as a TrainConfig, is what counts.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    if check_config(run_dir, config):
        return
    versions = {"speccond": speccond.__version__, "torch": torch.__version__}
    versions.update({name: getattr(importlib.import_module(name), "__version__", "?") for name in libraries})
    record = {"config": config.to_dict(), "config_form": CONFIG_FORM, "label": method_label(config), "command": command(),
              "versions": {**versions, "python": platform.python_version()}, "arithmetic": arithmetic()}
    if splits:
        record["splits"] = splits
    if vocabulary:
        record[VOCABULARY_RECORD] = vocabulary
    if warmup:
        from speccond.harness.training.recipe import ADAPTED_WARMUP

        record[ADAPTED_WARMUP] = warmup
    partial = run_dir / "config.partial"
    partial.write_text(json.dumps(record, indent=2))
    partial.replace(run_dir / "config.json")

PARALLEL_JOBS = "SPECCOND_PARALLEL_JOBS"  # the environment variable: runs its launcher trains side by side


def arithmetic() -> dict:
    """What decides the order of this process's floating-point sums on a CPU: torch's intra-op thread count
    and the vector instruction set its kernels were dispatched for. The published runs regenerate digit for
    digit only with the same two (one thread, as scripts/reproduce.sh sets, gives other sums than two: the
    main job's lam = 10 seeds end 3 points apart, docs/RESULTS.md). Also the CPU count and the load when
    the run started, which says how many jobs shared the machine (wall times depend on it), and the number
    of runs its launcher trained side by side when it says so (``SPECCOND_PARALLEL_JOBS``: speccond tune
    --jobs, scripts/protocol.sh, scripts/long_budget.sh)."""
    record = {"threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "cpus": os.cpu_count()}
    if os.environ.get(PARALLEL_JOBS):  # set by speccond tune --jobs and the protocol scripts
        record["parallel_jobs"] = int(os.environ[PARALLEL_JOBS])
    if hasattr(os, "getloadavg"):  # the machine's 1-minute load at the start: how many jobs ran side by side
        record["load_at_start"] = round(os.getloadavg()[0], 2)
    return record


def method_label(config) -> str:
    """config.json's "label": the method and its lam ("baseline", "spectral lam=10",
    "spectral lam=auto(kappa<=50)", "spectral lam=auto(kappa<=5) key_basis=orthogonal"), by methods.label over
    those fields the method reads."""
    values = {"method": config.method.name}
    values.update({name: config.value(name) for name in ("lam", "target_kappa", "key_basis")
                   if methods.reads(config.method.name, name)})
    return methods.label(values)


def command() -> list[str]:
    """The command line that started this run, with the program named as a user would type it."""
    program = Path(sys.argv[0]).name if sys.argv else ""
    if program in ("speccond", "__main__.py"):
        return ["speccond", *sys.argv[1:]]
    return list(sys.argv)


def append_row(path: Path, row: dict) -> None:
    append_rows(path, [row])


def drop_rows_after(path: Path, step: int) -> None:
    """On resume, forget rows written after the checkpoint (they will be written again)."""
    if not path.is_file():
        return
    kept = [row for row in read_metrics(path, as_written=True) if row.get("step", 0) <= step]
    partial = path.with_suffix(".partial")
    partial.write_text("".join(json.dumps(json_value(row)) + "\n" for row in kept))
    partial.replace(path)


def resume(run_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
           load_extra: Optional[Callable[[dict], None]] = None) -> int:
    """Load the latest checkpoint into ``model`` and ``optimizer`` (and its whole state into ``load_extra``:
    a float16 run's gradient scaler); return its step (0 when there is none).

    A checkpoint whose files differ from their checksums is passed over, with a warning, for the newest
    one before it that loads (checkpoint.py); with none left the run starts again from step 0."""
    newest = checkpoint.latest(run_dir)
    if newest is None:
        return 0
    candidates = [newest, *(f for f in checkpoint.complete(run_dir) if f.name < newest.name)]
    for folder in candidates:
        try:
            manifest, state = checkpoint.load(folder, model)
        except checkpoint.DamagedCheckpoint as error:
            log.warning("%s; trying the checkpoint before it", error)
            continue
        if folder != newest:
            log.warning("resuming %s from %s, the newest intact checkpoint, instead of %s", run_dir, folder.name,
                        newest.name)
        optimizer.load_state_dict(state["optimizer"])
        if load_extra is not None:
            load_extra(state)
        log.info("resumed %s at step %d", run_dir, manifest["step"])
        return int(manifest["step"])
    log.warning("%s: no intact checkpoint is left (%s), so the run starts again from step 0", run_dir,
                ", ".join(f.name for f in candidates))
    return 0


def recorded_divergence(run_dir: Path) -> Optional[dict]:
    """The "diverged" row of a run that diverged before (logged: it is not trained again), else None."""
    for row in read_metrics(run_dir / METRICS, as_written=True):
        if row.get("kind") == "diverged":
            log.error("%s diverged at step %d (loss %s); not training it again", run_dir, row["step"], row["loss"])
            return row
    return None


def record_divergence(run_dir: Path, step: int, loss: float, total_steps: int, write: bool = True) -> dict:
    """The training loss before update ``step + 1`` is ``loss``, not finite: the run stops. Return its
    "diverged" row; with ``write`` (rank 0) append it and drop a checkpoint taken at ``step``."""
    row = {"kind": "diverged", "step": step + 1, "loss": str(loss), "total_steps": total_steps}
    if write:
        append_row(run_dir / METRICS, row)
        keep_good_checkpoint(run_dir, step)
    log.error(
        "training loss is %s at step %d of %s: the run diverged and stops here; its last good checkpoint "
        "is kept (lower lr or lam, or raise warmup_steps, and start a new --out)", loss, step + 1, run_dir,
    )
    return row


def keep_good_checkpoint(run_dir: Path, step: int) -> None:
    """A checkpoint taken at ``step`` holds the weights whose loss was not finite: drop it."""
    folder = checkpoint.latest(run_dir)
    if folder is not None and checkpoint.manifest_step(folder) == step:
        checkpoint.discard_latest(run_dir)


def all_finite(model: nn.Module) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def progress_bar(total: int, start: int, enabled: bool, label: str = ""):
    """A tqdm bar on stderr over steps, starting at ``start`` (rate and ETA), headed by ``label`` (which run:
    "spectral-svd seed 1"); a no-op when not ``enabled``."""
    from tqdm import tqdm

    return tqdm(total=total, initial=start, disable=not enabled, unit="step", dynamic_ncols=True, file=sys.stderr,
                desc=label or None)


def announce(label: str, what: str, enabled: bool) -> None:
    """One line on stderr about run ``label`` beside the progress bars ("spectral seed 0: done, skipped")."""
    if enabled and label:
        from tqdm import tqdm

        tqdm.write(f"{label}: {what}", file=sys.stderr)


class StepBoundaryInterrupt:
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


class StepLoop:
    """The bookkeeping around a training loop's steps: a progress bar and a ``StepBoundaryInterrupt``,
    both released on leaving the ``with`` block.

        with StepLoop(total_steps, step, progress) as steps:
            while step < total_steps:
                ...  # one update
                step += 1
                steps.advanced(loss_value)
                ...  # rows, evaluation
                if steps.boundary(step, save, checkpoint_due, stop_after):
                    return {}
    """

    def __init__(self, total: int, start: int, show: bool, label: str = "") -> None:
        self.bar = progress_bar(total, start, show, label)
        self.interrupt = StepBoundaryInterrupt()

    def __enter__(self) -> "StepLoop":
        return self

    def __exit__(self, *exc) -> None:
        self.interrupt.restore()
        self.bar.close()

    def advanced(self, loss: float) -> None:
        """One step done, at training loss ``loss``."""
        self.bar.update(1)
        self.bar.set_postfix(loss=f"{loss:.3f}")

    def boundary(self, step: int, save: Callable[[], None], checkpoint_due: bool, stop_after: Optional[int]) -> bool:
        """End of step ``step``: ``save()`` when ``checkpoint_due``; True when ``stop_after`` is reached (stop
        as a kill would, for tests of resumption). After a Ctrl-C: ``save()`` and raise KeyboardInterrupt."""
        if checkpoint_due:
            save()
        if stop_after is not None and step >= stop_after:
            return True
        if self.interrupt.requested:
            if not checkpoint_due:  # saved once above already
                save()
            log.warning("interrupted after step %d; checkpoint saved, resume with the same command", step)
            raise KeyboardInterrupt
        return False
