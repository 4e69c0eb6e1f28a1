"""Starting a run from a pre-trained encoder: ``TrainConfig.init_from`` (the language experiment's fine-tuning).

    speccond train --out runs/ft --set task=glue-sst2 --set model=bert --set init_from=runs/mlm/spectral/seed-0
    speccond compare --task glue-sst2 --methods baseline,spectral --set init_from=runs/mlm/{method}/seed-0

``{field}`` placeholders in ``init_from`` (``{method}``, ``{seed}``, ``{lam:g}``: any TrainConfig field)
are filled from the run's own config, so one comparison fine-tunes every method from its own
pre-trained model (a ``--sweep lam=...`` comparison writes ``<method>-lam=<value>`` folders:
``runs/mlm/{method}-lam={lam:g}/seed-0``). :func:`load_pretrained` refuses, with a
ValueError that says what to do, a directory that

- holds no run, or a run that is unfinished or diverged (runs.read_run: finished means an eval row at
  its final step);
- is not a masked-language-model pre-training run (task "mlm", or ``text:DIR?text=COLUMN&mlm=1``);
- tokenises with another vocabulary than this task: a pre-training run of this task's dataset (the built-in
  mlm -> glue-* path) passes as before; any other pair must store the same vocabulary, compared by the SHA-256
  of the tokenizer each cache stores (data/text_vocabulary.py; for a pre-training on your own texts, the
  one its config.json recorded when it started, :func:`run_vocabulary`, so texts edited since are caught), so
  your own texts fine-tune from a pre-training on other texts of yours when they say ``&vocab_from=`` its cache
  (data/text_files.py);
- has another architecture (model, embed_dim, depth, num_heads) or another conditioning: the method
  and, for the spectral methods, lam / target_kappa, correction, corrected, granularity and key_basis. The
  encoder's W were learnt with W + C in the forward pass; the same W with another C, or none, is
  another function, so a fine-tuned model must carry the correction it was pre-trained with.

Otherwise the pre-training model is rebuilt from its recorded config, its final checkpoint is loaded
with its checksums verified (checkpoint.load: safetensors weights), and every encoder tensor
(``bert.bert.*`` but the pooler, which MLM does not train) is copied into the new model, in place: the
names and shapes must agree one for one. Parametrized weights, sigma-reparam's gamma and the stored
corrections (SVD, lam="auto") are encoder tensors and come along. The heads (MLM decoder, pooler,
classifier) keep their fresh initialisation.

A pre-training run kept in the repository without its checkpoints (kept_runs --pretraining, so that the
language protocol's fine-tuning resumes on a fresh machine) carries those encoder tensors in
``encoder.safetensors``, written by :func:`write_kept_encoder` from its final checkpoint, with their step and
SHA-256 in ``encoder.json``; :func:`load_pretrained` reads them, checksum verified, when the run has no
checkpoint.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from torch import nn

from speccond.harness.config.train_config import TrainConfig
from speccond.harness.methods import REGISTRY
from speccond.harness.models.bert import ENCODER, POOLER
from speccond.harness.training import checkpoint
from speccond.harness.training.run_dir import VOCABULARY_RECORD

log = logging.getLogger(__name__)

KEPT_ENCODER = "encoder.safetensors"  # a kept pre-training run's encoder tensors (module docstring)
KEPT_ENCODER_RECORD = "encoder.json"  # {"step": int, "sha256": str} of KEPT_ENCODER
SAME_ARCHITECTURE = ("model", "embed_dim", "depth", "num_heads")
SPECTRAL_PARAMETERS = ("lam", "target_kappa", "correction", "corrected", "granularity", "key_basis")


def init_dir(config: TrainConfig) -> Path:
    """``config.model.init_from`` with its ``{field}`` placeholders filled from ``config``."""
    return Path(config.init_path())


def conditioning(config: TrainConfig) -> dict:
    """The fields that define what the method does to q, k, v (module docstring)."""
    method = REGISTRY.get(config.method.name)
    return _pick(config, ("method",) + (SPECTRAL_PARAMETERS if method is not None and method.conditions else ()))


def _pick(config: TrainConfig, names: tuple[str, ...]) -> dict:
    return {name: config.value(name) for name in names}


def pretrained_config(config: TrainConfig) -> TrainConfig:
    """The config of the finished pre-training run ``config.model.init_from`` names; ValueError when it does not fit."""
    from speccond.harness.tasks.datasets import task
    from speccond.harness.training.runs import read_run

    folder = init_dir(config)
    if not (folder / "config.json").is_file():
        raise ValueError(f"init_from={config.model.init_from!r}: {folder} holds no run (no config.json); pre-train first, "
                         f"e.g. speccond train --out {folder} --set task=mlm --set model=bert --set method={config.method.name}")
    record = read_run(folder)
    if record.status != "finished":
        where = f"step {record.step} of {record.total_steps or '?'}"
        advice = f": finish it with speccond train --resume {folder}" if record.status == "unfinished" else ""
        raise ValueError(f"init_from: {folder} is {record.status} ({where}); only a finished pre-training run can be "
                         f"fine-tuned{advice}")
    pre = record.config
    if task(pre.data.task).reading != "mlm":
        raise ValueError(f"init_from: {folder} trained task {pre.data.task!r}; task {config.data.task!r} starts from a "
                         "pre-training run of an mlm task (mlm, or text:DIR?text=COLUMN&mlm=1)")
    if task(pre.data.task).dataset != task(config.data.task).dataset:  # one dataset: one tokenizer
        _same_vocabulary(folder, pre.data.task, config.data.task)
    for what, theirs, ours in (
        ("architecture", _pick(pre, SAME_ARCHITECTURE), _pick(config, SAME_ARCHITECTURE)),
        ("conditioning", conditioning(pre), conditioning(config)),
    ):
        if theirs != ours:
            raise ValueError(
                f"init_from: {folder} was pre-trained with {_fields(theirs)}, but this run has {_fields(ours)}; a "
                f"fine-tuned model needs the {what} it was pre-trained with (the encoder's weights were learnt under that "
                f"correction): point init_from at a run of the same {what}, e.g. runs/mlm/{{method}}/seed-0"
            )
    return pre


def _same_vocabulary(folder: Path, pre_task: str, fine_task: str) -> None:
    """ValueError unless tasks ``pre_task`` and ``fine_task`` store the same vocabulary (its SHA-256): the
    pre-trained embeddings are read by token id, so the ids must mean the same words."""
    from speccond.data import text_files
    from speccond.harness.tasks.datasets import vocabulary

    found = {}
    for name in (pre_task, fine_task):
        try:
            found[name] = vocabulary(name)
        except ValueError as error:
            raise ValueError(f"init_from: the vocabulary of task {name!r} cannot be read to compare it with the "
                             f"pre-training's ({error})") from None
    (cache, now), (_, ours) = found[pre_task], found[fine_task]
    theirs = json.loads((folder / "config.json").read_text()).get(VOCABULARY_RECORD, now)  # what it trained with
    if theirs == ours:
        return
    if theirs != now:
        raise ValueError(f"init_from: {folder} was pre-trained on {pre_task!r} with a vocabulary (sha256 {theirs[:12]}) "
                         f"its texts no longer give (sha256 {now[:12]}: they changed since); give the task &vocab_from= "
                         "the cache it was pre-trained with, or pre-train again")
    advice = (f"tokenise it with the pre-training's vocabulary: add &vocab_from={cache} to the task"
              if text_files.is_text_files(fine_task)
              else f"pre-train on the mlm task of {fine_task!r}'s dataset, or fine-tune a text:DIR?...&vocab_from={cache} task")
    raise ValueError(f"init_from: {folder} was pre-trained on {pre_task!r}, whose vocabulary (sha256 {theirs[:12]}) is not "
                     f"the one {fine_task!r} tokenises with (sha256 {ours[:12] or 'none'}): {advice}")


def run_vocabulary(config: TrainConfig) -> str:
    """The SHA-256 of the vocabulary a run on a text task of your own tokenises with (config.json's
    VOCABULARY_RECORD, so that a fine-tune compares against the vocabulary the run trained with, even after its
    texts change); "" for every other task, whose config.json stays as it was."""
    from speccond.data import text_files
    from speccond.harness.tasks.datasets import vocabulary

    return vocabulary(config.data.task)[1] if text_files.is_text_files(config.data.task) else ""


def load_pretrained(model: nn.Module, config: TrainConfig) -> TrainConfig:
    """Copy the encoder of the run ``config.model.init_from`` names into ``model`` in place; return that run's config."""
    pre = pretrained_config(config)
    folder, encoder, step = _encoder(init_dir(config), pre)
    wanted = {k: v for k, v in model.state_dict().items() if k.startswith(ENCODER) and not k.startswith(POOLER)}
    if set(encoder) != set(wanted):
        missing, extra = sorted(set(wanted) - set(encoder)), sorted(set(encoder) - set(wanted))
        raise ValueError(f"init_from: the encoder in {folder} does not match this model (missing {missing[:4]}, "
                         f"unexpected {extra[:4]}); was it pre-trained with another speccond version?")
    shapes = [(k, tuple(encoder[k].shape), tuple(v.shape)) for k, v in wanted.items() if encoder[k].shape != v.shape]
    if shapes:
        raise ValueError(f"init_from: tensor shapes differ between {folder} and this model: {shapes[:4]} (name, "
                         "pre-trained, this model); pre-train with the same sizes and vocabulary")
    result = model.load_state_dict(encoder, strict=False)
    assert not result.unexpected_keys, result.unexpected_keys  # checked above
    log.info("initialised %d encoder tensors from %s (step %d)", len(encoder), folder, step)
    return pre


def _encoder(run_dir: Path, pre: TrainConfig) -> tuple[Path, dict, int]:
    """(where they were read, the encoder tensors, their step) of the finished pre-training run in RUN_DIR:
    from its last checkpoint, else from its kept encoder file (module docstring)."""
    from speccond.harness.training.runs import load_model

    latest = checkpoint.latest(run_dir)
    if latest is not None:
        source, manifest = load_model(pre, latest)
        return latest, {k: v for k, v in source.state_dict().items() if k.startswith(ENCODER)}, manifest["step"]
    from safetensors.torch import load_file

    from speccond.data.store import sha256

    path, record_path = run_dir / KEPT_ENCODER, run_dir / KEPT_ENCODER_RECORD
    if not path.is_file():
        raise ValueError(f"init_from: {run_dir} holds neither a checkpoint nor a kept encoder ({KEPT_ENCODER}); "
                         f"train the pre-training run again there, or restore its kept records with `python -m "
                         f"speccond.harness.protocol.kept_runs restore --pretraining {run_dir.parent.parent} KEPT`")
    try:
        record = json.loads(record_path.read_text())
        expected, step = record["sha256"], int(record["step"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{record_path}: unreadable ({error}); expected the JSON object "
                         f'{{"step": ..., "sha256": ...}} that write_kept_encoder writes beside {KEPT_ENCODER}') from None
    if sha256(path) != expected:
        raise ValueError(f"{path}: corrupt (its SHA-256 differs from {record_path}); refusing to fine-tune from it")
    return path, load_file(str(path)), step


def write_kept_encoder(run_dir: Path, target: Path) -> None:
    """TARGET/encoder.safetensors and encoder.json: the encoder tensors of the finished pre-training run in
    RUN_DIR (which must still have its checkpoints), so that a copy of its records without them can be
    fine-tuned from (:func:`load_pretrained` reads them)."""
    from safetensors.torch import save_file

    from speccond.data.store import sha256
    from speccond.harness.training.runs import read_run

    record, latest = read_run(run_dir), checkpoint.latest(run_dir)
    if record.status != "finished" or latest is None:
        raise ValueError(f"{run_dir}: only a finished pre-training run with its checkpoints can have its encoder "
                         f"kept (it is {record.status}, checkpoint: {latest})")
    _, encoder, step = _encoder(Path(run_dir), record.config)
    save_file({k: v.detach().clone().contiguous() for k, v in encoder.items()}, str(target / KEPT_ENCODER))
    (target / KEPT_ENCODER_RECORD).write_text(json.dumps({"step": step, "sha256": sha256(target / KEPT_ENCODER)}) + "\n")


def _fields(values: dict) -> str:
    return ", ".join(f"{k}={json.dumps(v) if isinstance(v, str) else v}" for k, v in values.items())
