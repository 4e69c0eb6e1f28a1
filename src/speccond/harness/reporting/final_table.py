"""The final table of a protocol's runs, test scored once per run: each arm against the baseline, paired by
seed, Holm over the arms. One owner for its two forms: holm.md (read by people) and holm.json (read by
scripts/headline.py), written by ``speccond tune`` (OUT/final/) and scripts/long_budget_report.py.

holm.json: {"metric": "accuracy" (the task's first metric; box AP for detection), "reference": arm,
"seeds": the seeds each arm is owed, "owed": final runs not finished, "arms": {arm: {"lr" (a number, or words
such as "chosen per task"), "figures": {seed (a string): figure, a fraction}}}, "comparisons": [{"arm", "seeds", "difference": {"mean",
"half_width", "n"} (a fraction), "p", "holm", "m", "verdict"}]}.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from speccond.harness.reporting.numbers import METRIC_NAMES
from speccond.harness.reporting.stats import against_reference, mean_interval

KEYS = ("metric", "reference", "seeds", "owed", "arms", "comparisons")


def final_table(figures: dict[str, dict[int, float]], lrs: dict[str, float], reference: str, metric: str,
                seeds: int, title: str, described: str, split: str = "test") -> tuple[str, dict]:
    """(holm.md's text, holm.json's record) of ``figures`` ({arm: {seed: figure}}, the finished runs) with
    each arm's lr; ``title`` is the heading line ("# ..."), ``described`` the sentence under it (seeds,
    how test was scored); ``split`` names the split the figures score in the table's header."""
    comparisons = against_reference({n: f for n, f in figures.items() if n != reference}, figures.get(reference, {}))
    owed = len(figures) * seeds - sum(len(f) for f in figures.values())
    lines = [title, "",
             f"{described} m = {len(comparisons)} comparisons, Holm over them; win or loss: adjusted p < 0.05"
             + (f"; **{owed} of {len(figures) * seeds} runs still owed**" if owed else "") + ".", "",
             f"| arm | lr | seeds | {split} {METRIC_NAMES.get(metric, metric)}, % | difference, points | p | Holm p | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    if figures.get(reference):
        lines.append(f"| {reference} | {lr_text(lrs[reference])} | {len(figures[reference])} | "
                     f"{mean_interval([100 * v for v in figures[reference].values()])} | - | - | - | reference |")
    for c in comparisons:
        lines.append(f"| {c.arm} | {lr_text(lrs[c.arm])} | {len(c.seeds)} | "
                     f"{mean_interval([100 * figures[c.arm][s] for s in c.seeds])} | {c.difference.scaled(100)} | "
                     f"{c.p:.3g} | {c.holm:.3g} | {c.verdict} |")
    compared = {c.arm for c in comparisons}
    for name, values in figures.items():
        if name == reference or name in compared or not values:
            continue
        common = len(set(values) & set(figures.get(reference, {})))
        lines.append(f"| {name} | {lr_text(lrs[name])} | {len(values)} | {mean_interval([100 * v for v in values.values()])} "
                     f"| - | - | - | not compared: {common} seed(s) in common with {reference}, 2 needed |")
    record = {"metric": metric, "reference": reference, "seeds": seeds, "owed": owed,
              "arms": {name: {"lr": lrs[name], "figures": {str(s): v for s, v in sorted(f.items())}}
                       for name, f in figures.items()},
              "comparisons": [{"arm": c.arm, "seeds": list(c.seeds), "difference": dataclasses.asdict(c.difference),
                               "p": c.p, "holm": c.holm, "m": c.m, "verdict": c.verdict} for c in comparisons]}
    return "\n".join(lines) + "\n", record


def lr_text(lr) -> str:
    """An arm's lr as a table shows it: "0.001", or as given when it is words ("chosen per task")."""
    return f"{lr:g}" if isinstance(lr, (int, float)) else str(lr)


def write_final_table(folder: Path, text: str, record: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "holm.md").write_text(text)
    write_final_record(folder, record)


def write_final_record(folder: Path, record: dict) -> None:
    """holm.json alone, for a page that shows the table itself (scripts/long_budget_report.py)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "holm.json").write_text(json.dumps(record, indent=2) + "\n")


def read_final_table(path: Path) -> dict:
    """holm.json's record, or a ValueError naming what is wrong with the file."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: unreadable final table ({error}); expected the holm.json speccond tune writes") from None
    missing = [k for k in KEYS if not isinstance(record, dict) or k not in record]
    if missing:
        raise ValueError(f"{path}: not a final table (no {', '.join(missing)}); expected the keys {', '.join(KEYS)}")
    return record
