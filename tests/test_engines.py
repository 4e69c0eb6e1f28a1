"""Sweeps through submitit (harness/protocol/engines.py): a tune of 2 arms x 2 final seeds submitted as submitit
jobs on this machine (its local executor: one process per job, as on a cluster node) writes the same runs,
figures and Holm table as the one-machine process pool."""
from __future__ import annotations

import json

import pytest

from speccond.harness.cli import main

pytest.importorskip("submitit")

TUNE = ["--task", "digits", "--preset", "quick", "--val-size", "144", "--set", "epochs=2", "--arms",
        "baseline,spectral-svd", "--lrs", "1e-3", "--tuning-seeds", "1", "--final-seeds", "2", "--jobs", "2"]


@pytest.fixture(autouse=True)
def digits(digits_data):
    """Every test here trains on the session's digits cache (conftest.py)."""


def test_a_sweep_through_submitit_equals_the_process_pools(tmp_path):
    assert main(["tune", *TUNE, "--out", str(tmp_path / "pool")]) == 0
    assert main(["tune", *TUNE, "--engine", "submitit", "--cluster", "local", "--out", str(tmp_path / "jobs")]) == 0
    pool, jobs = (json.loads((tmp_path / name / "final" / "holm.json").read_text()) for name in ("pool", "jobs"))
    assert jobs == pool
    for arm in ("baseline", "spectral-svd"):
        for seed in (100, 101):
            rows = [(tmp_path / name / "final" / arm / f"seed-{seed}" / "metrics.jsonl").read_text()
                    for name in ("pool", "jobs")]
            assert rows[0] == rows[1], f"{arm} seed {seed} trained other bytes through submitit"
    assert list((tmp_path / "jobs" / "submitit").iterdir())  # submitit's own job folders and logs


def test_an_unknown_cluster_is_refused_by_the_command_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["tune", *TUNE, "--engine", "submitit", "--cluster", "moon", "--out", str(tmp_path / "jobs")])
    assert "invalid choice: 'moon'" in capsys.readouterr().err


def test_submitit_flags_without_the_submitit_engine_are_refused_not_ignored(tmp_path, capsys):
    out = tmp_path / "pool"
    assert main(["tune", *TUNE, "--cluster", "slurm", "--gpus-per-node", "1", "--out", str(out)]) == 2
    assert "--cluster, --gpus-per-node set(s) submitit's jobs; add --engine submitit" in capsys.readouterr().err
    assert not out.exists()


def test_the_local_executor_runs_no_more_jobs_at_once_than_jobs_says(tmp_path):
    """submitit's local executor ignores an array's parallelism: the jobs are held back by the engine instead.
    Every job's submission and result are files in its submitit folder; no job may be submitted while
    ``parallel`` others have been submitted and have no result yet."""
    from speccond.harness.config.train_config import TrainConfig
    from speccond.harness.protocol.engines import Job, Submitit

    base = TrainConfig().with_overrides(["task=digits", "depth=1", "embed_dim=16", "epochs=1", "train_size=64",
                                         "test_size=50", "batch_size=32", "warmup_steps=1"])
    jobs = [Job(base.replaced(seed=seed), tmp_path / "runs" / f"seed-{seed}") for seed in range(4)]
    assert Submitit(tmp_path / "submitit", "local").run(jobs, threads=1, parallel=2, stage="final") == []
    spans = []
    for submitted in (tmp_path / "submitit").glob("*/*_submitted.pkl"):  # one folder per job
        result, = submitted.parent.glob("*_result.pkl")
        spans.append((submitted.stat().st_mtime_ns, result.stat().st_mtime_ns))
    assert len(spans) == 4
    for start, _ in spans:
        running = [1 for other_start, end in spans if other_start < start < end]
        assert len(running) < 2, f"a job was submitted while {len(running)} others ran: {sorted(spans)}"
