"""Where a comparison's runs train when not in the local process pool: as submitit jobs.

    speccond tune ... --engine submitit                      # Slurm where srun exists, else local processes
    speccond tune ... --engine submitit --cluster slurm --slurm-partition gpu --gpus-per-node 1

Every run of a comparison (arm x lr x seed) is an independent, resumable job: it trains into its own
folder and skips itself once finished, so the same command continues a sweep that was cut. submitit
(the launcher the DeiT and DINO repositories use for Slurm) submits them as one job array per stage and
waits; its "local" executor runs the same jobs as processes on this machine, which is what the tests do,
and "debug" runs them in this process. Each job sets the thread count the process pool would give it,
so a sweep trains the same bytes through either route (tests/test_engines.py). `speccond report` and
the tables read the runs' folders, wherever the jobs ran.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from speccond.collapse_advice import Phrasing, install_phrasing, python_call

if TYPE_CHECKING:
    from speccond.harness.config.train_config import TrainConfig

CLUSTERS = ("auto", "local", "slurm", "debug")


@dataclass(frozen=True)
class Job:
    """One run of a comparison: its config, trained into its own folder (skipped once finished)."""

    config: "TrainConfig"
    run: Path


@dataclass(frozen=True)
class Submitit:
    folder: Path  # submitit's logs and pickles (OUT/submitit)
    cluster: str = "auto"  # "auto": Slurm where srun exists, else local processes
    timeout_min: int = 4320  # per job
    slurm_partition: str = ""
    gpus_per_node: int = 0

    def __post_init__(self) -> None:
        if self.cluster not in CLUSTERS:
            raise ValueError(f"--cluster must be one of {', '.join(CLUSTERS)}, got {self.cluster!r}")

    def run(self, jobs: list[Job], threads: int, parallel: int, stage: str,
            phrasing: Phrasing = python_call) -> list[tuple[Job, BaseException]]:
        """Submit ``jobs``, at most ``parallel`` running at once, and wait for all; the (job, error) of every one
        that failed. On Slurm they go as one array whose ``slurm_array_parallelism`` holds them to ``parallel``;
        submitit's local and debug executors read no such limit, so there each job is submitted only when one
        of the ``parallel`` before it has ended."""
        try:
            import submitit
        except ImportError:
            raise ValueError("--engine submitit needs the submitit package: pip install submitit") from None
        executor = submitit.AutoExecutor(folder=str(self.folder / "%j"),
                                         cluster=None if self.cluster == "auto" else self.cluster)
        parameters = {"name": f"speccond-{stage}", "timeout_min": self.timeout_min, "cpus_per_task": threads,
                      "slurm_array_parallelism": parallel}
        if self.slurm_partition:
            parameters["slurm_partition"] = self.slurm_partition
        if self.gpus_per_node:
            parameters["gpus_per_node"] = self.gpus_per_node
        executor.update_parameters(**parameters)
        print(f"[{stage}] {len(jobs)} jobs through submitit ({executor.cluster}), {parallel} at a time; logs in "
              f"{self.folder}", flush=True)
        if executor.cluster == "slurm":
            handles = executor.map_array(train_job, jobs, [threads] * len(jobs), [parallel] * len(jobs),
                                         [phrasing] * len(jobs))
            return [failure for job, handle in zip(jobs, handles) for failure in _outcome(stage, job, handle)]
        failures, running, waiting = [], [], list(jobs)
        while waiting or running:
            while waiting and len(running) < parallel:
                job = waiting.pop(0)
                running.append((job, executor.submit(train_job, job, threads, parallel, phrasing)))
            ended = [(job, handle) for job, handle in running if _ended(handle)]
            if not ended:
                time.sleep(POLL_SECONDS)
            for job, handle in ended:
                running.remove((job, handle))
                failures += _outcome(stage, job, handle)
        return failures


POLL_SECONDS = 0.2  # how often the local executor's running jobs are asked whether they have ended


def _ended(handle) -> bool:
    """Whether submitit's job ``handle`` has ended (a debug job runs when asked, and may fail doing so)."""
    try:
        return handle.done()
    except Exception:  # noqa: BLE001 (its error is read by _outcome)
        return True


def _outcome(stage: str, job: Job, handle) -> list[tuple[Job, BaseException]]:
    """Wait for submitit's ``handle`` of ``job``; [] when it finished, else [(job, its error)]."""
    try:
        handle.result()
    except Exception as error:  # noqa: BLE001 (submitit wraps any failure of the job)
        print(f"[{stage}] failed: {job.run} ({error})", flush=True)
        return [(job, error)]
    print(f"[{stage}] finished: {job.run}", flush=True)
    return []


def train_job(job: Job, threads: int, parallel: int, phrasing: Phrasing = python_call) -> None:
    """One run, as the process pool's worker trains it: ``threads`` torch threads, the pool's job count
    recorded in config.json's "arithmetic", no progress bar, the collapse advice phrased by ``phrasing``
    (the flags of the command that submitted it)."""
    import torch

    from speccond.harness.protocol.compare import train_timed
    from speccond.harness.training.run_dir import PARALLEL_JOBS

    torch.set_num_threads(threads)
    os.environ[PARALLEL_JOBS] = str(parallel)
    install_phrasing(phrasing)
    train_timed(job.config, job.run, progress=False)


def engine_from(name: str, out: Path, cluster: str = "auto", timeout_min: int = 4320, slurm_partition: str = "",
                gpus_per_node: int = 0) -> Optional[Submitit]:
    """The engine ``--engine`` names: None for the local process pool ("pool"), else a Submitit."""
    if name == "pool":
        return None
    if name != "submitit":
        raise ValueError(f"--engine must be pool or submitit, got {name!r}")
    return Submitit(Path(out) / "submitit", cluster, timeout_min, slurm_partition, gpus_per_node)
