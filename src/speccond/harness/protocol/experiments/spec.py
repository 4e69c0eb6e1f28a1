"""What a published protocol is, as frozen data: its tasks (each one ``speccond tune``), its pilots and its
pre-training (``speccond compare`` runs), the folders they write and the stages it runs in. The config
functions of fair.py, width64.py and scale.py return one; runner.py runs it. Nothing here reads a file or trains."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

INSTANCES = ("cpu", "gpu", "gpuchoice")  # where the runs train: CPU, GPU, CPU at the GPU instance's choice
FAMILIES = ("fair", "width64", "scale")  # fair.py, width64.py, scale.py: what plan and publish write (runner.py)
PEER = "{peer}"  # in an arm: the best peer of the full protocol (tuning.best_peer), decided when it runs
XCA_PEER = "{xca_peer}"  # the same for XCiT trunks, where qk-norm has nothing to do (docs/RESULTS.md)


@dataclass(frozen=True)
class TuneTask:
    """One ``speccond tune`` of a protocol: every arm tuned on validation, then scored on test."""

    name: str  # its folders: RUNS/<protocol.runs_prefix><name>, RESULTS/<protocol.results_prefix><name>
    task: str  # --task
    val_size: int  # --val-size: validation examples held out of the training data
    arms: tuple[str, ...]  # --arms: method[:setting+setting]; may name PEER or XCA_PEER
    model: Optional[str] = None  # --model; None: the task's default family
    lrs: Optional[str] = None  # --lrs as given ("1e-3"); None: tune's default grid 3e-4,1e-3,3e-3
    tuning_seeds: Optional[int] = None  # --tuning-seeds; None: tune's default (2)
    final_seeds: Optional[int] = None  # --final-seeds; None: tune's default (5)
    sets: tuple[str, ...] = ()  # --set KEY=VALUE in order: model overrides, epochs, track_every, device
    extend_edges: bool = False  # --extend-edges: an arm chosen on the grid's edge runs one step past it
    choice_of: Optional[str] = None  # not tuned: takes this other task's choice (this machine's or committed)

    def __post_init__(self) -> None:
        if not self.name or not self.arms or self.val_size < 1:
            raise ValueError(f"a TuneTask needs a name, arms and val_size >= 1, got {self!r}")

    def tune_args(self, peer: str, xca_peer: str) -> list[str]:
        """Its ``speccond tune`` arguments after --jobs, --out and --choice, the peers put in."""
        arms = ",".join(arm.replace(PEER, peer).replace(XCA_PEER, xca_peer) for arm in self.arms)
        args = ["--task", self.task, *(["--model", self.model] if self.model else []), "--val-size", str(self.val_size)]
        args += [*(["--lrs", self.lrs] if self.lrs else []),
                 *(["--tuning-seeds", str(self.tuning_seeds)] if self.tuning_seeds else []),
                 *(["--final-seeds", str(self.final_seeds)] if self.final_seeds else []), "--arms", arms]
        args += ["--extend-edges"] * self.extend_edges
        return [*args, *(part for pair in self.sets for part in ("--set", pair))]

    def needs_peer(self) -> bool:
        return any(PEER in arm or XCA_PEER in arm for arm in self.arms)


@dataclass(frozen=True)
class Pilot:
    """A ``speccond compare`` run outside the tuning: the width-64 plateau pilot (baseline at one lr)."""

    name: str  # its folder: RUNS/<protocol.runs_prefix><name>, RESULTS/<protocol.results_prefix><name>
    compare_args: tuple[str, ...]  # its speccond compare arguments after --out


@dataclass(frozen=True)
class Pretraining:
    """The encoders a language stage fine-tunes: ``speccond compare`` chains, run side by side."""

    out: str  # the compare folder, relative to the checkout (runs/protocol-mlm)
    kept: str  # the kept records, relative to RESULTS (protocol-mlm/kept)
    report: str  # where the finished pre-training report is committed, relative to RESULTS (protocol-mlm)
    encoders: int  # how many encoders the stage owes (arms x seeds)
    chains: tuple[tuple[tuple[str, ...], ...], ...]  # each chain: compare argument lists, one after another
    parallel_jobs: int  # SPECCOND_PARALLEL_JOBS for the chains (how many share the cores)


@dataclass(frozen=True)
class Stage:
    """Tasks run one after another; ``pretraining`` first where the stage has one."""

    name: str
    tasks: tuple[TuneTask, ...]
    pretraining: Optional[Pretraining] = None


@dataclass(frozen=True)
class Protocol:
    """A published protocol (docs/RESULTS.md registers it): the stages it runs, in order, and its folders."""

    name: str  # speccond protocol run NAME
    family: str  # "fair", "width64" or "scale": what publish and plan write (runner.py)
    instance: str  # one of INSTANCES
    stages: tuple[Stage, ...]
    runs_prefix: str  # RUNS/<runs_prefix><task>: the tune folder (tune-, tune64-gpu-, ...)
    results_prefix: str  # RESULTS/<results_prefix><task>: what publish commits (protocol-, protocol64-gpu-, ...)
    pilots: tuple[Pilot, ...] = ()
    choice_prefix: Optional[str] = None  # final runs only, at RESULTS/<choice_prefix><task>/choice.json
    smoke: bool = False  # shrunk for tests: its runs are not the registered ones
    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()  # a name for several stages run in order (tier1)

    def __post_init__(self) -> None:
        if self.instance not in INSTANCES or self.family not in FAMILIES:
            raise ValueError(f"instance must be one of {INSTANCES} and family one of {FAMILIES}, got "
                             f"{self.instance!r}, {self.family!r}")
        names = [task.name for task in self.tasks] + [pilot.name for pilot in self.pilots]
        if len(set(names)) != len(names):
            raise ValueError(f"protocol {self.name} names a task twice: {names}")

    @property
    def tasks(self) -> tuple[TuneTask, ...]:
        return tuple(task for stage in self.stages for task in stage.tasks)

    def selected(self, name: str) -> tuple[Stage, ...]:
        """The stages ``name`` runs: one stage, or a group of them (fair's tier1: full, then reduced)."""
        group = dict(self.groups).get(name, (name,))
        stages = tuple(stage for member in group for stage in self.stages if stage.name == member)
        if not stages:
            raise ValueError(f"protocol {self.name} has no stage {name!r}; its stages: "
                             f"{', '.join([*dict(self.groups), *(s.name for s in self.stages)])}")
        return stages

    def task(self, name: str) -> TuneTask:
        for task in self.tasks:
            if task.name == name:
                return task
        raise ValueError(f"protocol {self.name} has no task {name!r}; its tasks: "
                         f"{', '.join(t.name for t in self.tasks)}")


def replaced(task: TuneTask, **changes) -> TuneTask:
    return dataclasses.replace(task, **changes)
