"""The tuning table, tuning.md, as text: each arm's mean final validation figure at each lr over the tuning
seeds, the chosen lr in bold. ``speccond tune`` writes it beside choice.json (protocol/tuning.py:
write_tuning); a committed protocol keeps choice.json alone, which holds every figure the table shows, and
the table is made from it again, byte for byte what tune wrote (tests/test_tuning_table.py):

    python -m speccond.harness.protocol.tuning_table docs/results/protocol-cifar10/choice.json
    python -m speccond.harness.protocol.tuning_table docs/results/protocol-detection/choice.json --metric box_ap
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

from speccond.harness.reporting.numbers import METRIC_NAMES
from speccond.harness.reporting.stats import mean_interval

PLOT_LINE = "![validation accuracy against lr](tuning.png)"  # the table's last line: the plot beside it


def tuning_table(scores: dict[str, dict[str, list]], choice: Optional[dict], metric: str = "accuracy") -> str:
    """tuning.md's text of ``scores`` ({arm: {lr: [figure per seed, None while unfinished]}}) with ``choice``
    (None until every run finished); ``metric`` is the task's first metric ("box_ap" reads "box AP")."""
    label = METRIC_NAMES.get(metric, metric)
    complete = choice is not None
    lines = ["# Tuning on the validation split", "",
             f"Mean final validation {label}, %, over the tuning seeds; "
             + ("the chosen lr in bold (highest mean, ties to the smaller lr)." if complete else
                "**not every tuning run has finished: no choice yet**; a cell short of seeds says how many it has."), ""]
    lrs = sorted({lr for by_lr in scores.values() for lr in by_lr}, key=float)
    lines += ["| arm | " + " | ".join(f"lr {lr}" for lr in lrs) + " |", "|---|" + "---|" * len(lrs)]
    for name, by_lr in scores.items():
        cells = []
        for lr in lrs:
            values = [100 * v for v in by_lr.get(lr, []) if v is not None]
            text = str(mean_interval(values)) if values else "-"
            if values and len(values) < len(by_lr[lr]):  # short of seeds: the mean so far and how many
                text = f"{sum(values) / len(values):.4g} ({len(values)} of {len(by_lr[lr])} seeds)"
            cells.append(f"**{text}**" if choice and float(lr) == choice[name]["lr"] else text)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + PLOT_LINE + "\n"


def table_of_choice(choice: dict[str, dict], metric: str = "accuracy") -> str:
    """tuning.md's text from a choice.json's record alone (its "validation" figures are the scores)."""
    return tuning_table({name: chosen["validation"] for name, chosen in choice.items()}, choice, metric)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("choice", type=Path, help="a choice.json speccond tune wrote (docs/results/protocol-*/choice.json)")
    parser.add_argument("--metric", default="accuracy",
                        help="the task's first metric, the figure the scores are of (box_ap for detection)")
    args = parser.parse_args(argv)
    try:
        table = table_of_choice(json.loads(args.choice.read_text()), args.metric)
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, KeyError, TypeError) as error:
        print(f"tuning_table: {args.choice}: not a choice ({type(error).__name__}: {error}); expected the "
              "choice.json speccond tune writes", file=sys.stderr)
        return 2
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
