"""One command run twice, as one process and as two gloo processes under torchrun, for the tests that hold a
data-parallel run to the one-process run's figures; and a test's worker script run as two gloo processes."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def one_and_two_processes(args: list[str], out: Path, environment: dict | None = None
                          ) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """``python -m speccond ARGS --out OUT/single`` and the same under ``torchrun --nproc_per_node=2`` into
    OUT/double, one OpenMP thread each; both must exit 0 (their stderr tail is the failure message)."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **(environment or {})}
    done = []
    for name, launcher in (("single", []), ("double", ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"])):
        run = subprocess.run([sys.executable, *launcher, "-m", "speccond", *args, "--out", str(out / name)],
                             env=environment, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        done.append(run)
    return done[0], done[1]


def two_processes(worker: Path, args: list[str], environment: dict | None = None, timeout: int = 300
                  ) -> subprocess.CompletedProcess:
    """The script ``worker ARGS`` under ``torchrun --nproc_per_node=2`` (gloo on the CPU, one OpenMP thread
    each), which must exit 0 (its stderr tail is the failure message)."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **(environment or {})}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          str(worker), *args], env=environment, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-4000:]
    return run
