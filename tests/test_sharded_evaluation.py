"""Evaluation under torchrun is sharded, not repeated (training_tasks.evaluate, streaming.RankShard): 2 gloo
processes each evaluate their rows and all-reduce the sums, and reach the one-process figures, with every
example counted once (101 images, an odd count, where a padded sampler would count one twice)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.torchrun import two_processes

pytest.importorskip("timm")

WORKER = Path(__file__).parent / "distributed" / "eval_worker.py"
TOLERANCE = 1e-6  # relative, on the mean loss: the shards' sums are added in another order than one process's


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("sharded-evaluation")
    two_processes(WORKER, ["--out", str(out)])
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]


@pytest.mark.parametrize("reading", ["images", "two-class", "tokens"])
def test_two_ranks_evaluating_their_shards_reach_the_one_process_figures(ranks, reading):
    for rank in ranks:
        sharded, whole = rank[reading]["sharded"], rank[reading]["whole"]
        assert sharded["accuracy"] == whole["accuracy"]
        counts = {"accuracy", "loss", "majority", "examples"}  # the majority class's share: the report's floor
        assert sharded.keys() == whole.keys() == (counts | {"mcc", "f1"} if reading == "two-class" else counts)
        assert all(sharded[k] == whole[k] for k in ("mcc", "f1") if k in whole)  # from the summed confusion
        assert abs(sharded["loss"] - whole["loss"]) <= TOLERANCE * abs(whole["loss"])
    assert ranks[0][reading]["sharded"] == ranks[1][reading]["sharded"]  # the same reduced figures on every rank


def test_every_example_is_on_exactly_one_rank(ranks):
    shards = ranks[0]["shards"]
    assert sorted(index for shard in shards for index in shard) == list(range(101))
    assert [len(shard) for shard in shards] == [51, 50]
