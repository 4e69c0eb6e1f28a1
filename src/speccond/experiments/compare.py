"""``speccond compare``: the same training run per method and seed, then a table anyone can check.

Every (method, seed) is an ordinary resumable run in ``<out>/<method>/seed-<k>`` (``<out>/<method>-lam=2/...``
for a swept value, ``--sweep lam=2,10``); finished (or diverged)
runs are not trained again, so an interrupted comparison continues where it stopped. The training wall
time of each run is kept in its timing.json. The report is then built from the folder alone by
:func:`speccond.experiments.report.write_report`, the code behind ``speccond report``, so
``speccond report <out>`` regenerates the same results.md; it covers every run in the folder.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import time
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from speccond.experiments.config import TrainConfig
from speccond.experiments.report import Report, config_key, reads, write_report
from speccond.experiments.train import train

# Presets per task: (quick, full). Each is a list of TrainConfig overrides; --set overrides them.
_BERT = ["model=bert", "embed_dim=128", "depth=2", "num_heads=2"]  # the language tasks' one model size
PRESETS = {
    "fashion-mnist": {
        # About 4 minutes for 2 methods x 3 seeds on 2 CPU cores: a ViT of width 64 on 7 x 7 patches
        # (16 tokens), one epoch over 51,200 training images (400 steps), 2,000 test images.
        "quick": ["embed_dim=64", "patch_size=7", "train_size=51200", "epochs=1", "test_size=2000", "warmup_steps=20",
                  "track_every=50"],
        # The small-scale reproduction: the same model on all 60,000 images for 3 epochs (1,407 steps),
        # all 10,000 test images; about 3 minutes per run on one core (an hour for 7 methods x 3 seeds).
        "full": ["embed_dim=64", "patch_size=7", "epochs=3", "warmup_steps=100", "track_every=100"],
    },
    "cifar10": {
        # Width 64, 4 x 4 patches (64 tokens), 8,000 training and 2,000 held-out images (cifar10.py).
        "quick": ["embed_dim=64", "patch_size=4", "epochs=1", "test_size=1000", "warmup_steps=20", "track_every=20"],
        # 5 epochs (315 steps): about 3 minutes per ViT run on one core; Swin wants --set patch_size=8.
        "full": ["embed_dim=64", "patch_size=4", "epochs=5", "warmup_steps=50", "track_every=50"],
    },
    "lra-image": {  # LRA Image: CIFAR-10 as 1,024 grey-level tokens, a 2-layer Nystromformer (64 landmarks)
        "quick": ["model=nystromformer", "embed_dim=64", "depth=2", "num_heads=2", "landmarks=64", "batch_size=32",
                  "train_size=2048", "test_size=500", "epochs=1", "warmup_steps=10", "track_every=16"],
        "full": ["model=nystromformer", "embed_dim=64", "depth=2", "num_heads=2", "landmarks=64", "batch_size=32",
                 "epochs=5", "warmup_steps=100", "track_every=100"],
    },
    "lra-pathfinder": {  # LRA Pathfinder-32 as 1,024 pixel tokens (pathfinder-small), a 2-layer Nystromformer
        "quick": ["model=nystromformer", "embed_dim=64", "depth=2", "num_heads=2", "landmarks=64", "batch_size=32",
                  "train_size=2048", "test_size=500", "epochs=1", "warmup_steps=10", "track_every=16"],
        "full": ["model=nystromformer", "embed_dim=64", "depth=2", "num_heads=2", "landmarks=64", "batch_size=32",
                 "epochs=5", "warmup_steps=100", "track_every=100"],
    },
    "lra-listops": {  # LRA ListOps at 100 to 256 tokens (listops-small), a 2-layer Nystromformer
        "quick": ["model=nystromformer", "embed_dim=64", "depth=2", "num_heads=2", "landmarks=64", "batch_size=32",
                  "train_size=2048", "test_size=500", "epochs=1", "warmup_steps=10", "track_every=16"],
        "full": ["model=nystromformer", "embed_dim=64", "depth=2", "num_heads=2", "landmarks=64", "batch_size=32",
                 "epochs=5", "warmup_steps=100", "track_every=100"],
    },
    "lra-text": {  # analogue of LRA Text: MultiEmo reviews as 2,048 bytes (text-bytes), a 2-layer Nystromformer
        "quick": ["model=nystromformer", "embed_dim=64", "depth=2", "num_heads=2", "landmarks=64", "batch_size=32",
                  "train_size=2048", "test_size=500", "epochs=1", "warmup_steps=10", "track_every=16"],
        # all 6,573 reviews for 5 epochs (1,030 steps; a step costs about twice an lra-image step), all 821 test reviews
        "full": ["model=nystromformer", "embed_dim=64", "depth=2", "num_heads=2", "landmarks=64", "batch_size=32",
                 "epochs=5", "warmup_steps=100", "track_every=100"],
    },
    "lra-retrieval": {  # analogue of LRA Retrieval: two 256-byte lines (pairs-bytes), one shared Nystromformer
        "quick": ["model=nystromformer", "embed_dim=64", "depth=2", "num_heads=2", "landmarks=64", "batch_size=32",
                  "train_size=2048", "test_size=500", "epochs=1", "warmup_steps=10", "track_every=16"],
        # all 39,827 pairs for 2 epochs (2,490 steps; a step costs about 0.8 of an lra-image step), all 4,978 test pairs
        "full": ["model=nystromformer", "embed_dim=64", "depth=2", "num_heads=2", "landmarks=64", "batch_size=32",
                 "epochs=2", "warmup_steps=100", "track_every=200"],
    },
    # The language experiment (data/language.py): one BERT size for pre-training and fine-tuning, so a glue-* run
    # can start from an mlm run (--set init_from=runs/language-mlm/{method}/seed-0): depth 2, width 128, 2 heads
    # of 64, intermediate 512, 1.49M parameters (1.05M of them the 8,192 x 128 word embeddings). CPU time per
    # step on one core: mlm batch 64, 0.9 s; glue batch 32, 0.13 s at 64 tokens, 0.25 s at 128 (glue-fact).
    "mlm": {
        # 64 steps (4,096 blocks), the first 256 held-out blocks: about a minute per run.
        "quick": [*_BERT, "batch_size=64", "train_size=4096", "epochs=1", "test_size=256", "lr=1e-3",
                  "weight_decay=0.01", "warmup_steps=10", "track_every=32"],
        # 3 epochs over the 21,039 blocks (987 steps, 8.1M tokens seen), all 931 held-out blocks:
        # about 15 minutes per run on one core.
        "full": [*_BERT, "batch_size=64", "epochs=3", "lr=1e-3", "weight_decay=0.01", "warmup_steps=100",
                 "track_every=100"],
    },
    **{f"glue-{name}": {
        # 4,096 training examples, 1 epoch (128 steps, 15 to 35 s), the first 1,000 test examples.
        "quick": [*_BERT, "batch_size=32", "train_size=4096", "epochs=1", "test_size=1000", "lr=2e-4",
                  "weight_decay=0.01", "warmup_steps=12", "track_every=64"],
        # 16,384 training examples (a seeded subset), 2 epochs (1,024 steps), the whole test split: per run
        # about 2 min (hyperbaton, sentiment, pairs) to 4 (fact) on one core; 10 min for the four tasks, an hour
        # for 2 methods x 3 seeds. All training examples: --set train_size=0 (2.6x the steps).
        "full": [*_BERT, "batch_size=32", "train_size=16384", "epochs=2", "lr=2e-4", "weight_decay=0.01",
                 "warmup_steps=100", "track_every=200"],
    } for name in ("sentiment", "fact", "pairs", "hyperbaton")},
    "digits": {  # 8 x 8 images, seconds per run: for tests and smoke checks
        "quick": ["embed_dim=32", "depth=2", "num_heads=2", "patch_size=2", "epochs=15", "batch_size=64", "warmup_steps=20"],
        "full": ["embed_dim=32", "depth=2", "num_heads=2", "patch_size=2", "epochs=40", "batch_size=64", "warmup_steps=50"],
    },
}


def preset(name: str, task: str) -> list[str]:
    """The TrainConfig overrides of preset ``name`` ("quick" or "full") for ``task``."""
    if task not in PRESETS:
        raise ValueError(f"no presets for task {task!r}; tasks with presets: {', '.join(PRESETS)}")
    if name not in PRESETS[task]:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS[task])}")
    return list(PRESETS[task][name])


def compare(base: TrainConfig, methods: Sequence[str], seeds: Sequence[int], out: Path, progress: bool = True,
            sweep: Optional[Mapping[str, Sequence[str]]] = None) -> Report:
    """Train every (variant, seed) that is not finished, then write the report of ``out``; return it.

    ``sweep`` maps TrainConfig fields to values ({"lam": ["1", "10"]}): every method runs at every
    combination of them that changes what it computes (see :func:`variants`).
    """
    out = Path(out)
    for folder, config in variants(base, methods, sweep or {}):
        for seed in seeds:
            train_timed(dataclasses.replace(config, seed=seed), out / folder / f"seed-{seed}", progress)
    return write_report([out], out)


def variants(base: TrainConfig, methods: Sequence[str], sweep: Mapping[str, Sequence[str]]) -> list[tuple[str, TrainConfig]]:
    """(folder name, config) per method and combination of swept values, in that order.

    A combination that only changes fields the method does not read (lam for the baseline) is the run
    already listed and is not repeated; the folder name is the method plus the swept fields it reads,
    e.g. ``spectral-lam=2`` (the same names as before for an empty sweep).
    """
    for name, values in sweep.items():
        base.with_overrides([f"{name}={v}" for v in values])  # unknown field or bad value: ValueError now
        if not values:
            raise ValueError(f"--sweep {name}= names no values; give them comma-separated, e.g. {name}=1,10")
    chosen, seen = [], set()
    for method in methods:
        for combination in itertools.product(*([(name, v) for v in values] for name, values in sweep.items())):
            config = dataclasses.replace(base, method=method).with_overrides([f"{n}={v}" for n, v in combination])
            if config_key(config) in seen:
                continue
            seen.add(config_key(config))
            chosen.append(("-".join([method, *(f"{n}={v}" for n, v in combination if reads(method, n))]), config))
    return chosen


def parse_sweep(texts: Sequence[str]) -> dict[str, list[str]]:
    """``["lam=1,10", "weight_decay=0,0.05"]`` -> {"lam": ["1", "10"], "weight_decay": ["0", "0.05"]}."""
    sweep = {}
    for text in texts:
        name, sep, values = text.partition("=")
        if not sep or name in sweep:
            raise ValueError(f"--sweep takes FIELD=V1,V2,... once per field, got {text!r}")
        sweep[name] = [v.strip() for v in values.split(",") if v.strip()]
    return sweep


def train_timed(config: TrainConfig, run_dir: str | Path, progress: bool = True,
                trainer: Callable[..., dict] = train) -> dict:
    """``trainer(config, run_dir, progress=progress)`` (train.py's ``train``; detection/train.py's for a
    DetectionConfig), adding the wall time it spent to ``run_dir/timing.json`` ({"seconds", "step"}: the
    finished step, -1 until then) when it got further than the recorded step, or was stopped on the way
    (Ctrl-C: the time spent before a resume counts too). A finished run asked again adds nothing; a kill
    that leaves no Python running (SIGKILL) loses the time since the last record."""
    run_dir = Path(run_dir)
    timing = run_dir / "timing.json"
    recorded = json.loads(timing.read_text()) if timing.is_file() else {"seconds": 0.0, "step": -1}
    started = time.perf_counter()

    def record(step: int) -> None:
        partial = timing.with_suffix(".partial")
        partial.write_text(json.dumps({"seconds": recorded["seconds"] + time.perf_counter() - started, "step": step}))
        partial.replace(timing)

    try:
        final = trainer(config, run_dir, progress=progress)
    except KeyboardInterrupt:  # a second Ctrl-C: stopped at once, the last checkpoint resumes
        if run_dir.is_dir():
            record(recorded["step"])
        raise
    if "step" in final and final["step"] > recorded["step"]:
        record(final["step"])
    elif not final:  # stopped at a step boundary (Ctrl-C), to be resumed
        record(recorded["step"])
    return final
