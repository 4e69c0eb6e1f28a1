"""One rank of the monitor-under-torchrun check (tests/test_monitor_distributed.py, 2 processes, gloo).

For each case (wrapper, and whether rank 1 passes the shared CSV path or None) every rank makes a
speccond.monitor.Monitor with every=1 and trains 3 steps on its own half of each global batch, recording
``monitor.last`` after each step in rank{r}-{case}.json; rank 0's CSV is {case}.csv, which rank 1 is given
too when the case says "shared". For each wrapper every rank also makes a speccond.diagnostics.Tracker
on the path tracker-{wrapper}.jsonl and records the rows its ``step`` returns in rank{r}-tracker-{wrapper}.json.
"""
from __future__ import annotations

import argparse
import json
import warnings

import torch
import torch.distributed as dist
from torch import nn

import speccond
from speccond.diagnostics import Tracker
from speccond.monitor import Monitor
from tests.distributed.fsdp_worker import batches, shard, vit

CASES = ["ddp:shared", "fsdp:shared", "ddp:none"]


def run(case: str, rank: int, out: str) -> None:
    wrapper, rank1_writer = case.split(":")
    model = vit()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the collapse advice is not under test here
        speccond.apply(model, speccond.SpectralConfig(correction="svd"))
    model = shard(model, wrapper)
    shared = f"{out}/{wrapper}-{rank1_writer}.csv"
    monitor = Monitor(model, writer=shared if rank == 0 or rank1_writer == "shared" else None, every=1)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    measured = []
    for step, (images, labels) in enumerate(batches()):
        images, labels = images.chunk(2)[rank], labels.chunk(2)[rank]  # each rank its half: other entropies
        with monitor.step(step):
            nn.functional.cross_entropy(model(images), labels).backward()
            optimiser.step()
            optimiser.zero_grad()
        measured.append(monitor.last)
    with open(f"{out}/rank{rank}-{wrapper}-{rank1_writer}.json", "w") as handle:
        json.dump(measured, handle)
    if rank1_writer == "shared":
        tracker = Tracker(model, (batches()[0][0][:2],), every=1, path=f"{out}/tracker-{wrapper}.jsonl")
        returned = [tracker.step(step) for step in range(2)]
        with open(f"{out}/rank{rank}-tracker-{wrapper}.json", "w") as handle:
            json.dump(returned, handle)
    dist.barrier()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    try:
        for case in CASES:
            run(case, dist.get_rank(), args.out)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
