"""A sweep of attention families outside the architecture table: covered / refused / wrong per class.

    .venv/bin/python scripts/attention_sweep.py            # one line per family, then the counts per class

The families, and what each outcome means, are in tests/attention_sweep.py; tests/test_attention_sweep.py
checks that none is wrong.
"""
from __future__ import annotations

import sys
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from tests.attention_sweep import CASES, outcome

    counts: dict[str, Counter] = {}
    for case in CASES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            verdict, why = outcome(case)
        counts.setdefault(case.kind, Counter())[verdict] += 1
        print(f"{case.kind:20} {case.name:24} {verdict:8} {why}", flush=True)
    print()
    for kind, count in counts.items():
        print(f"{kind:20} covered {count['covered']}, refused {count['refused']}, wrong {count['wrong']}")


if __name__ == "__main__":
    main()
