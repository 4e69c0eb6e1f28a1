"""Retrain one published run and check it regenerates every stored figure (docs/RESULTS.md: nothing published changes).

    OMP_NUM_THREADS=1 .venv/bin/python scripts/retrain_sample.py docs/results/cifar10-swin "spectral lam=10" \
        --out runs/retrain

reads the group's recorded command (results.json; ``--command`` gives it for reports that did not
record one; one recorded before lam took "auto" is read as it is spelled now), reruns it for that one method and seed 0 into ``OUT/<report folder>``, and compares

- the run's per-run figures in the new results.json with the committed ones, every key but the wall
  time and the run's path, as stored (floats exactly, so every stored digit);
- the run's row of the "Runs" table in the new results.md with the committed row, every column but the
  wall time.

It prints both and exits 1 on any difference. The published runs were trained with one thread per job
(scripts/reproduce.sh sets OMP_NUM_THREADS=1); another thread count sums in another order, so
collapsed-attention runs (lam = 10) end elsewhere: run this with OMP_NUM_THREADS=1.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

IGNORED = ("seconds", "path")  # wall time varies; the path is where the run sits


def recorded_run(results: dict, label: str, seed: int) -> tuple[dict, dict]:
    """(group, run) of ``label`` and ``seed`` in a results.json."""
    groups = [g for g in results["groups"] if g["label"] == label]
    if not groups:
        raise SystemExit(f"no group {label!r}; groups: {', '.join(g['label'] for g in results['groups'])}")
    runs = [r for r in results["runs"] if r["group"] == label and r["seed"] == seed]
    if not runs:
        raise SystemExit(f"group {label!r} has no run of seed {seed}")
    return groups[0], runs[0]


def rerun_report(results: dict, name: str | None) -> dict:
    """The report of the dated re-run ``name`` in a results.json that keeps re-runs side by side."""
    reruns = {rerun["name"]: rerun["report"] for rerun in results.get("reruns", [])}
    if name not in reruns:
        raise SystemExit(f"--rerun must name one of this report's re-runs: {', '.join(reruns) or 'it keeps none'}; "
                         f"got {name!r}")
    return reruns[name]


def rerun_arguments(command: str, method: str, out: Path) -> list[str]:
    """The recorded ``speccond compare`` command for one method, seed 0, into ``out``; a command recorded before
    lam took "auto" (``--set target_kappa=2``, ``--sweep target_kappa=2``) read as it is spelled now
    (``lam=auto``: harness/config/forms.py)."""
    from speccond.harness import form_1_arguments

    words = form_1_arguments(shlex.split(command))
    if words[:2] != ["speccond", "compare"]:
        raise SystemExit(f"expected a 'speccond compare ...' command, got {command!r}")
    kept, skip = [], False
    for word in words[2:]:
        if skip:
            skip = False
            continue
        if word in ("--out", "--methods", "--seeds"):
            skip = True
            continue
        kept.append(word)
    return ["compare", *kept, "--methods", method, "--seeds", "1", "--out", str(out)]


def run_row(markdown: str, label: str, seed: int) -> list[str]:
    """The cells of ``label``'s seed-``seed`` row in a results.md's "Runs" table, wall time dropped."""
    table = markdown.split("## Runs", 1)[-1].split("\n## ", 1)[0]
    lines = [line for line in table.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells[0] == label and cells[1] == str(seed):
            return [cell for name, cell in zip(header, cells) if name != "wall time"]
    raise SystemExit(f"no row for {label!r} seed {seed} in the Runs table")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="a committed report folder, e.g. docs/results/cifar10-swin")
    parser.add_argument("label", help="the group's label as the report writes it, e.g. 'spectral lam=10'")
    parser.add_argument("--command", help="the command that made the runs, where results.json records none")
    parser.add_argument("--rerun", help="a report that keeps dated re-runs side by side (docs/results/main-job): the "
                                            "re-run's name, e.g. main-job-2026-12-03")
    parser.add_argument("--out", type=Path, default=Path("runs/retrain"))
    args = parser.parse_args()
    from speccond.harness import speccond_main as speccond

    results = json.loads((args.report / "results.json").read_text())
    if "reruns" in results or args.rerun is not None:
        results = rerun_report(results, args.rerun)
    group, published = recorded_run(results, args.label, 0)
    command = args.command or (group.get("commands") or [None])[0]
    if not command:
        raise SystemExit("results.json records no command for this group; give it with --command")
    out = args.out / args.report.name
    arguments = rerun_arguments(command, group["method"], out)
    print("retraining:", "speccond", shlex.join(arguments), flush=True)
    if speccond(arguments):
        return 2
    regenerated = json.loads((out / "results.json").read_text())
    _, fresh = recorded_run(regenerated, args.label, 0)
    different = [key for key in sorted(set(published) | set(fresh)) if key not in IGNORED
                 and published.get(key) != fresh.get(key)]
    for key in sorted(set(published) - set(IGNORED)):
        mark = "DIFFERS" if key in different else "same"
        print(f"  {key}: published {published.get(key)!r}, retrained {fresh.get(key)!r}  [{mark}]")
    published_page = (args.report / "results.md").read_text()
    if args.rerun:  # that re-run's section of the page
        published_page = published_page.split(f"## {args.rerun}\n", 1)[-1].split("\n## ", 1)[0]
    old_row = run_row(published_page, args.label, 0)
    new_row = run_row((out / "results.md").read_text(), args.label, 0)
    print("  results.md row, published:", " | ".join(old_row))
    print("  results.md row, retrained:", " | ".join(new_row))
    if different or old_row != new_row:
        print(f"{args.report.name} {args.label!r} seed 0: DIFFERS ({', '.join(different) or 'the results.md row'})")
        return 1
    print(f"{args.report.name} {args.label!r} seed 0: every stored figure regenerated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
