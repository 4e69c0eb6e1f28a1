"""scripts/gpu64.sh, the width-64 protocol's GPU instance in one call, run end to end in its smoke mode on
the CPU: the same sequence (pilots beside Fashion-MNIST's tuning, edges and finals, the plateau rule, the
branch it picks, publishing, packing the records) with tiny runs, all of it in scratch folders."""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _prepared(name: str) -> bool:
    from speccond import data

    try:
        data.prepare(name)
        return True
    except (OSError, ValueError):
        return False


@pytest.mark.skipif(not Path("/usr/share/datasets/fashion-mnist").is_dir(),
                    reason="needs the Debian package dataset-fashion-mnist (./run installs it as root)")
def test_the_gpu_call_runs_its_whole_sequence_in_smoke_mode_and_packs_the_records(tmp_path):
    if not _prepared("cifar10"):
        pytest.skip("needs the CIFAR-10 cache (speccond data prepare cifar10 reads the shared data folder)")
    from speccond.data import data_dir

    env = {**os.environ, "SMOKE": "1", "SPECCOND_PYTHON": sys.executable, "SPECCOND_DATA": str(data_dir()),
           "RUNS64": str(tmp_path / "runs"), "KEPT64": str(tmp_path / "kept"), "SPECCOND_SRC": str(ROOT / "src")}
    result = subprocess.run(["sh", str(ROOT / "scripts" / "gpu64.sh"), "-", str(tmp_path / "out"), "600"],
                            env=env, capture_output=True, text=True, timeout=900)
    log = (tmp_path / "out" / "gpu64.log").read_text()
    assert result.returncode == 0, log[-3000:]
    assert "Fashion-MNIST ended with status 0" in log
    assert "plateau rule: the 1-epoch pilot minus the 5-epoch baseline at lr 1e-3 = " in log
    assert "CIFAR-10 (JPEG), 10 epochs" in log or "10-epoch branch" in log
    kept = tmp_path / "kept"
    assert (kept / "protocol64-fashion-mnist" / "choice.json").is_file()
    assert (kept / "protocol64-fashion-mnist" / "kept.tar.xz").is_file()
    assert (kept / "protocol64-pilot1ep" / "baseline" / "seed-0" / "metrics.jsonl").is_file()
    with tarfile.open(tmp_path / "out" / "gpu64-records.tar.xz") as records:
        names = records.getnames()
    assert any(name.endswith("final/holm.md") for name in names), names[:20]
    assert not any("/checkpoints" in name for name in names)
