"""The mechanism behind issue 17's verdicts, measured: each arm's attention entropy at the end of its final
runs against its difference from the baseline, over every protocol task whose runs track entropy.

    .venv/bin/python scripts/mechanism.py            # print it
    .venv/bin/python scripts/mechanism.py --write    # and write docs/results/mechanism.md and mechanism.png

Reads docs/results/protocol-*/final/results.json (each final run's attention entropy at its last tracked step:
the tracker's, mean over layers and heads of the attention the module computes) and holm.json beside it (the
paired difference from the baseline and its Holm verdict). Entropy is there for the ViT, DeiT and BERT runs;
the detection runs are not tracked (track_every 0 in their config.json), and the tracker cannot rebuild the
attention of Swin, DaViT, XCiT, the Nystromformer or qk-norm (windowed, channel and landmark attention, q and k
changed by a hook), so those tasks and arms are listed as not measured, not guessed. Uniform attention's entropy is the log of the
number of keys, which differs by task, so an arm's entropy is read as a fraction of the baseline's in the
same task: per seed (the final runs share seeds) arm / baseline, then the mean and its 95 % t interval.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from speccond.diagnostics.plot import save_figure  # noqa: E402
from speccond.harness import ARM_NAMES, Interval, mean_interval, read_final_table  # noqa: E402

RESULTS = ROOT / "docs" / "results"
OUT = RESULTS / "mechanism.md"
PLOT = RESULTS / "mechanism.png"
COLOURS = {  # the arms plotted, each with its colour; every other arm is listed in the table only
    "spectral": "tab:red",
    "spectral-corrected=q": "tab:orange",
    "spectral-target_kappa=2": "tab:blue",
    "spectral-svd": "tab:purple",
    "sigma-reparam": "tab:olive",
    "sigma-reparam-all": "tab:brown",
    "spectral-norm": "tab:cyan",
}


@dataclass(frozen=True)
class Row:
    task: str  # the folder under docs/results, without "protocol-"
    arm: str
    entropy: float  # nats, mean over the arm's final runs
    baseline_entropy: float
    fraction: Interval  # arm / baseline entropy, paired by seed
    difference: Interval  # points from the baseline, paired by seed (holm.json)
    verdict: str


def final_folders() -> list[Path]:
    """Every protocol task's final folder with both a results.json and a holm.json."""
    return sorted(p.parent for p in RESULTS.glob("protocol-*/final/results.json") if (p.parent / "holm.json").is_file())


def entropies(folder: Path) -> dict[str, dict[int, float]]:
    """{arm: {seed: entropy at the run's last tracked step}} of the finished runs that tracked it. An arm is
    the run's folder (results.json's runs[].path: "<arm>/seed-<seed>"), the name holm.json uses."""
    runs = json.loads((folder / "results.json").read_text())["runs"]
    found: dict[str, dict[int, float]] = {}
    for run in runs:
        if run.get("status") == "finished" and run.get("entropy") is not None:
            arm, seed = run["path"].split("/seed-")
            found.setdefault(arm, {})[int(seed)] = float(run["entropy"])
    return found


def rows(folder: Path) -> tuple[list[Row], list[str]]:
    """(the rows of one task, the compared arms whose entropy was not measured there)."""
    table = read_final_table(folder / "holm.json")
    measured = entropies(folder)
    reference = measured.get(table["reference"], {})
    task = folder.parent.name.removeprefix("protocol-")
    found, unmeasured = [], []
    for c in table["comparisons"]:
        seeds = [s for s in c["seeds"] if s in measured.get(c["arm"], {}) and s in reference]
        if len(seeds) < 2:
            unmeasured.append(c["arm"])
            continue
        arm = measured[c["arm"]]
        found.append(Row(task, c["arm"], sum(arm[s] for s in seeds) / len(seeds),
                         sum(reference[s] for s in seeds) / len(seeds),
                         mean_interval([arm[s] / reference[s] for s in seeds]),
                         Interval(**c["difference"]).scaled(100), c["verdict"]))
    return found, unmeasured


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=values.__getitem__)
        result = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                result[order[k]] = (i + j) / 2
            i = j + 1
        return result
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    covariance = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    spread = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return covariance / spread if spread else float("nan")


def collect() -> tuple[list[Row], dict[str, list[str]]]:
    """(every measured row, {task: its compared arms not measured}) over :func:`final_folders`."""
    measured, unmeasured = [], {}
    for folder in final_folders():
        found, missing = rows(folder)
        measured += found
        if missing:
            unmeasured[folder.parent.name.removeprefix("protocol-")] = missing
    return measured, unmeasured


def report(measured: list[Row], unmeasured: dict[str, list[str]]) -> str:
    lines = ["# The mechanism: attention entropy at the end against the difference from the baseline (issue 17)", "",
             "Made by `.venv/bin/python scripts/mechanism.py --write` from the committed final runs (its docstring "
             "says how). Entropy: the tracker's, nats, at each final run's last tracked step, mean over layers, heads "
             "and seeds; fraction: arm / baseline entropy paired by seed, 95 % t interval; difference and verdict: "
             "the task's final table (holm.json).", "",
             "| task | arm | entropy, nats | baseline's, nats | fraction of the baseline's | difference, points | verdict |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(measured, key=lambda r: r.fraction.mean):
        lines.append(f"| {r.task} | {ARM_NAMES.get(r.arm, r.arm)} | {r.entropy:.3g} | {r.baseline_entropy:.3g} | "
                     f"{r.fraction} | {r.difference} | {r.verdict} |")
    lines += ["", "Rows sorted by the fraction. Over the rows:"]
    if len(measured) >= 3:
        rho = spearman([r.fraction.mean for r in measured], [r.difference.mean for r in measured])
        lines.append(f"- Spearman's rank correlation of the fraction with the difference, {len(measured)} rows: "
                     f"{rho:.2f} (descriptive: rows of one task share its baseline runs, so no p-value is given).")
    for verdict in ("loss", "tie", "win"):
        mine = [r.fraction.mean for r in measured if r.verdict == verdict]
        if mine:
            lines.append(f"- {verdict}: {len(mine)} rows, fraction {min(mine):.3g} to {max(mine):.3g} "
                         f"(median {statistics.median(mine):.3g})")
    lines += ["", "Not measured (no entropy in these final runs: detection is not tracked; for the rest the tracker cannot "
              "rebuild the attention, windowed, channel, landmark or qk-norm's):"]
    lines += [f"- {task}: {', '.join(arms)}" for task, arms in unmeasured.items()] or ["- none"]
    lines += ["", "![fraction of the baseline's entropy against the difference](mechanism.png)"]
    return "\n".join(lines) + "\n"


def plot(measured: list[Row], path: Path = PLOT) -> None:
    """mechanism.png: each measured row's entropy fraction (log axis) against its difference from the baseline
    with its 95 % interval, coloured by arm; losses filled, ties and wins hollow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7.5, 5))
    for arm, colour in COLOURS.items():
        mine = [r for r in measured if r.arm == arm]
        for r in mine:
            axis.errorbar(r.fraction.mean, r.difference.mean, yerr=r.difference.half_width, fmt="o", capsize=2,
                          color=colour, markerfacecolor=colour if r.verdict == "loss" else "white")
        if mine:
            axis.plot([], [], "o", color=colour, label=ARM_NAMES[arm])
    axis.axhline(0, color="black", linewidth=0.8)
    axis.axvline(1, color="grey", linewidth=0.8, linestyle=":")
    axis.set(xscale="log", xlabel="attention entropy at the end, fraction of the baseline's (log scale)",
             ylabel="difference from the baseline, points (95 % t interval)",
             title="Final attention entropy against the tuned difference (filled: Holm loss)")
    axis.legend(fontsize=7, loc="lower right")
    save_figure(figure, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write docs/results/mechanism.md and mechanism.png")
    measured, unmeasured = collect()
    text = report(measured, unmeasured)
    print(text)
    if parser.parse_args().write:
        OUT.write_text(text)
        plot(measured)


if __name__ == "__main__":
    main()
