"""``speccond compare --task fashion-scenes --model xcit-maskrcnn``: baseline vs spectral over seeds, detection.

The classification comparison's conventions (experiments/compare.py): every (method, seed) is a resumable
run in ``<out>/<method>/seed-<k>`` (``<out>/<method>-lam=2/...`` under ``--sweep lam=2,10``), finished or
diverged runs are not trained again, each run's training wall time goes to its timing.json, and the
report (detection/report.py) is rebuilt from the folder alone, so ``speccond report <out>`` regenerates
it. Presets: see PRESETS; ``--set`` overrides any DetectionConfig field after the preset.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Mapping, Optional, Sequence

from speccond.detection.config import TASKS, DetectionConfig
from speccond.detection.report import DetectionReport, write_detection_report
from speccond.detection.train import train

# Step times, measured (tests' timing script, 25 steps): Mask R-CNN on the XCiT trunk (width 96, depth 4,
# 4 heads, patch 8, 96 px scenes, batch 8), float32, one thread, while two other training jobs kept this
# 2-core machine's load at 3.6 to 3.8: median 1.9 to 2.1 s per training step (baseline and lam = 10
# alike), fastest 1.3 s (about an idle core's speed); evaluation 0.13 s per scene. The same model in both
# presets, so both have the same step time; they differ in how many steps and test scenes.
PRESETS = {
    "fashion-scenes": {
        # 80 steps on 640 scenes, 100 test scenes: about 3 minutes per run on a busy core (2 methods x 3
        # seeds in under 20 minutes). The losses fall and AP leaves 0; too short to rank methods.
        "quick": ["train_size=640", "epochs=1", "val_size=0", "test_size=100", "warmup_steps=10"],
        # The small-scale reproduction: 4,000 scenes for 1 epoch (500 steps), all 1,500 test scenes:
        # about 20 minutes per run on a busy core (2 hours for 2 methods x 3 seeds), about 13 on an idle
        # one. A 200-step pilot (1,600 scenes, baseline) reached box AP 15.3, mask AP 13.8 on 200 test scenes.
        "full": ["train_size=4000", "epochs=1", "val_size=0", "test_size=0", "warmup_steps=50"],
    },
}


def preset(name: str, task: str) -> list[str]:
    """The DetectionConfig overrides of preset ``name`` ("quick" or "full") for ``task``."""
    if task not in PRESETS:
        raise ValueError(f"no detection presets for task {task!r}; tasks with presets: {', '.join(PRESETS)}")
    if name not in PRESETS[task]:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS[task])}")
    return list(PRESETS[task][name])


def compare(base: DetectionConfig, methods: Sequence[str], seeds: Sequence[int], out: Path, progress: bool = True,
            sweep: Optional[Mapping[str, Sequence[str]]] = None) -> DetectionReport:
    """Train every (variant, seed) not finished, then write the report of ``out``; return it."""
    from speccond.experiments.compare import train_timed, variants  # the classification comparison's folders, timing

    out = Path(out)
    for folder, config in variants(base, methods, sweep or {}):
        for seed in seeds:
            train_timed(dataclasses.replace(config, seed=seed), out / folder / f"seed-{seed}", progress, trainer=train)
    return write_detection_report([out], out)


def compare_command(args: argparse.Namespace) -> DetectionReport:
    """``speccond compare`` for a detection task (cli.py dispatches here when --task is one of TASKS)."""
    from speccond import data
    from speccond.experiments.compare import parse_sweep, variants

    chosen = [f"{key}={value}" for key, value in (("task", args.task), ("model", args.model)) if value]
    task = DetectionConfig().with_overrides([*chosen, *args.set]).task
    base = DetectionConfig().with_overrides([*preset(args.preset, task), *chosen, *args.set])
    sweep = parse_sweep(args.sweep)
    variants(base, args.methods, sweep)  # args.methods: cli.method_list's list; checked before any data is read
    data.prepare(TASKS[base.task])
    return compare(base, args.methods, range(args.seeds), Path(args.out), sweep=sweep)
