"""The detection comparison's table, rebuilt from run directories alone: ``write_detection_report(folders)``.

``harness/reporting/report.py``'s ``write_report`` hands the runs of the detection task (fashion-scenes) here,
for ``speccond report DIR`` and ``speccond compare --task fashion-scenes`` alike, so both give the same
results.md. Runs are grouped as the classification report groups them (harness/reporting/report.py
``group_runs``: the config without the seed and the parameters the method does not read); statistics
come from harness/reporting/stats.py: per group the mean and 95 % Student-t interval over seeds of box AP,
AP50, AP75 and mask AP (COCO, pycocotools, in %), and the paired-by-seed difference of box AP and mask AP
against the "baseline" group (else the first). detection.png (harness/tasks/detection/plots.py) shows the training loss
and the AP of every seed. A diverged run counts with AP 0 (its detector outputs
NaN), the analogue of chance accuracy in the classification report; unfinished runs are left out.
"""
from __future__ import annotations

import json
import logging
import math
import os
import dataclasses
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from speccond.diagnostics.records import read_metrics
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.reporting import explain
from speccond.harness.reporting.groups import Group, default_out, group_runs
from speccond.harness.reporting.numbers import METRIC_NAMES as NAMES, duration, percent, signed_percent, time_unit
from speccond.harness.reporting.stats import Interval, mean_interval, paired_difference
from speccond.harness.tasks.detection.plots import FILE as PLOT, write_detection_plot
from speccond.harness.training.recipe import ADAPTED_WARMUP
from speccond.harness.training.runs import find_runs
from speccond.harness.training.timing import recorded_seconds
from speccond.harness.values import show_value

log = logging.getLogger(__name__)
FIGURES = ("box_ap", "box_ap50", "box_ap75", "mask_ap")  # the table's columns, as the paper reports them
PAIRED = ("box_ap", "mask_ap")  # paired differences against the reference


@dataclass(frozen=True)
class DetectionRun:
    path: Path
    config: TrainConfig
    command: tuple[str, ...]
    status: str  # "finished", "diverged" or "unfinished"
    step: int  # finished: the final step; diverged: the step whose loss was not finite; else the last row's
    total_steps: Optional[int]
    metrics: Optional[dict]  # the final test row's COCO figures (fractions); all 0 when diverged; None unfinished
    seconds: Optional[float]  # training wall time from timing.json (None: not recorded, or incomplete)
    warmup: dict = dataclasses.field(default_factory=dict)  # config.json's adapted warm-up (recipe.adapted_warmup)

    @property
    def seed(self) -> int:
        return self.config.run.seed


def read_detection_run(run_dir: str | Path) -> DetectionRun:
    run_dir = Path(run_dir)
    record = json.loads((run_dir / "config.json").read_text())
    config = TrainConfig.from_record(record)
    rows = read_metrics(run_dir / "metrics.jsonl")
    total = next((int(r["total_steps"]) for r in reversed(rows) if r.get("total_steps") is not None), None)
    diverged = next((r for r in rows if r.get("kind") == "diverged"), None)
    final = next((r for r in reversed(rows) if r.get("kind") == "eval" and r.get("step") == r.get("total_steps")), None)
    if diverged is not None:
        status, step, metrics = "diverged", int(diverged["step"]), {name: 0.0 for name in FIGURES}
    elif final is not None:
        status, step, metrics = "finished", int(final["step"]), {k: v for k, v in final.items() if k.startswith(("box_", "mask_"))}
    else:
        status, step, metrics = "unfinished", max((int(r.get("step", 0)) for r in rows), default=0), None
    seconds = recorded_seconds(run_dir)
    command = record.get("command") or ()
    return DetectionRun(run_dir, config, (command,) if isinstance(command, str) else tuple(map(str, command)),
                        status, step, total, metrics, seconds, record.get(ADAPTED_WARMUP) or {})


@dataclass(frozen=True)
class DetectionReport:
    out: Path
    command: str
    reference: Optional[str]
    groups: list[Group]
    markdown: str
    summary: list[dict]  # per tabled group: label, seeds, diverged, figures (Interval), differences (Interval)

    @property
    def plots(self) -> list[str]:
        """File names of the plots written under ``out``."""
        return [PLOT] if self.summary else []


def write_detection_report(folders: Sequence[str | Path], out: Optional[str | Path] = None) -> DetectionReport:
    """Read every detection run under ``folders``; write results.md and results.json to ``out``."""
    folders = [Path(f) for f in folders]
    out = default_out(folders) if out is None else Path(out)
    words = ["speccond", "report", *map(str, folders)] + ([] if out == default_out(folders) else ["--out", str(out)])
    groups = group_runs([read_detection_run(path) for path in find_runs(folders)])
    tabled = [g for g in groups if g.included]
    reference = next((g for g in tabled if g.method == "baseline"), tabled[0] if tabled else None)
    summary = [_summarize(g, reference) for g in tabled]
    report = DetectionReport(out, shlex.join(words), reference.label if reference else None, groups, "", summary)
    markdown = _markdown(report)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(markdown)
    (out / "results.json").write_text(json.dumps(_json(report), indent=2) + "\n")
    if tabled:
        write_detection_plot(tabled, out)
    return DetectionReport(out, report.command, report.reference, groups, markdown, summary)


def _summarize(group: Group, reference: Group) -> dict:
    runs = group.included
    figures = {name: mean_interval([r.metrics[name] for r in runs]) for name in FIGURES}
    differences, common = {}, 0
    if group is not reference:
        theirs = {r.seed: r.metrics for r in reference.included}
        paired = [(r.metrics, theirs[r.seed]) for r in runs if r.seed in theirs]
        common = len(paired)
        if paired:
            differences = {name: paired_difference([a[name] for a, _ in paired], [b[name] for _, b in paired])
                           for name in PAIRED}
    timed = [r.seconds for r in runs if r.seconds is not None]
    return {"label": group.label, "method": group.method, "is_reference": group is reference,
            "seeds": [r.seed for r in runs], "diverged": sum(r.status == "diverged" for r in runs),
            "figures": figures, "differences": differences, "difference_seeds": common,
            "seconds": sum(timed) / len(timed) if timed else None}


def _markdown(report: DetectionReport) -> str:
    runs = [r for g in report.groups for r in g.runs]
    shared = {k: v for k, v in runs[0].config.to_dict().items() if all(r.config.to_dict()[k] == v for r in runs)} if runs else {}
    trunk = {"xcit-maskrcnn": "timm XCiT", "vit-maskrcnn": "timm ViT"}.get(shared.get("model"), "several trunks")
    sizes = ", ".join(f"{label} {shared.get(field, '(varies)')}" for field, label in
                      (("embed_dim", "width"), ("depth", "depth"), ("num_heads", "heads"), ("patch_size", "patch")))
    lines = [f"# speccond detection report: {shared.get('task', 'several tasks')}, Mask R-CNN on {trunk} ({sizes})", "",
             f"Regenerate this report from the run directories (no training): `{report.command}`", ""]
    setting = lambda f: show_value(shared[f]) if f in shared else "(varies)"  # noqa: E731
    optimizer, decay = explain.schedule_text(shared)
    others = explain.other_settings(shared)
    lines += [
        f"- Training: {setting('epochs')} epoch(s) on {'all' if setting('train_size') == '0' else setting('train_size')} "
        f"training scenes, batch {setting('batch_size')}, {optimizer} lr {setting('lr')}, weight decay "
        f"{setting('weight_decay')}, {explain.warmup_text(runs, setting('warmup_steps'))} then {decay}, gradient clip "
        f"{setting('grad_clip')}. Evaluation: {'all' if setting('test_size') == '0' else 'the first ' + setting('test_size')} "
        "test scenes (their source items are disjoint from the training ones)."
        + (f" Other settings that differ from the defaults: {', '.join(others)}." if others else ""),
        "- COCO metrics by pycocotools (harness/tasks/detection/metrics.py), in %: box AP (IoU 0.50:0.95), AP50, AP75 and mask AP, "
        "maxDets 100. Mean +- 95 % t interval over seeds; differences paired by seed against "
        + (f"`{report.reference}`" if report.reference is not None else "the reference group, once one has finished")
        + ". Diverged runs count with AP 0; unfinished runs are left out.",
        "",
    ]
    summary_unit = time_unit(s["seconds"] for s in report.summary or [])  # one unit per column
    if report.summary:
        header = ["method", "seeds", "diverged", *(f"{NAMES[n]}, %" for n in FIGURES),
                  *(f"{NAMES[n]} difference, %" for n in PAIRED), "wall time per run"]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for s in report.summary:
            differences = ["- (reference)" if s["is_reference"] else
                           (signed_percent(s["differences"][n]) if s["differences"] else "- (no seed in common)")
                           for n in PAIRED]
            cells = [s["label"], str(len(s["seeds"])), f"{s['diverged']}/{len(s['seeds'])}",
                     *(percent(s["figures"][n]) for n in FIGURES), *differences, duration(s["seconds"], summary_unit)]
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", f"![training loss, box AP and mask AP per seed]({PLOT})"]
    else:
        lines.append("No run has finished or diverged yet: nothing to summarise.")
    per_run = [*FIGURES, "mask_ap50"]
    run_unit = time_unit(r.seconds for g in report.groups for r in g.runs if r.status != "unfinished")
    lines += ["", "## Runs", "", "| method | seed | status | " + " | ".join(f"{NAMES[n]}, %" for n in per_run)
              + " | wall time | run directory |", "|" + "---|" * (len(per_run) + 5)]
    for group in report.groups:
        for r in group.runs:
            if r.status == "unfinished":
                continue
            status = "finished" if r.status == "finished" else f"diverged at step {r.step} of {r.total_steps} (AP counted 0)"
            figures = [f"{100 * r.metrics.get(n, 0.0):.2f}" for n in per_run]
            lines.append(f"| {group.label} | {r.seed} | {status} | " + " | ".join(figures)
                         + f" | {duration(r.seconds, run_unit)} | `{os.path.relpath(r.path, report.out)}` |")
    unfinished = [(g, r) for g in report.groups for r in g.runs if r.status == "unfinished"]
    if unfinished:
        lines += ["", "## Unfinished runs (excluded from all statistics)", ""]
        lines += [f"- `{r.path}`: {g.label}, seed {r.seed}, last row at step {r.step} of {r.total_steps or '?'}; "
                  "rerun its compare command to resume it, then regenerate this report." for g, r in unfinished]
    lines += ["", "## Commands that made the runs (config.json)", ""]
    for group in report.groups:
        commands = list(dict.fromkeys(shlex.join(r.command) for r in group.runs if r.command))
        lines.append(f"- {group.label}: " + ("; ".join(f"`{c}`" for c in commands) or "(not recorded)"))
    return "\n".join(lines) + "\n"


def _json(report: DetectionReport) -> dict:
    def interval(value: Interval) -> dict:
        return {"mean": value.mean, "half_width": None if math.isnan(value.half_width) else value.half_width, "n": value.n}

    return {
        "command": report.command, "reference": report.reference, "ap_of_diverged_runs": 0.0,
        "groups": [{**{k: v for k, v in s.items() if k not in ("figures", "differences")},
                    "figures": {n: interval(v) for n, v in s["figures"].items()},
                    "differences": {n: interval(v) for n, v in s["differences"].items()}} for s in report.summary],
        "runs": [{"group": g.label, "method": r.config.method.name, "seed": r.seed, "status": r.status, "step": r.step,
                  "total_steps": r.total_steps, "metrics": r.metrics, "seconds": r.seconds,
                  "path": os.path.relpath(r.path, report.out)} for g in report.groups for r in g.runs],
    }
