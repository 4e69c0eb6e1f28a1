"""Runs grouped by their config without the seed: what every report (report.py, harness/tasks/detection/report.py, the
GLUE table) tables, one row per group.

A group's settings are the run's TrainConfig without the seed, the recording-only fields and the
parameters its method does not read (so a baseline run ignores lam); it is labelled by its method and
parameters (methods.label), plus any other setting that differs between the groups.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from speccond.core.config import AUTO
from speccond.harness import methods
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.values import show_value

DEFAULT_LAM = TrainConfig().method.lam  # where lam = "auto" sorts (10)
IGNORED_FIELDS = ("seed", "track_every", "checkpoint_every", "eval_batch_size")  # how a run is recorded, not its result
DEFAULT_OUT = Path("report")


@dataclass(frozen=True)
class Group:
    """The runs of one config (all but the seed), sorted by seed; ``included`` are those in statistics."""

    label: str
    method: str
    settings: dict  # the config fields that define the group
    runs: tuple  # RunRecord (runs.py) or harness/tasks/detection/report.py DetectionRun

    @property
    def included(self) -> list:
        return [r for r in self.runs if r.status != "unfinished"]


def default_out(folders: Sequence[str | Path]) -> Path:
    """The comparison folder when exactly one is given (not a run directory), else ./report."""
    if len(folders) == 1 and not (Path(folders[0]) / "config.json").exists():
        return Path(folders[0])
    return DEFAULT_OUT


def group_runs(records: Sequence) -> list[Group]:
    """Groups in order of first appearance; two runs of one config and seed are a ValueError."""
    by_key: dict[tuple, list] = {}
    for record in records:
        by_key.setdefault(config_key(record.config), []).append(record)
    for runs in by_key.values():
        seen: dict = {}
        for run in runs:
            if run.seed in seen:
                raise ValueError(
                    f"{seen[run.seed].path} and {run.path} are the same config and seed {run.seed}; "
                    "statistics need one run per seed: pass only one of them"
                )
            seen[run.seed] = run
    settings = [dict(key) for key in by_key]
    order = _group_order(settings)
    settings, run_lists = [settings[i] for i in order], [list(by_key.values())[i] for i in order]
    varying = sorted({f for s in settings for f in s if len({t.get(f) for t in settings}) > 1} - {"method", *methods.parameters()})
    groups = []
    for values, runs in zip(settings, run_lists):
        label = methods.label(values)
        extra = [f"{f}={show_value(values[f])}" for f in varying if f in values]
        groups.append(Group(label + (f" ({', '.join(extra)})" if extra else ""), values["method"], values,
                            tuple(sorted(runs, key=lambda r: r.seed))))
    assert len({g.label for g in groups}) == len(groups), [g.label for g in groups]
    return groups


def config_key(config) -> tuple:
    """The settings that define a run's group: its TrainConfig without the seed, the recording-only fields
    and the parameters its method does not read (so a baseline run ignores lam)."""
    values = config.to_dict()
    for name in IGNORED_FIELDS:
        values.pop(name, None)
    for name in methods.parameters():
        if not methods.reads(config.method.name, name):
            values.pop(name)
    return tuple(sorted(values.items()))


def reads(method: str, field: str) -> bool:
    """Whether runs of ``method`` depend on TrainConfig ``field`` (the seed and recording fields never count)."""
    return field not in IGNORED_FIELDS and methods.reads(method, field)


def _group_order(settings: list[dict]) -> list[int]:
    """Groups of one method stay where the method first appears; within it, numbers sort by value
    (lam = 2 before lam = 10), so a sweep reads in order whatever its folder names; lam = "auto" sorts as
    TrainConfig's default lam, and after it on a tie."""
    first = {}
    for values in settings:
        first.setdefault(values["method"], len(first))

    def sort_key(i: int) -> tuple:
        values = settings[i]
        auto = values.get("lam") == AUTO  # sorts where the default lam does, after it when all else ties: the
        #                                   order of the reports written when lam = auto was target_kappa > 0
        ordered = tuple((0, DEFAULT_LAM if auto and f == "lam" else v, "") if isinstance(v, (int, float)) or
                        (auto and f == "lam") else (1, 0, str(v)) for f, v in sorted(values.items()))
        return first[values["method"]], ordered, auto

    return sorted(range(len(settings)), key=sort_key)
