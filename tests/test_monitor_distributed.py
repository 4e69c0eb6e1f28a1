"""speccond.monitor.Monitor and speccond.diagnostics.Tracker under torchrun (DDP and FSDP2, 2 CPU processes on
gloo): every rank measures, rank 0 alone writes, so a path shared by the ranks holds one row per step and
metric, with rank 0's values. It once held two, one per rank, in whatever order the ranks appended them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from speccond.monitor import read_csv_metrics

pytest.importorskip("timm")
WORKER = Path(__file__).parent / "distributed" / "monitor_worker.py"
ROOT = Path(__file__).resolve().parents[1]
CASES = ["ddp-shared", "fsdp-shared", "ddp-none"]


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("monitor")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER),
               "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 0, done.stderr[-4000:]
    return out


@pytest.mark.parametrize("case", CASES)
def test_rank_0_alone_writes_one_row_per_step_and_metric(out, case):
    rows = read_csv_metrics(out / f"{case}.csv")
    lines = (out / f"{case}.csv").read_text().splitlines()
    assert sum(line == "step,name,value" for line in lines) == 1  # one header: rank 1 made no file of its own
    per_rank = [json.loads((out / f"rank{rank}-{case}.json").read_text()) for rank in (0, 1)]
    assert set(rows) == set(per_rank[0][0])
    for name, points in rows.items():
        assert Counter(step for step, _ in points) == {0: 1, 1: 1, 2: 1}, name
        assert [value for _, value in points] == [per_rank[0][step][name] for step in range(3)], name


@pytest.mark.parametrize("case", CASES)
def test_every_rank_measures_its_own_batch_under_the_same_weights(out, case):
    rank0, rank1 = (json.loads((out / f"rank{rank}-{case}.json").read_text()) for rank in (0, 1))
    for step in range(3):
        assert rank0[step].keys() == rank1[step].keys()
        kappas = [name for name in rank0[step] if name.startswith("speccond/kappa/")]
        assert kappas and all(rank0[step][name] == pytest.approx(rank1[step][name], rel=1e-6) for name in kappas)
        # the ranks' halves of the batch differ, so their entropies do: the CSV's are rank 0's (above)
        assert rank0[step]["speccond/entropy/mean"] != rank1[step]["speccond/entropy/mean"]


@pytest.mark.parametrize("wrapper", ["ddp", "fsdp"])
def test_the_tracker_appends_each_row_once(out, wrapper):
    rank0, rank1 = (json.loads((out / f"rank{rank}-tracker-{wrapper}.json").read_text()) for rank in (0, 1))
    written = [json.loads(line) for line in (out / f"tracker-{wrapper}.jsonl").read_text().splitlines()]
    assert written == [row for rows in rank0 for row in rows]
    assert {row["step"] for row in written} == {0, 1} and {row["kind"] for row in written} == {"spectra", "entropy"}
    assert len(rank1) == len(rank0) and all(len(a) == len(b) for a, b in zip(rank0, rank1))  # every rank measured
