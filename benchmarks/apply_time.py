"""How long speccond.apply takes on timm ViT-B/16, and what reading its report costs on top (docs/BENCHMARKS.md).

Since the report became lazy, the report's spectra (kappa of W and W + C of every q, k, v block and head: 12 layers x 3
roles x (12 heads + 2 blocks) = 504 float64 SVDs on ViT-B) are computed on the report's first read, not on
attach. Each repetition builds a fresh ``vit_base_patch16_224`` (pretrained=False, outside the timing),
times ``speccond.apply(model, SpectralConfig(lam=10))`` and then, on the same model, ``report.compute()``
(what apply used to include). Printed: the median over the repetitions of each and of their paired sum,
with the load average (single times drift a lot while other processes share the cores).

Command (from the repository root):

    .venv/bin/python benchmarks/apply_time.py            # 5 repetitions, about 2 minutes here
    .venv/bin/python benchmarks/apply_time.py --reps 2   # a smoke run
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

import torch

import speccond


def one_repetition(model_name: str) -> tuple[float, float]:
    """(seconds of apply, seconds of the report's first full read) on a freshly built model."""
    import timm

    model = timm.create_model(model_name, pretrained=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lam = 10's collapse warning, expected here
        start = time.perf_counter()
        report = speccond.apply(model, speccond.SpectralConfig(lam=10.0))
        applied = time.perf_counter() - start
    start = time.perf_counter()
    report.compute()
    return applied, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="repetitions (default 5)")
    parser.add_argument("--model", default="vit_base_patch16_224", help="timm model name (built from config)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{args.model}, {args.reps} repetitions, {args.threads} thread(s), load before {os.getloadavg()[0]:.2f}")
    times = [one_repetition(args.model) for _ in range(args.reps)]
    applied = [a for a, _ in times]
    report = [r for _, r in times]
    both = [a + r for a, r in times]
    print(f"  apply                   median {statistics.median(applied):6.2f} s  (all: "
          + ", ".join(f"{a:.2f}" for a in applied) + ")")
    print(f"  report.compute()        median {statistics.median(report):6.2f} s")
    print(f"  apply + report (paired) median {statistics.median(both):6.2f} s  (what apply took when it built the report)")
    print(f"  load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
