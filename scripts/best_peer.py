"""The peer the fair-comparison protocol's reduced tasks take, from the full-protocol tasks' choice.json (validation only).

    .venv/bin/python scripts/best_peer.py runs/tune-fashion-mnist/choice.json runs/tune-cifar10/choice.json

Prints the peer's arm name (harness/protocol/tuning.py best_peer gives the rule; docs/RESULTS.md registers it),
then, on stderr, each peer's mean lead over the baseline on validation. scripts/protocol.sh calls it when
BEST_PEER is not set.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from speccond.harness import best_peer, read_choice, validation_leads  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("choices", nargs="+", type=Path, help="choice.json of each full-protocol task")
    args = parser.parse_args()
    try:
        choices = [read_choice(path) for path in args.choices]
        peer, leads = best_peer(choices), validation_leads(choices)
    except ValueError as error:
        print(f"best_peer: {error}", file=sys.stderr)
        return 1
    for name, values in leads.items():
        print(f"{name}: validation lead over the baseline {', '.join(f'{100 * v:+.2f}' for v in values)} points",
              file=sys.stderr)
    print(peer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
