"""Paired t-tests and Holm's adjustment over the committed comparisons (docs/results/*/results.json).

    .venv/bin/python scripts/multiple_comparisons.py            # print the table
    .venv/bin/python scripts/multiple_comparisons.py --write    # and write docs/results/multiple-comparisons.md

A family is the set of arms compared with one baseline: each report folder is one, except the
quick-preset ablations (docs/results/ablate-*), whose six folders share one baseline (the same config and
seeds) and are one family of every distinct arm. The pre-registered protocol's folders (docs/results/protocol-*)
are left out: each of its tasks has its own Holm table (final/holm.md), and its MLM pre-training is a step
of the language task, not a scored comparison. Per arm: the mean difference against the baseline,
paired by seed (accuracy; box AP for detection), its 95 % t interval, the two-sided paired t-test p, and
the p adjusted by Holm over the family's arms. An arm wins or loses when its adjusted p < 0.05.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from speccond.harness import family  # noqa: E402

RESULTS = ROOT / "docs" / "results"
POOLED = {"ablations (quick preset, Fashion-MNIST)": sorted(p.name for p in RESULTS.glob("ablate-*"))}
OUT = RESULTS / "multiple-comparisons.md"


def per_seed(results: dict) -> dict[str, dict[int, float]]:
    """{group label: {seed: figure}} over the finished and diverged runs (accuracy; detection: box AP)."""
    figures: dict[str, dict[int, float]] = {}
    for run in results["runs"]:
        if run["status"] == "unfinished":
            continue
        value = run["metrics"]["box_ap"] if "metrics" in run else run["accuracy"]
        figures.setdefault(run["group"], {})[run["seed"]] = value
    return figures


def reports() -> dict[str, dict]:
    """{name: report record} of every committed results.json outside the protocols; a record of re-runs
    (docs/results/main-job: ``reruns``) gives one report per re-run, under the re-run's name."""
    found = {}
    for path in sorted(RESULTS.glob("*/results.json")):
        if path.parent.name.startswith("protocol-"):
            continue
        record = json.loads(path.read_text())
        found.update({rerun["name"]: rerun["report"] for rerun in record["reruns"]} if "reruns" in record
                     else {path.parent.name: record})
    return found


def family_arms(
    folders: list[str], found: dict[str, dict],
) -> tuple[str, list[tuple[str, dict[int, float], dict[int, float]]]]:
    """(the figure's name, [(arm label, its per-seed figures, the baseline's)]) of the folders' arms."""
    arms, seen, figure = [], set(), "accuracy"
    for folder in folders:
        results = found[folder]
        figure = "box AP" if "ap_of_diverged_runs" in results else figure
        groups = per_seed(results)
        reference = results.get("reference")
        if reference not in groups:
            continue
        for label, seeds in groups.items():
            key = tuple(sorted(seeds.items()))  # the same runs under two labels (a sweep and a plain run) count once
            if label == reference or key in seen:
                continue
            seen.add(key)
            arms.append((f"{label} [{folder}]" if len(folders) > 1 else label, seeds, groups[reference]))
    return figure, arms


def rows() -> list[dict]:
    families = dict(POOLED)
    pooled = {folder for folders in POOLED.values() for folder in folders}
    found = reports()
    families.update({name: [name] for name in found if name not in pooled})
    table = []
    for name, folders in families.items():
        figure, arms = family_arms(folders, found)
        table += [{"family": name, "figure": figure, "comparison": c} for c in family(arms)]
    return table


def markdown(table: list[dict]) -> str:
    lines = ["# Paired t-tests with Holm's adjustment over the committed comparisons", "",
             "Made by `.venv/bin/python scripts/multiple_comparisons.py --write` from docs/results/*/results.json "
             "(its docstring says how families are formed). Differences in points (percent); p two-sided, paired "
             "by seed; Holm over the m arms of each family; win / loss: adjusted p < 0.05.", "",
             "| family | arm | figure | seeds | difference, points | p | m | Holm p | verdict |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        c = r["comparison"]
        lines.append(f"| {r['family']} | {c.arm} | {r['figure']} | {len(c.seeds)} | {c.difference.scaled(100)} | "
                     f"{c.p:.3g} | {c.m} | {c.holm:.3g} | {c.verdict} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(ROOT)}")
    text = markdown(rows())
    print(text)
    if parser.parse_args().write:
        OUT.write_text(text)


if __name__ == "__main__":
    main()
