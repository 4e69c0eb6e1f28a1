"""One command run twice, as one process and as two gloo processes under torchrun, for the tests that hold a
data-parallel run to the one-process run's figures."""
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
