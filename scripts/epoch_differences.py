"""Where each arm of the head-width-64 protocol gains or loses over training: its paired difference from the
baseline after every epoch, with its 95 % interval, for every task with runs kept.

    .venv/bin/python scripts/epoch_differences.py           # prints the page
    .venv/bin/python scripts/epoch_differences.py --write   # docs/results/protocol64-epochs.md and .png
    .venv/bin/python scripts/epoch_differences.py --runs runs/tune64-cifar10   # also a live folder (not written)

Read from the kept archives (docs/results/protocol64-*/kept.tar.xz, checked against their manifests) and,
with ``--runs``, from run folders still training. Every run records its validation accuracy after each epoch
("val" rows of metrics.jsonl; final runs hold out the same validation split as tuning runs). Final runs are
paired with the baseline's final run of the same seed (seeds 100 to 104); tuning runs with the baseline's
tuning run of the same lr and seed, one seed, so without an interval. The trend column compares the first
epoch's difference with the last: "grows" (same sign, larger), "fades" (same sign, smaller), "reverses"
(the sign changes), judged on the means; an interval that spans zero at the last epoch says the
difference there is within noise, whatever the trend. tests/test_epoch_differences.py fails when the
committed page is stale.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
PAGE = RESULTS / "protocol64-epochs.md"
PLOT = RESULTS / "protocol64-epochs.png"
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

from speccond.harness import ARM_NAMES, paired_difference  # noqa: E402
from width64_table import arm_of  # noqa: E402  (the run page's reading of a run's path)


def epoch_curve(folder: Path) -> tuple[dict, dict[int, float]]:
    """(config, {epoch: validation accuracy in %}) of one run folder."""
    config = json.loads((folder / "config.json").read_text())["config"]
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line]
    return config, {int(r["epoch"]): 100 * r["accuracy"] for r in rows if r.get("kind") == "val" and "epoch" in r}


def read_runs(folder: Path) -> dict[str, tuple[dict, dict[int, float]]]:
    """{run path inside ``folder`` ("final/qk-norm/seed-100"): its config and epoch curve}, finished or not."""
    return {str(metrics.parent.relative_to(folder)): epoch_curve(metrics.parent)
            for metrics in sorted(folder.rglob("metrics.jsonl")) if (metrics.parent / "config.json").is_file()}


def kept_runs(kept: Path) -> dict[str, tuple[dict, dict[int, float]]]:
    from speccond.harness import opened_kept

    with opened_kept(kept) as folder:
        return read_runs(folder)


def groups(runs: dict[str, tuple[dict, dict[int, float]]]) -> dict[tuple[str, str], dict[str, dict[int, dict]]]:
    """{(stage, lr or ""): {arm: {seed: epoch curve}}}: final runs in one group (each arm at its own lr),
    tuning runs by lr."""
    grouped: dict[tuple[str, str], dict[str, dict[int, dict]]] = {}
    for run, (config, curve) in runs.items():
        stage = run.split("/")[0]
        key = (stage, "" if stage == "final" else f"{config['lr']:g}")
        grouped.setdefault(key, {}).setdefault(arm_of(run), {})[config["seed"]] = curve
    return grouped


def differences(arms: dict[str, dict[int, dict]]) -> dict[str, dict[int, tuple[float, float, int]]]:
    """{arm: {epoch: (mean, half width, seeds)}}: each arm minus the baseline, paired by seed, per epoch
    that both reached (half width nan with one seed)."""
    baseline = arms.get("baseline", {})
    found = {}
    for arm, by_seed in arms.items():
        if arm == "baseline":
            continue
        per_epoch = {}
        epochs = sorted({e for seed, curve in by_seed.items() if seed in baseline for e in curve})
        for epoch in epochs:
            seeds = [s for s, curve in by_seed.items() if epoch in curve and epoch in baseline.get(s, {})]
            if seeds:
                interval = paired_difference([by_seed[s][epoch] for s in seeds], [baseline[s][epoch] for s in seeds])
                per_epoch[epoch] = (interval.mean, interval.half_width, len(seeds))
        if per_epoch:
            found[arm] = per_epoch
    return found


def trend(per_epoch: dict[int, tuple[float, float, int]]) -> str:
    """"grows", "fades" or "reverses" from the first epoch's mean difference to the last's; "-" with one epoch."""
    epochs = sorted(per_epoch)
    if len(epochs) < 2:
        return "-"
    first, last = per_epoch[epochs[0]][0], per_epoch[epochs[-1]][0]
    if first * last < 0:
        return "reverses"
    return "grows" if abs(last) > abs(first) else "fades"


def cell(mean: float, half_width: float) -> str:
    return f"{mean:+.2f}" if half_width != half_width else f"{mean:+.2f} +- {half_width:.2f}"


def section(title: str, found: dict[str, dict[int, tuple[float, float, int]]]) -> list[str]:
    epochs = sorted({e for per_epoch in found.values() for e in per_epoch})
    lines = [f"### {title}", "", "| arm | seeds | " + " | ".join(f"epoch {e}" for e in epochs) + " | trend |",
             "|---|---|" + "---|" * len(epochs) + "---|"]
    order = list(ARM_NAMES)
    for arm, per_epoch in sorted(found.items(), key=lambda item: order.index(item[0]) if item[0] in order else 99):
        seeds = max(n for _, _, n in per_epoch.values())
        cells = [cell(*per_epoch[e][:2]) if e in per_epoch else "-" for e in epochs]
        lines.append(f"| {ARM_NAMES.get(arm, arm)} | {seeds} | " + " | ".join(cells) + f" | {trend(per_epoch)} |")
    return lines + [""]


def tables(sources: dict[str, dict]) -> tuple[list[str], dict[str, dict]]:
    """The page's sections and, per panel title, the differences plotted."""
    lines, panels = [], {}
    for name, runs in sources.items():
        for (stage, lr), arms in sorted(groups(runs).items(), key=lambda item: (item[0][0] != "final", item[0][1])):
            found = differences(arms)
            if not found:
                continue
            title = (f"{name}: final runs, each arm at its chosen lr, paired by seed" if stage == "final" else
                     f"{name}: tuning runs at lr {lr}, seed 0 (one seed: no interval)")
            lines += section(title, found)
            panels[title] = found
    return lines, panels


def page(sources: dict[str, dict]) -> tuple[str, dict[str, dict]]:
    body, panels = tables(sources)
    head = ["# Head width 64: each arm's paired difference from the baseline after every epoch", "",
            "Written by `scripts/epoch_differences.py --write` from the kept archives; the protocol is in",
            "docs/RESULTS.md. Validation accuracy after each epoch, arm minus baseline, in points (95 % t interval",
            "over the seeds paired). Trend: from the first epoch's mean difference to the last's (the script's",
            "docstring). The plot: docs/results/protocol64-epochs.png.", ""]
    return "\n".join(head + body), panels


def plot(panels: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(6 * columns, 4.2 * rows), squeeze=False)
    for axis in axes.flat[len(panels):]:
        axis.set_visible(False)
    order = list(ARM_NAMES)
    colours = {arm: f"C{i}" for i, arm in enumerate(order)}  # one colour per arm in every panel
    for axis, (title, found) in zip(axes.flat, panels.items()):
        for arm, per_epoch in sorted(found.items(), key=lambda item: order.index(item[0]) if item[0] in order else 99):
            epochs = sorted(per_epoch)
            means = [per_epoch[e][0] for e in epochs]
            errors = [0 if per_epoch[e][1] != per_epoch[e][1] else per_epoch[e][1] for e in epochs]
            axis.errorbar(epochs, means, yerr=errors, marker="o", capsize=3, label=ARM_NAMES.get(arm, arm),
                          color=colours.get(arm, "black"))
        axis.axhline(0, color="grey", linewidth=0.8)
        axis.set(xlabel="epoch", ylabel="validation accuracy minus baseline, points", title=title)
        axis.title.set_fontsize(8)
        axis.xaxis.get_major_locator().set_params(integer=True)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def kept_sources() -> dict[str, dict]:
    return {archive.parent.name: kept_runs(archive.parent / "kept")
            for archive in sorted(RESULTS.glob("protocol64-*/kept.tar.xz"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {PAGE.relative_to(ROOT)} and its plot")
    parser.add_argument("--runs", type=Path, action="append", default=[], help="also read this live runs folder")
    args = parser.parse_args(argv)
    if args.write and args.runs:
        parser.error("--write publishes the kept archives only; leave out --runs")
    sources = kept_sources()
    for folder in args.runs:
        if not folder.is_dir():
            parser.error(f"--runs {folder}: no such folder")
        sources[f"{folder.name} (live)"] = read_runs(folder)
    text, panels = page(sources)
    if args.write:
        PAGE.write_text(text + "\n")
        plot(panels, PLOT)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
