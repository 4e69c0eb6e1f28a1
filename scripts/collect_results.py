"""Rebuild each comparison's report and collect them under docs/results/, with one summary table.

    .venv/bin/python scripts/collect_results.py runs/fashion-mnist-full runs/cifar10-vit ... [--docs docs/results]
        [--summary summary.md]

For every folder: ``speccond report FOLDER`` (no training), then results.md, results.json and the plots
are copied to ``<docs>/<folder name>/`` (a folder of detection runs: its own box / mask AP report and
detection.png, with no summary row); ``NAME=F1,F2`` reports the runs of several folders together
(an ablation beside the baseline it is measured against) straight into ``<docs>/NAME/``. The summary (printed, and written to ``<docs>/<summary>``)
has one row per (folder, method): accuracy with its 95 % interval, the paired difference from the
baseline, kappa at the end, diverged runs, wall time per run, next to the paper's row for it (docs/THEORY.md
section 4): ImageNet-1k top-1 for the model family on an image task, the LRA task's accuracy for an
lra-* task (the Text and Retrieval rows are analogues here: bytes of other offline texts). Rows of
reports not named on the command line stay as they are in the summary.
"""
from __future__ import annotations

import argparse
import re
import json
import shutil
from pathlib import Path

from speccond.harness import shared_reading, write_report

# ImageNet-1k top-1, baseline -> spectral conditioning, as the paper reports (docs/THEORY.md section 4).
PAPER_IMAGENET = {
    "vit": "ViT-B 80.7 -> 81.7 (+1.0)",
    "deit": "DeiT-B 81.6 -> 82.6 (+1.0)",
    "swin": "Swin-B 83.4 -> 84.1 (+0.7)",
    "xcit": "XCiT-M 82.6 -> 83.5 (+0.9)",
    "davit": "DaViT-B 84.3 -> 84.9 (+0.6)",
}
# Long Range Arena accuracy with a Nystromformer, five trials (docs/THEORY.md section 4).
PAPER_LRA = {
    "lra-listops": "ListOps 37.1 -> 37.8 (+0.7)",
    "lra-text": "Text 63.8 -> 64.8 (+1.0); ours is an analogue",
    "lra-retrieval": "Retrieval 79.8 -> 80.6 (+0.8); ours is an analogue",
    "lra-image": "Image 39.9 -> 40.2 (+0.3)",
    "lra-pathfinder": "Pathfinder 72.9 -> 73.7 (+0.8)",
}


def paper_row(settings: dict) -> str:
    """The paper's baseline -> spectral figure for the task (and model) of ``settings``, or "-"."""
    task = settings["task"]
    for name, row in PAPER_LRA.items():
        if task == name or task.startswith(name + "-"):  # lra-listops-full reads as lra-listops
            return row
    return PAPER_IMAGENET.get(settings["model"], "-")


def _pct(interval: dict | None, signed: bool = False) -> str:
    if not interval:
        return "-"
    mean, half = 100 * interval["mean"], 100 * interval["half_width"]
    sign = "+" if signed and mean >= 0 else ""
    return f"{sign}{mean:.1f} +- {half:.1f}" if interval["n"] > 1 else f"{sign}{mean:.1f} (n=1)"


def summarise(argument: str, docs: Path) -> list[str]:
    """Report one comparison folder (its report is rewritten there, then copied), or NAME=F1,F2,... (the runs
    of several folders in one report, written straight to <docs>/NAME); return the summary rows."""
    name, joined, paths = argument.partition("=")
    if joined:
        folders = [Path(p) for p in paths.split(",") if p]
        target = docs / name
        write_report(folders, target)
    elif shared_reading([argument]) == "scenes":  # its own table (box and mask AP), copied as it is; no summary row
        folder, target = Path(argument), docs / Path(argument).name
        target.mkdir(parents=True, exist_ok=True)
        report = write_report([folder], folder)
        for file in ("results.md", "results.json", *report.plots):
            shutil.copyfile(folder / file, target / file)
        return []
    else:
        folder = Path(argument)
        target = docs / folder.name
        target.mkdir(parents=True, exist_ok=True)
        report = write_report([folder], folder)
        for file in ("results.md", "results.json", *report.plots):
            shutil.copyfile(folder / file, target / file)
    folder = target
    results = json.loads((target / "results.json").read_text())
    rows = []
    for group in results["groups"]:
        settings = group["settings"]
        paper = paper_row(settings) if group["method"] == "spectral" else ""
        minutes = f"{group['seconds'] / 60:.1f}" if group.get("seconds") else "-"
        value = group.get("kappa_qkv")
        kappa = "-" if value is None else value if isinstance(value, str) else f"{value:.3g}"  # "inf" is a string
        rows.append(
            f"| {settings['task']} | {settings['model']} | {group['label']} | {len(group['seeds'])} | "
            f"{_pct(group['accuracy'])} | {_pct(group['difference'], signed=True)} | {kappa} | {group['diverged']} | "
            f"{minutes} | {paper} | [{folder.name}]({folder.name}/results.md) |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="comparison folders, or NAME=FOLDER,FOLDER,... for one joint report")
    parser.add_argument("--docs", type=Path, default=Path("docs/results"))
    parser.add_argument("--summary", default="summary.md", help="file name of the summary table under --docs")
    args = parser.parse_args()
    lines = [
        "| task | model | method | seeds | test accuracy, % | difference vs baseline, points | kappa(W_q,k,v) at end "
        "| diverged | minutes per run | paper (ImageNet-1k top-1, or LRA accuracy) | report |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rebuilt = {_name(folder): summarise(folder, args.docs) for folder in args.folders}
    lines += merged_rows(args.docs / args.summary, rebuilt)
    text = "\n".join(lines) + "\n"
    args.docs.mkdir(parents=True, exist_ok=True)
    (args.docs / args.summary).write_text(text)
    print(text)


def _name(folder: str) -> str:
    """The report folder's name under --docs: NAME of NAME=F1,F2, else the folder's own name."""
    return folder.split("=", 1)[0] if "=" in folder else Path(folder).name


def merged_rows(summary: Path, rebuilt: dict[str, list[str]]) -> list[str]:
    """The summary's rows with those of the rebuilt reports replaced where they stood (new ones last):
    rebuilding one report never drops the rows of the others."""
    out, placed = [], set()
    existing = summary.read_text().splitlines()[2:] if summary.is_file() else []
    for row in existing:
        link = re.search(r"\[([^\]]+)\]\(\1/results\.md\)", row)
        name = link.group(1) if link else None
        if name in rebuilt:
            if name not in placed:
                out += rebuilt[name]
                placed.add(name)
            continue
        out.append(row)
    for name, rows in rebuilt.items():
        if name not in placed:
            out += rows
    return out


if __name__ == "__main__":
    main()
