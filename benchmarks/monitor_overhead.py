"""What speccond.monitor costs a training run: ViT-S/16 at 224 px, paired and interleaved steps (docs/BENCHMARKS.md).

Four arms share one model (timm ``vit_small_patch16_224``, pretrained=False, conditioned with
``SpectralConfig(correction="svd")``) and one AdamW; each step is zero_grad + forward + cross-entropy +
backward + AdamW step on a fixed random batch:

    plain      the step alone
    idle       the step inside ``with monitor.step(s)`` for an s the schedule does not make due (what
               every - 1 steps in every out of ``every`` pay: no hook is armed, nothing is computed)
    measured   the step inside ``with monitor.step(0)``: hooks on the attention inputs of every layer,
               entropy of every head from this step's forward, kappa of every head and block after it
    first      a new Monitor on the model, then its first measured step: the structural check, and the
               watch for attention outside the found layers (diagnostics/census.py) over that step; paid
               once per model, so it is reported beside the schedule's cost, not inside it

At every pair index one step of each arm runs, in an order that rotates with the index, each timed with
wall time (time.perf_counter) and process CPU time (time.process_time, less disturbed by other jobs on
the cores). Per pair, the ratios idle / plain, measured / plain and first / plain, and the cost at the default
schedule (one measured step in every ``every``):

    at_schedule = ((every - 1) * idle + measured) / every / plain

The report gives the median of each paired ratio with its interquartile range; the target is
at_schedule <= 1.02. Two warm-up steps per arm are not timed.

Command (from the repository root; about 6-9 minutes on the 2-core machine while other jobs run):

    PYTHONPATH=src .venv/bin/python benchmarks/monitor_overhead.py --pairs 12 --batch 8
    PYTHONPATH=src .venv/bin/python benchmarks/monitor_overhead.py --quick      # 32 px, 3 pairs: a smoke run
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

import torch
import torch.nn.functional as F

import speccond
from speccond.monitor import Monitor
from speccond.monitor.schedule import DEFAULT_EVERY

warnings.filterwarnings("ignore")
ARMS = ("plain", "idle", "measured", "first")
TARGET = 1.02


def build(img_size: int):
    import timm

    torch.manual_seed(0)
    model = timm.create_model("vit_small_patch16_224", pretrained=False, img_size=img_size, num_classes=10)
    speccond.apply(model, speccond.SpectralConfig(correction="svd"))
    return model.train()


def timed(step) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    step()
    return time.perf_counter() - wall, time.process_time() - cpu


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, median, q3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=12, help="paired step indices (each runs the three arms)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--img-size", type=int, default=224)
    parser.add_argument("--every", type=int, default=DEFAULT_EVERY, help="the schedule (default: the monitor's)")
    parser.add_argument("--quick", action="store_true", help="32 px, 3 pairs: a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.pairs, args.img_size = 3, 32
    model = build(args.img_size)
    images = torch.randn(args.batch, 3, args.img_size, args.img_size, generator=torch.Generator().manual_seed(1))
    labels = torch.arange(args.batch) % 10
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    monitor = Monitor(model, writer=_NullWriter(), every=args.every)

    def train_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()

    def inside(step: int):
        def run() -> None:
            with monitor.step(step):
                train_step()
        return run

    def first() -> None:
        fresh = Monitor(model, writer=_NullWriter(), every=args.every)
        with fresh.step(0):
            train_step()

    arms = {"plain": train_step, "idle": inside(1), "measured": inside(0), "first": first}
    for arm in ARMS:  # warm-up: allocator, autograd graph, the first SVDs
        for _ in range(2 if not args.quick else 1):
            arms[arm]()
    load_before = os.getloadavg()[0]
    times: dict[str, list[tuple[float, float]]] = {arm: [] for arm in ARMS}
    for index in range(args.pairs):
        order = ARMS[index % len(ARMS) :] + ARMS[: index % len(ARMS)]
        for arm in order:
            times[arm].append(timed(arms[arm]))
    print(f"ViT-S/16 at {args.img_size} px, batch {args.batch}, {args.pairs} pairs, schedule every={args.every}; "
          f"{len(monitor.last)} metrics per measurement; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, load average {load_before:.2f} -> {os.getloadavg()[0]:.2f}")
    for clock, column in (("wall", 0), ("cpu", 1)):
        plain = [t[column] for t in times["plain"]]
        idle = [t[column] / p for t, p in zip(times["idle"], plain)]
        measured = [t[column] / p for t, p in zip(times["measured"], plain)]
        first_step = [t[column] / p for t, p in zip(times["first"], plain)]
        at_schedule = [((args.every - 1) * i + m) / args.every for i, m in zip(idle, measured)]
        print(f"{clock}: plain step median {statistics.median(plain) * 1000:.0f} ms")
        rows = (("idle / plain", idle), ("measured / plain", measured), ("first / plain", first_step),
                ("at schedule / plain", at_schedule))
        for name, ratios in rows:
            q1, median, q3 = quartiles(ratios)
            print(f"  {name:<20} median {median:.4f}  IQR [{q1:.4f}, {q3:.4f}]")
        verdict = "meets" if statistics.median(at_schedule) <= TARGET else "misses"
        print(f"  at the default schedule: {verdict} the target of at most {TARGET:.2f}")


class _NullWriter:
    """Takes the scalars and drops them: the benchmark times measuring, not a file system."""

    def add_scalar(self, tag: str, scalar_value: float, global_step: int) -> None:
        pass


if __name__ == "__main__":
    main()
