"""The language experiment's table, laid out as the paper's GLUE table: a column per task, the average.

    speccond report --glue runs/glue-sst2 runs/glue-cola runs/glue-mrpc runs/glue-rte [runs/mlm]
    table = glue_table(["runs/glue-sst2", ...], out="report")   # -> report/glue.md

Each folder is one ``speccond compare`` of one task (``<method>/seed-<k>/`` runs). Its runs are read and
grouped as ``speccond report`` groups them (report.group_runs: by config without the seed, labelled by
method and parameters), and a row of the table is a group label found in every folder. A cell is the task's
GLUE score on the split it was scored on (GLUE's dev), mean +- 95 % t interval over seeds: the mean of the
figures its task declares (registry.Task.metrics): accuracy for SST-2 and RTE, Matthews correlation for CoLA,
the mean of accuracy and F1 for MRPC, as GLUE scores them (diverged runs count at chance: accuracy
1 / classes, MCC 0, F1 0; unfinished runs are left out, as in ``speccond report``). The average is taken per
seed over the glue-* tasks, for the seeds a method finished in all of them, then summarised the same way.
Below each method, its paired difference from the baseline, "<method> - baseline (paired)" (by seed; on the
average, the per-seed averages are paired). An mlm folder adds a column of masked-token accuracy on
held-out text, outside the average. A row gives each glue-* task's majority-class score on the examples the
runs were scored on (a model that always predicts the most common class: its accuracy; MCC 0).

Beside them, the paper's Crammed BERT rows (docs/THEORY.md section 4): SST-2 and CoLA; it reports no MRPC or
RTE number, and its average is over all of GLUE.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional, Sequence

import torch

from speccond.data.glue import TASKS as GLUE_TASKS
from speccond.harness.reporting.groups import Group, group_runs
from speccond.harness.reporting.numbers import METRIC_NAMES, percent, signed_percent
from speccond.harness.reporting.stats import mean_interval, paired_difference
from speccond.harness.tasks import registry
from speccond.harness.tasks.datasets import load_task
from speccond.harness.training.runs import find_runs, read_run

# task -> (the GLUE task it stands for, paper's baseline, paper's spectral); None: the paper gives none.
PAPER = {
    "glue-sst2": ("SST-2", 92.3, 92.7),
    "glue-cola": ("CoLA", 48.9, 51.7),
    "glue-mrpc": None,
    "glue-rte": None,
}
PAPER_AVERAGE = ("GLUE average", 78.6, 79.4)
REFERENCE = "baseline"


def glue_table(folders: Sequence[str | Path], out: Optional[str | Path] = None) -> str:
    """The markdown table of the comparison ``folders`` (one task each); written to ``out/glue.md`` if given."""
    columns: dict[str, dict[str, Group]] = {}
    for folder in folders:
        groups = group_runs([read_run(path) for path in find_runs([folder])])
        tasks = {g.settings["task"] for g in groups}
        if len(tasks) != 1:
            raise ValueError(f"{folder}: expected the runs of one task (one speccond compare), found tasks {sorted(tasks)}")
        task = tasks.pop()
        if task in columns:
            raise ValueError(f"two folders hold task {task!r}; give one comparison folder per task")
        columns[task] = {row_label(g.label): g for g in groups if g.included}
    glue = [t for t in columns if t.startswith("glue-")]
    labels = [label for label in next(iter(columns.values()), {}) if all(label in c for c in columns.values())]
    reference = next((label for label in labels if columns[next(iter(columns))][label].method == REFERENCE), None)
    header = [_task_title(t) for t in columns] + (["average (glue-*)"] if glue else [])
    lines = ["| method | " + " | ".join(header) + " |", "|---" * (len(header) + 1) + "|"]
    for label in labels:
        accuracy = {t: {r.seed: score(r, t) for r in columns[t][label].included} for t in columns}
        cells = [percent(mean_interval(list(accuracy[t].values()))) for t in columns]
        average = _average(accuracy, glue)
        if glue:
            cells.append(percent(mean_interval(list(average.values()))) if average else "- (no seed in all tasks)")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
        if reference is not None and label != reference:
            theirs = {t: {r.seed: score(r, t) for r in columns[t][reference].included} for t in columns}
            diffs = [_difference(accuracy[t], theirs[t]) for t in columns]
            if glue:
                diffs.append(_difference(average, _average(theirs, glue)))
            lines.append(f"| {label} - {reference} (paired) | " + " | ".join(diffs) + " |")
    if labels:
        first = {t: columns[t][labels[0]].included[0].config for t in columns}
        cells = [f"{100 * _majority(first[t], t):.1f}" if t in glue else "-" for t in columns]
        lines.append("| majority class of the test set | " + " | ".join(cells) + (" | - |" if glue else " |"))
    lines += _paper_rows(list(columns), bool(glue))
    text = "\n".join([
        "# GLUE results: " + ", ".join(columns), "",
        "Final score on the scored split (GLUE's dev), %: each task's GLUE score (accuracy; CoLA: Matthews "
        "correlation; MRPC: mean of accuracy and F1), mean +- 95 % t interval over seeds; differences paired by "
        "seed. Regenerate: "
        f"`speccond report --glue {' '.join(map(str, folders))}`", "", *lines, "",
        "Paper: Crammed BERT (110M parameters, GLUE after MLM pre-training, five seeds; docs/THEORY.md section 4). "
        "Its average covers all of GLUE; it gives no MRPC or RTE number.",
    ]) + "\n"
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "glue.md").write_text(text)
    return text


def _task_title(task: str) -> str:
    if task == "mlm":
        return "mlm (masked-token accuracy)"
    if task not in PAPER:
        return task
    named = " + ".join(METRIC_NAMES.get(m, m) for m in registry.task(task).metrics)
    return f"{task} ({GLUE_TASKS[registry.task(task).subset].title}, {named})"


def score(run, task: str) -> float:
    """The run's GLUE score of ``task``: the mean of its task's metrics in the final row (accuracy alone for
    other tasks, mlm included); a diverged run scores chance (accuracy 1 / classes, MCC and F1 0)."""
    metrics = registry.task(task).metrics
    if run.status == "diverged" or metrics == ("accuracy",):
        return sum(run.accuracy if m == "accuracy" else 0.0 for m in metrics) / len(metrics)
    return sum(float(run.last_eval[m]) for m in metrics) / len(metrics)


def row_label(label: str) -> str:
    """A group's label without its ``init_from=...`` (a task's runs start from their own method's pre-training,
    named by a template or a path, so the rows of every task and of the mlm column line up):
    "spectral lam=10 (init_from=runs/mlm/{method}/seed-0)" -> "spectral lam=10"."""
    label = re.sub(r"init_from=[^,)]*(, )?", "", label)
    return re.sub(r" \(\)$", "", label.replace(", )", ")"))


def _majority(config, task: str) -> float:
    """The GLUE score of always predicting the most common class of the task's scored examples (as ``config``
    selects them): accuracy its fraction, MCC 0, F1 of class 1 2p / (1 + p) when class 1 is the most common."""
    labels = load_task(config)["test_y"]  # (M,) int64
    counts = torch.bincount(labels)
    share, common = float(counts.max()) / labels.numel(), int(counts.argmax())
    figures = {"accuracy": share, "mcc": 0.0, "f1": 2 * share / (1 + share) if common == 1 else 0.0}
    metrics = registry.task(task).metrics
    return sum(figures[m] for m in metrics) / len(metrics)


def _average(accuracy: dict[str, dict[int, float]], glue: list[str]) -> dict[int, float]:
    """Per seed that every glue-* task has, the mean accuracy over those tasks."""
    seeds = set.intersection(*(set(accuracy[t]) for t in glue)) if glue else set()
    return {s: sum(accuracy[t][s] for t in glue) / len(glue) for s in sorted(seeds)}


def _difference(ours: dict[int, float], theirs: dict[int, float]) -> str:
    common = sorted(set(ours) & set(theirs))
    if not common:
        return "- (no seed in common)"
    return signed_percent(paired_difference([ours[s] for s in common], [theirs[s] for s in common]))


def _paper_rows(tasks: list[str], average: bool) -> list[str]:
    papers = [PAPER.get(t) for t in tasks] + ([PAPER_AVERAGE] if average else [])
    rows = []
    for index, name in ((1, "paper: Crammed BERT baseline"), (2, "paper: + spectral conditioning")):
        cells = [f"{paper[index]:.1f} ({paper[0]})" if paper else "-" for paper in papers]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    cells = [f"{paper[2] - paper[1]:+.1f}" if paper else "-" for paper in papers]
    return rows + ["| paper: difference | " + " | ".join(cells) + " |"]
