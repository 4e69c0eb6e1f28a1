"""Command line: ``speccond demo`` (more commands come with the harness)."""
from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="speccond", description="Spectral conditioning of attention.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="condition a real timm ViT and print what changed")
    demo.add_argument("--lam", type=float, default=10.0, help="scale of the identity correction (default 10)")
    demo.add_argument("--correction", choices=("identity", "svd"), default="identity")
    demo.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "demo":
        from speccond.demo import run_demo

        started = time.perf_counter()
        run_demo(lam=args.lam, correction=args.correction, seed=args.seed, out=sys.stdout)
        print(f"\ndone in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
