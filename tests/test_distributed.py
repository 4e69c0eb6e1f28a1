"""FSDP2 and DDP with conditioned models (docs/GUIDE.md, "FSDP2 and DDP"): torchrun, 2 CPU processes on gloo.

tests/distributed/fsdp_worker.py trains each case on half of every global batch per rank and a
single-process reference on the whole batch; here the two must agree within float32 tolerance on the
logits after training, describe()'s kappas, projection_spectra, the attention entropy (the head
diagnostics), refresh() and, where it is supported, remove(merge=True) (merged weights and logits).
Unsupported orders are refused with the way that works: the weight backend cannot be applied after
fully_shard, nor removed from a sharded model (FSDP keeps each parameter where it found it).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("timm")

WORKER = Path(__file__).parent / "distributed" / "fsdp_worker.py"
SUPPORTED = [
    *(f"{backend}:{correction}:fsdp:before" for backend in ("weight", "activation") for correction in ("identity", "svd", "auto")),
    *(f"activation:{correction}:fsdp:after" for correction in ("identity", "svd", "auto")),
    "weight:auto:ddp:before",
    "activation:svd:ddp:before",
]
REFUSED_APPLY = ["weight:identity:fsdp:after"]
TOLERANCE = 1e-5  # relative (|difference| / max(|value|, 1)): one rank's half batches sum in another order


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("fsdp")
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER),
        "--out", str(out), "--cases", *SUPPORTED, *REFUSED_APPLY,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]


@pytest.mark.parametrize("case", SUPPORTED)
def test_sharded_training_and_diagnostics_equal_one_process(results, case):
    for rank in results:
        found = rank[case]
        for key in ("logits", "kappa", "spectra", "entropy", "after_refresh"):
            assert found[key] < TOLERANCE, (key, found[key])
        expected_refreshes = 0 if ":identity:" in case else 2  # svd and "auto" follow the weights: one per block
        assert found["refreshed"] == [expected_refreshes, expected_refreshes]
        if case.startswith("weight:") and ":fsdp:" in case:
            assert "full_state_dict=True" in found["remove_refused"] and "activation backend" in found["remove_refused"]
            assert found["still_conditioned"] and found["after_refused_remove"] < TOLERANCE
            continue
        assert found["keys_equal"] and found["plain"]
        assert found["merged"] < TOLERANCE and found["after_remove"] < TOLERANCE


@pytest.mark.parametrize("case", REFUSED_APPLY)
def test_the_weight_backend_after_fully_shard_is_refused_naming_the_order(results, case):
    for rank in results:
        message = rank[case]["refused"]
        assert "before fully_shard" in message and "backend='activation'" in message
