"""``speccond compare``: the same training run per method and seed, then a table anyone can check.

Every (method, seed) is an ordinary resumable run in ``<out>/<method>/seed-<k>`` (``<out>/<method>-lam=2/...``
for a swept value, ``--sweep lam=2,10``); finished (or diverged)
runs are not trained again, so an interrupted comparison continues where it stopped. The training wall
time of each run is kept in its timing.json (harness/training/timing.py). The report is then built from the folder alone by
:func:`speccond.harness.reporting.report.write_report`, the code behind ``speccond report``, so
``speccond report <out>`` regenerates the same results.md; it covers every run in the folder.
"""
from __future__ import annotations

import itertools
import os
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from speccond.harness.config.fields import sweep_setting
from speccond.harness.config.train_config import TrainConfig, folder_settings
from speccond.harness.reporting.groups import config_key, reads
from speccond.harness.reporting.report import Report, write_report
from speccond.harness.training.folder_lock import writing
from speccond.harness.training.preflight import check_comparison_folder, check_runnable
from speccond.harness.training.run_dir import check_records
from speccond.harness.training.timing import WallClock
from speccond.harness.training.train import train

def compare(base: TrainConfig, methods: Sequence[str], seeds: Sequence[int], out: Path, progress: bool = True,
            sweep: Optional[Mapping[str, Sequence[str]]] = None) -> Optional[Report]:
    """Train every (variant, seed) that is not finished, then write the report of ``out``; return it.

    Nothing is written before every variant is checked (preflight.py): it builds its model, its sizes fit
    the task's data, and ``out`` holds no runs of another task or protocol. Under torchrun every rank calls
    it and trains each run data-parallel (train.py); rank 0 alone holds the folder, times the runs and writes
    the report (None on the other ranks).

    ``sweep`` maps TrainConfig fields to values ({"lam": ["1", "10"]}): every method runs at every
    combination of them that changes what it computes (see :func:`variants`).
    """
    out, sweep = Path(out), sweep or {}
    chosen = variants(base, methods, sweep)
    check_comparison_folder(out, base, sweep)
    for folder, config in chosen:  # every variant builds and fits its data before the first run is written
        check_runnable(config.replaced(seed=next(iter(seeds), 0)))
        for seed in seeds:  # and no run folder records another config or lost its config.json or metrics.jsonl
            check_records(out / folder / f"seed-{seed}", config.replaced(seed=seed))
    main = is_main_process()  # under torchrun every rank trains each run data-parallel; rank 0 alone writes
    with writing(out) if main else nullcontext():  # one compare per folder at a time (folder_lock.py)
        for folder, config in chosen:
            for seed in seeds:
                run_dir = out / folder / f"seed-{seed}"
                if main:
                    train_timed(config.replaced(seed=seed), run_dir, progress, label=f"{folder} seed {seed}")
                else:
                    train(config.replaced(seed=seed), run_dir, progress=False)
        return write_report([out], out) if main else None


def is_main_process() -> bool:
    """Rank 0 of torchrun (RANK), or a process not started by it."""
    return int(os.environ.get("RANK", "0")) == 0


def variants(base: TrainConfig, methods: Sequence[str], sweep: Mapping[str, Sequence[str]]) -> list[tuple[str, TrainConfig]]:
    """(folder name, config) per method and combination of swept values, in that order.

    A combination that only changes fields the method does not read (lam for the baseline, granularity for a
    fixed lam * I: TrainConfig.ignored) is the run already listed and is not repeated, and a swept field that no
    variant reads is refused; the folder name is the method plus the swept fields it reads,
    e.g. ``spectral-lam=2`` (the same names as before for an empty sweep), lam=auto named by its bound,
    ``spectral-target_kappa=2`` (train_config.folder_settings).
    """
    for name, values in sweep.items():
        base.with_overrides([f"{name}={v}" for v in values])  # unknown field or bad value: ValueError now
        if not values:
            raise ValueError(f"--sweep {name}= names no values; give them comma-separated, e.g. {name}=1,10")
    chosen, seen, read = [], set(), set()
    for method in methods:
        for combination in itertools.product(*([(name, v) for v in values] for name, values in sweep.items())):
            config = base.replaced(method=method).with_overrides([f"{n}={v}" for n, v in combination])
            kept = [(n, v) for n, v in combination if not config.ignored(n)]  # what this run reads
            read.update(n for n, _ in kept)
            key = config_key(base.replaced(method=method).with_overrides([f"{n}={v}" for n, v in kept]))
            if key in seen:
                continue
            seen.add(key)
            named = [f"{n}={v}" for n, v in kept if reads(method, n)]  # recording fields leave the name alone
            chosen.append(("-".join([method, *folder_settings(named, config)]), config))
    for name, values in sweep.items():  # swept values no variant reads would be variants that differ in name alone
        if name not in read:
            why = base.replaced(method=methods[0]).with_overrides([f"{name}={values[-1]}"]).ignored(name)
            raise ValueError(f"--sweep {name}={','.join(values)}: {why}; leave it out, or choose methods and a model "
                             "that read it")
    return chosen


def parse_sweep(texts: Sequence[str]) -> dict[str, list[str]]:
    """``["lam=1,10", "weight_decay=0,0.05"]`` -> {"lam": ["1", "10"], "weight_decay": ["0", "0.05"]}."""
    sweep = {}
    for text in texts:
        try:
            name, values = sweep_setting(text)
        except ValueError:
            name, values = None, []
        if name is None or name in sweep:
            raise ValueError(f"--sweep takes FIELD=V1,V2,... once per field, got {text!r}")
        sweep[name] = values
    return sweep


def train_timed(config: TrainConfig, run_dir: str | Path, progress: bool = True,
                trainer: Optional[Callable[..., dict]] = None, label: str = "") -> dict:
    """``trainer(config, run_dir, progress=progress, on_checkpoint=..., label=label)`` (default: train.py's
    ``train``; ``label`` heads its progress bar),
    adding the wall time it spends to ``run_dir/timing.json`` (harness/training/timing.py) at every checkpoint and
    at the end, so a kill loses only the time since the last checkpoint, whose steps are trained again on
    resume anyway. A Ctrl-C records the time spent before it. A finished run asked again adds nothing."""
    run_dir = Path(run_dir)
    clock = WallClock(run_dir)
    try:
        final = (trainer or train)(config, run_dir, progress=progress, on_checkpoint=clock.record,
                                   **({"label": label} if label else {}))
    except KeyboardInterrupt:  # a second Ctrl-C: stopped at once, the last checkpoint resumes
        if run_dir.is_dir():
            clock.record(clock.reached)
        raise
    if "step" in final and final["step"] > clock.step_before:
        clock.record(final["step"])
    elif not final:  # stopped at a step boundary (Ctrl-C), to be resumed
        clock.record(clock.reached)
    return final
