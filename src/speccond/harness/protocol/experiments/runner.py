"""``speccond protocol``: runs a published protocol (fair.py, width64.py, scale.py) task by task, resumably.

Each task is one ``speccond tune`` (a pilot or a pre-training one ``speccond compare``), run as
``sys.executable -m speccond ...`` in the checkout, with the finished runs kept in the repository restored
first (kept_runs.py) so that a fresh clone trains none of them again. What runs is exactly what
scripts/protocol.sh and scripts/protocol64.sh ran before this runner (tests/test_protocol_runner.py replays
their record): the same run folders, the same ``speccond tune`` arguments, the same keep and restore calls.

A :class:`Runner` never trains in its own process: every call goes through ``call(argv, env, log)``, which
runs the interpreter (the default) or, in the tests, records the call.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable, Optional

from speccond.harness.protocol.experiments.spec import Pilot, Protocol, TuneTask

KEPT = "speccond.harness.protocol.kept_runs"
Call = Callable[[list, Optional[dict], Optional[Path]], int]  # (argv after the interpreter, env, log) -> status


class Stopped(Exception):
    """A call failed: the protocol stops there (its exit status is the call's)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def interpreter_call(root: Path) -> Call:
    """Runs ``sys.executable ARGV`` in ``root`` (output to ``log`` when given, else inherited), with one
    OpenMP thread as every protocol's runs had (the scripts exported OMP_NUM_THREADS=1; --jobs divides the
    cores between runs, and config.json records the arithmetic)."""
    def call(argv: list, env: Optional[dict] = None, log: Optional[Path] = None) -> int:
        environment = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
        if log is None:
            return subprocess.run([sys.executable, *argv], cwd=root, env=environment).returncode
        with open(log, "w") as stream:
            return subprocess.run([sys.executable, *argv], cwd=root, env=environment, stdout=stream,
                                  stderr=subprocess.STDOUT).returncode
    return call


class Runner:
    """One protocol in one checkout. ``runs`` and ``results`` are relative to ``root`` (as the calls see
    them); ``peer`` and ``xca_peer`` replace the best-peer rule (BEST_PEER, XCA_PEER of protocol.sh)."""

    def __init__(self, protocol: Protocol, root: Path, *, runs: str = "runs", results: str = "docs/results",
                 jobs: int = 2, peer: Optional[str] = None, xca_peer: Optional[str] = None,
                 call: Optional[Call] = None, say: Callable[[str], None] = print) -> None:
        if jobs < 1:
            raise ValueError(f"--jobs takes a positive number of runs side by side, got {jobs}")
        self.protocol, self.root, self.runs, self.results, self.jobs = protocol, Path(root), runs, results, jobs
        self.peer, self.xca_peer = peer, xca_peer
        self.call = call or interpreter_call(self.root)
        self.say = say

    # ---- paths: as the calls see them (relative to root), and as this process reads them
    def out(self, name: str) -> str:
        return f"{self.runs}/{self.protocol.runs_prefix}{name}"

    def published(self, name: str) -> str:
        return f"{self.results}/{self.protocol.results_prefix}{name}"

    def here(self, relative: str) -> Path:
        return self.root / relative

    def _run(self, argv: list, env: Optional[dict] = None, log: Optional[Path] = None) -> None:
        status = self.call([str(a) for a in argv], env, log)
        if status != 0:
            raise Stopped(f"{' '.join(map(str, argv[:3]))} ... ended with status {status}", status)

    # ---- the best peer (fair: docs/RESULTS.md's rule over the full-protocol choices)
    def choice_of(self, name: str) -> str:
        """Task ``name``'s choice.json: this machine's, else the committed one."""
        own = f"{self.out(name)}/choice.json"
        return own if self.here(own).is_file() else f"{self.published(name)}/choice.json"

    def peers(self) -> tuple[str, str]:
        """(peer, XCiT's peer): --peer, else the best peer over fashion-mnist's and cifar10's choices, else
        "undecided" before both have chosen."""
        from speccond.harness.protocol.tuning import best_peer, read_choice

        peer = self.peer
        if not peer:
            try:
                peer = best_peer([read_choice(self.here(self.choice_of(n))) for n in ("fashion-mnist", "cifar10")])
            except (ValueError, OSError, KeyError):
                peer = "undecided"
        return peer, (self.xca_peer or "sigma-reparam") if peer == "qk-norm" else peer

    def tune_args(self, task: TuneTask, running: bool = False) -> list[str]:
        peer, xca_peer = self.peers() if task.needs_peer() else ("", "")
        if running and peer == "undecided":
            raise ValueError(f"{task.name} takes the best peer of the full protocol, which has not chosen yet "
                             f"(fashion-mnist and cifar10 need a choice.json): run stage full first, or give --peer")
        return task.tune_args(peer, xca_peer)

    # ---- what is finished
    def complete(self, holm: str) -> bool:
        """The final table ``holm`` (holm.json) owes no run."""
        try:
            return json.loads(self.here(holm).read_text())["owed"] == 0
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def finished(self, name: str) -> bool:
        return self.protocol.family == "fair" and self.complete(f"{self.published(name)}/final/holm.json")

    def committed_choice(self, name: str) -> Optional[str]:
        prefix = self.protocol.choice_prefix or self.protocol.results_prefix
        path = f"{self.results}/{prefix}{name}/choice.json"
        return path if self.here(path).is_file() else None

    def choice(self, task: TuneTask) -> list[str]:
        """The --choice the task's tune takes, if any."""
        if self.protocol.choice_prefix:  # final runs only, at another instance's committed choice
            source = task.choice_of or task.name  # scale.py: every task takes Fashion-MNIST's
            path = self.committed_choice(source)
            if path is None:
                raise ValueError(f"no committed choice at {self.results}/{self.protocol.choice_prefix}{source}/"
                                 f"choice.json: run the GPU instance's tuning of {source} first")
            return ["--choice", path]
        if self.protocol.family == "width64" and not task.choice_of:  # its own choice: its (restored) tuning runs
            return []
        own = self.committed_choice(task.name)
        if own or not task.choice_of:
            return ["--choice", own] if own else []
        other = self.choice_of(task.choice_of)
        if not self.here(other).is_file():
            raise ValueError(f"{task.name} takes the lrs chosen by {task.choice_of}, which has not chosen yet: "
                             f"run {task.choice_of} first")
        return ["--choice", other]

    def kept_count(self, name: str, stage: str) -> int:
        return sum(run.startswith(f"{stage}/") for run in self._kept_list(f"{self.published(name)}/kept"))

    def _kept_list(self, kept: str, pretraining: bool = False) -> list[str]:
        from speccond.harness.protocol.kept_runs import kept_list

        try:
            return kept_list(self.here(kept), pretraining)
        except (ValueError, OSError):
            return []

    # ---- keeping
    def kept(self, name: str, action: str) -> None:
        """keep|restore task ``name``'s finished runs (tuning and final) in RESULTS/<prefix>NAME/kept."""
        out, kept = self.out(name), f"{self.published(name)}/kept"
        if action == "keep" and not self.here(out).is_dir():
            return
        if action == "restore" and not self.here(kept).is_dir() and not self.here(f"{kept}.tar.xz").is_file():
            return
        self._run(["-m", KEPT, action, out, kept])
        if self.protocol.family == "fair" or action == "keep":
            self.pack(kept)

    def pack(self, kept: str) -> None:
        """Pack a kept folder into KEPT.tar.xz (kept_runs.py). The fair protocol then folds the manifest that
        pack leaves beside the archive into RESULTS/kept-archives.json, the index the repository commits
        (docs/RESULTS_LAYOUT.md); the width-64 protocol leaves it beside, so that a folder published on
        another machine travels whole (fold it before committing)."""
        if self.here(kept).is_dir():
            self._run(["-m", KEPT, "pack", kept])
        if self.protocol.family == "fair" and self.here(f"{kept}.manifest.json").is_file():
            self._run(["-m", KEPT, "fold", self.results])  # its line (or its refusal) is shown

    # ---- one task
    def tune(self, task: TuneTask, report: bool = False) -> None:
        fair = self.protocol.family == "fair"
        if fair and not report and self.finished(task.name):
            self.say(f"{task.name}: every final run is in {self.published(task.name)}/final; skipped")
            return
        if fair and report:  # a task waiting for another's choice has nothing to report yet
            try:
                choice = self.choice(task)
            except ValueError:
                return
        else:
            self.kept(task.name, "restore")
            choice = self.choice(task)
        args = self.tune_args(task, running=not report)
        jobs = [] if fair and report else ["--jobs", str(self.jobs)]
        self._run(["-m", "speccond", "tune", *jobs, "--out", self.out(task.name), *choice, *args,
                   *(["--stage", "report"] if report else [])])

    def pilot(self, pilot: Pilot) -> None:
        self._run(["-m", "speccond", "compare", *pilot.compare_args[:8], "--out", self.out(pilot.name),
                   *pilot.compare_args[8:]])

    def plan_line(self, task: TuneTask) -> str:
        """What ``run`` would do with the task on this machine, in one line; trains nothing."""
        name = task.name
        if self.protocol.family == "width64":
            count = len(self._kept_list(f"{self.published(name)}/kept"))
            return f"{name}: {count} finished runs kept; speccond protocol run {self.protocol.name} {name} resumes it"
        if self.finished(name):
            return f"{name}: skip, every final run is in {self.published(name)}/final"
        committed = self.committed_choice(name)
        if committed or task.choice_of:
            source = f"the committed {committed}" if committed else f"the lrs {task.choice_of} chooses (no tuning)"
            return f"{name}: final runs from {source} ({self.kept_count(name, 'final')} finished final runs kept)"
        return (f"{name}: tuning ({self.kept_count(name, 'tune')} finished tuning runs kept in "
                f"{self.published(name)}/kept), then final runs")

    # ---- pre-training (fair's language stage)
    def pretraining_count(self, pretraining) -> int:
        from speccond.harness.protocol.kept_runs import pretraining_runs

        return len(pretraining_runs(self.here(pretraining.out)))

    def plan_pretraining(self, pretraining) -> str:
        kept = f"{self.results}/{pretraining.kept}"
        count = len(self._kept_list(kept, pretraining=True))
        rest = "none to train" if count == pretraining.encoders else "the rest are trained first"
        return (f"pre-training: {count} of {pretraining.encoders} encoders kept in {kept}, "
                f"{self.pretraining_count(pretraining)} finished in {pretraining.out}; {rest}")

    def pretrain(self, pretraining) -> None:
        """The encoders, in chains side by side (each chain's output in <out>-a.log, -b.log, ...)."""
        needs_peer = any("{peer}" in argument for calls in pretraining.chains for argv in calls for argument in argv)
        peer, _ = self.peers() if needs_peer else ("", "")
        if peer == "undecided":
            raise ValueError("the language stage pre-trains the best peer of the full protocol, which has not "
                             "chosen yet: run stage full first, or give --peer")
        kept = f"{self.results}/{pretraining.kept}"
        self.here(pretraining.out).mkdir(parents=True, exist_ok=True)
        if self.here(kept).is_dir() or self.here(f"{kept}.tar.xz").is_file():
            self._run(["-m", KEPT, "restore", "--pretraining", pretraining.out, kept])
        env = {"SPECCOND_PARALLEL_JOBS": str(pretraining.parallel_jobs)}
        failures = []

        def chain(index: int, calls) -> None:
            log = self.here(f"{pretraining.out}-{'abcdefgh'[index]}.log")
            for argv in calls:
                status = self.call(["-m", "speccond", "compare", *(a.replace("{peer}", peer) for a in argv)], env, log)
                if status != 0:
                    failures.append(f"pre-training chain {index + 1} ended with status {status} (see {log})")
                    return

        threads = [threading.Thread(target=chain, args=(i, calls)) for i, calls in enumerate(pretraining.chains)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise Stopped(failures[0], 1)

    # ---- the commands
    def selected(self, name: Optional[str]) -> list:
        """What ``run NAME`` runs: a stage (fair), a task, or a pilot."""
        protocol = self.protocol
        pilots = {pilot.name: pilot for pilot in protocol.pilots}
        if name in pilots:
            return [pilots[name]]
        if name in [task.name for task in protocol.tasks]:
            return [protocol.task(name)]
        named_stages = [*dict(protocol.groups), *(s.name for s in protocol.stages if s.name != "tasks")]
        if name is None or (protocol.family != "fair" and name not in named_stages):
            names = [*(t.name for t in protocol.tasks), *pilots]
            stages = named_stages
            raise ValueError(f"speccond protocol run {protocol.name} takes a stage or task: "
                             f"{', '.join([*stages, *names])}; got {name!r}")
        return list(protocol.selected(name))

    def run(self, name: Optional[str]) -> None:
        """Run the stage, task or pilot ``name``, saying what is finished, what is left and what runs now."""
        items = self.selected(name)
        tasks = [task for item in items for task in (item.tasks if hasattr(item, "tasks") else [item])]
        done: list[str] = []
        for item in items:
            if getattr(item, "pretraining", None) is not None:
                self.say(f"[{self.protocol.name}] now: pre-training ({self.plan_pretraining(item.pretraining)})")
                self.pretrain(item.pretraining)
            for task in (item.tasks if hasattr(item, "tasks") else [item]):
                left = [t.name for t in tasks[len(done) + 1:]]
                self.say(f"[{self.protocol.name}] {len(done)} of {len(tasks)} finished"
                         f"{' (' + ', '.join(done) + ')' if done else ''}; now: {task.name}"
                         f"{'; left: ' + ', '.join(left) if left else ''}")
                self.pilot(task) if isinstance(task, Pilot) else self.tune(task)
                done.append(task.name)
        self.say(f"[{self.protocol.name}] {len(done)} of {len(tasks)} finished: {', '.join(done)}")

    def plan(self, name: Optional[str]) -> list[str]:
        if self.protocol.family == "width64":
            return [line for stage in self.protocol.stages
                    for line in ([self.plan_pretraining(stage.pretraining)] if stage.pretraining else [])
                    + [self.plan_line(task) for task in stage.tasks]]
        if self.protocol.family == "scale":
            return self.plan_runs([self.protocol.task(name)] if name else list(self.protocol.tasks))
        if name is None:
            raise ValueError(f"speccond protocol plan fair takes a stage: "
                             f"{', '.join([*dict(self.protocol.groups), *(s.name for s in self.protocol.stages)])}")
        lines = []
        for stage in self.protocol.selected(name):
            if stage.pretraining is not None:
                lines.append(self.plan_pretraining(stage.pretraining))
            lines += [self.plan_line(task) for task in stage.tasks]
        return lines

    def plan_runs(self, tasks: list) -> list[str]:
        """Each final run of ``tasks`` in one line (task, arm, the lr of the committed choice it takes, seed,
        finished or not), then a count; refuses in one line, as run does, when the choice is not committed."""
        from speccond.harness.protocol.tuning import FINAL_SEED, arm_name, final_run, outcome, read_choice

        lines, finished, paths = [], 0, []
        for task in tasks:
            path = self.choice(task)[1]
            paths += [path] * (path not in paths)
            choice = read_choice(self.here(path))
            kept = set(self._kept_list(f"{self.published(task.name)}/kept"))
            for arm in map(arm_name, task.arms):
                if arm not in choice:
                    raise ValueError(f"{path} chooses no lr for arm {arm}; it must be the choice of the width-64 "
                                     f"protocol's arms (width64.ARMS)")
                for seed in range(FINAL_SEED, FINAL_SEED + (task.final_seeds or 5)):
                    run = final_run(self.here(self.out(task.name)), arm, seed)
                    done = f"final/{arm}/seed-{seed}" in kept or outcome(run, "test") is not None
                    finished += done
                    lines.append(f"{task.name} {arm} lr {float(choice[arm]['lr']):g} seed {seed}: "
                                 f"{'finished' if done else 'to train'}")
        return [*lines, f"{len(lines)} final runs, {finished} finished; each arm at the lr of {', '.join(paths)} "
                        f"(none tuned here)"]

    def listing(self, name: Optional[str]) -> list[str]:
        """Each task of a stage: its name, then its speccond tune arguments (--choice-of OTHER first for a
        task that takes another's choice), as protocol.sh's list printed them."""
        stages = self.protocol.selected(name) if name else self.protocol.stages
        return [" ".join([task.name, *(["--choice-of", task.choice_of] if task.choice_of else []),
                          *self.tune_args(task)]) for stage in stages for task in stage.tasks]

    def report(self) -> None:
        for task in self.protocol.tasks:
            if self.here(self.out(task.name)).is_dir():
                self.tune(task, report=True)

    def publish(self) -> None:
        """Tables of what has finished, copied into RESULTS, and every finished run kept there."""
        if self.protocol.family in ("width64", "scale"):
            self._publish_own_folders()
            for stage in self.protocol.stages:  # width64's language stage: its encoders too
                if stage.pretraining is not None and self.here(stage.pretraining.out).is_dir():
                    self._publish_pretraining(stage.pretraining)
            return
        for task in self.protocol.tasks:
            if not self.here(self.out(task.name)).is_dir():
                continue
            self.tune(task, report=True)
            out = self.here(self.out(task.name))
            if not (out / "tuning.md").is_file():
                continue
            target = self.here(self.published(task.name))
            target.mkdir(parents=True, exist_ok=True)
            _copy(out, target, ("tuning.png", "choice.json"))
            _publish_table(out, target)
            # a final table is committed once every final run has finished: a partial one never reads as a result
            if self.complete(f"{self.out(task.name)}/final/holm.json"):
                (target / "final").mkdir(exist_ok=True)
                _copy(out / "final", target / "final", FINAL_TABLES)
            self.kept(task.name, "keep")
            self.say(f"published {self.published(task.name)}")
        for stage in self.protocol.stages:
            if stage.pretraining is not None and self.here(stage.pretraining.out).is_dir():
                self._publish_pretraining(stage.pretraining)

    def _publish_pretraining(self, pretraining) -> None:
        kept = f"{self.results}/{pretraining.kept}"
        self._run(["-m", KEPT, "keep", "--pretraining", pretraining.out, kept])
        self.pack(kept)
        if self.pretraining_count(pretraining) != pretraining.encoders:
            return
        self._run(["-m", "speccond", "report", pretraining.out], log=Path(os.devnull))
        _copy(self.here(pretraining.out), self.here(f"{self.results}/{pretraining.report}"),
              ("results.md", "results.json", "comparison.png"), required=True)
        self.say(f"published {self.results}/{pretraining.report} (the pre-training report)")

    def _publish_own_folders(self) -> None:
        """width64 and scale: each task's choice and tuning figures, scale's final tables, the kept runs (the
        manifests left beside their archives); width64's pilots."""
        for task in self.protocol.tasks:
            out, dest = self.here(self.out(task.name)), self.here(self.published(task.name))
            if not out.is_dir():
                continue
            self.tune(task, report=True)
            dest.mkdir(parents=True, exist_ok=True)
            _copy(out, dest, ("tuning.png", "choice.json"))
            _publish_table(out, dest)
            if self.protocol.family == "scale":  # its answer: the final tables, once they owe no run (as fair's)
                self._publish_final(task.name)
            self.kept(task.name, "keep")
        if self.protocol.family != "width64":
            return
        runs = self.here(self.runs)
        for pilot in sorted(runs.glob(f"{self.protocol.runs_prefix}pilot*")) if runs.is_dir() else []:
            if not pilot.is_dir():
                continue
            dest = self.here(f"{self.results}/protocol64-{pilot.name[len('tune64-'):]}")
            dest.mkdir(parents=True, exist_ok=True)
            if (pilot / "baseline").is_dir():
                shutil.copytree(pilot / "baseline", dest / "baseline", dirs_exist_ok=True)
            for checkpoints in sorted(dest.rglob("checkpoints"), reverse=True):
                if checkpoints.is_dir():
                    shutil.rmtree(checkpoints)

    def _publish_final(self, name: str) -> None:
        """OUT/final's tables and plots copied into RESULTS/<prefix>NAME/final once every final run has finished:
        a partial table never reads as a result (it stays in the run folder, which the GPU call packs)."""
        if self.complete(f"{self.out(name)}/final/holm.json"):
            target = self.here(f"{self.published(name)}/final")
            target.mkdir(exist_ok=True)
            _copy(self.here(self.out(name)) / "final", target, FINAL_TABLES)


FINAL_TABLES = ("holm.md", "holm.json", "results.md", "results.json", "comparison.png", "detection.png")


def _publish_table(out: Path, target: Path) -> None:
    """The tuning table is published only until there is a choice: choice.json holds it, and
    protocol/tuning_table.py makes it again byte for byte, so a table left beside a choice is removed."""
    if (out / "choice.json").is_file():
        (target / "tuning.md").unlink(missing_ok=True)
    elif (out / "tuning.md").is_file():
        shutil.copyfile(out / "tuning.md", target / "tuning.md")


def _copy(source: Path, target: Path, names: tuple, required: bool = False) -> None:
    for name in names:
        if required or (source / name).is_file():
            shutil.copyfile(source / name, target / name)
