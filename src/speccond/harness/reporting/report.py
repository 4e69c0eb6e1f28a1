"""``speccond report DIR ...``: the comparison table and plots, rebuilt from run directories alone.

    report = write_report(["runs/compare"])      # -> runs/compare/results.md, results.json, *.png

Each DIR is a run directory or a comparison folder (<method>/seed-<k>/ run directories). Runs are read
with :func:`speccond.harness.training.runs.read_run` and grouped by their config without the seed: task, model,
sizes, training settings, method and the method's own parameters (lam, correction for "spectral"; lam
for "shifted-init"); settings that do not change what a run computes (track_every, checkpoint_every)
are ignored. A group is labelled by its method and parameters, plus any other setting that differs
between the groups. The reference for paired differences is the "baseline" group when there is one,
else the first group. ``speccond compare`` writes its report with this same function, so
``speccond report <its folder>`` gives the same results.md byte for byte.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

from speccond.diagnostics.records import json_value
from speccond.harness.reporting import explain
from speccond.harness.reporting.groups import Group, default_out, group_runs
from speccond.harness.reporting.numbers import METRIC_NAMES, duration, percent, signed_percent, time_unit
from speccond.harness.reporting.stats import Interval, mean_interval, paired_difference
from speccond.harness.tasks.datasets import task
from speccond.harness.tasks.plugins import hook
from speccond.harness.training.runs import RunRecord, find_runs, read_run
from speccond.harness.values import show_value

log = logging.getLogger(__name__)

FAMILY_NAMES = {"vit": "ViT", "deit": "DeiT", "swin": "Swin", "xcit": "XCiT", "davit": "DaViT",
                "xcit-noca": "XCiT without class attention"}
VARIES = "(varies)"


@dataclass(frozen=True)
class Summary:
    label: str
    is_reference: bool
    seeds: list[int]  # of the runs in the statistics (finished and diverged)
    diverged: int
    accuracy: Interval  # chance for diverged runs
    difference: Optional[Interval]  # paired with the reference over common seeds; None for the reference
    difference_seeds: int
    loss: Optional[Interval]  # finished runs only
    kappa_qkv: Optional[float]  # finished runs only
    entropy: Optional[Interval]  # attention entropy at the end, nats; finished, tracked runs only
    seconds: Optional[float]  # mean per run, over the runs with a complete timing.json
    head_kappa_max: Optional[float] = None  # the largest per-head kappa over the finished runs (runs.py)
    kappa_per_head: bool = False  # the group's correction is sized per head: it bounds head_kappa_max
    entropy_fraction: Optional[Interval] = None  # entropy / the entropy of uniform attention, per run
    nothing_learnt: Optional[bool] = None  # within noise of the floor (explain.py); None: nothing to judge


@dataclass(frozen=True)
class Report:
    out: Path
    command: str  # regenerates this report
    reference: Optional[str]
    groups: list[Group]
    summaries: list[Summary]
    plots: list[str]  # file names written under out
    markdown: str
    plot_notes: dict = dataclasses.field(default_factory=dict)  # file name -> what its panels show


def write_report(folders: Sequence[str | Path], out: Optional[str | Path] = None) -> Report:
    """Read every run under ``folders``, write results.md, results.json and plots to ``out``; return them.
    Runs of the detection task get its own table (box and mask AP): harness/tasks/detection/report.py."""
    from speccond.harness.reporting import plots as figures, sweep as sweep_figure

    plugin_report = hook(shared_reading(folders), "write_report")  # detection's COCO table (tasks/plugins.py)
    if plugin_report is not None:
        return plugin_report(folders, out)

    folders = [Path(f) for f in folders]
    out = default_out(folders) if out is None else Path(out)
    words = ["speccond", "report", *map(str, folders)] + ([] if out == default_out(folders) else ["--out", str(out)])
    groups = group_runs([read_run(path) for path in find_runs(folders)])
    tabled = [g for g in groups if g.included]
    reference = next((g for g in tabled if g.method == "baseline"), tabled[0] if tabled else None)
    bottom = explain.floor([r for g in tabled for r in g.included], _classes(tabled))
    summaries = [summarize(g, reference, bottom) for g in tabled]
    out.mkdir(parents=True, exist_ok=True)
    described = figures.write_plots(tabled, out, scored_split(groups)) if tabled else {}
    plots = list(described)
    sweep = sweep_figure.write_sweep_plot(tabled, reference, out)
    plots += [sweep] if sweep else []
    for name in ("kappa.png", sweep_figure.FILE):  # kappa.png: an earlier report's second figure, now a row
        stale = out / name
        if name not in plots and stale.is_file():
            stale.unlink()
            log.info("removed %s: this report has nothing to draw there", stale)
    report = Report(out, shlex.join(words), reference.label if reference else None, groups, summaries, plots, "",
                    described)
    report = dataclasses.replace(report, markdown=_markdown(report))
    (out / "results.md").write_text(report.markdown)
    (out / "results.json").write_text(json.dumps(json_value(_json(report)), indent=2) + "\n")
    log.info("report of %d runs in %d groups written to %s", sum(len(g.runs) for g in groups), len(groups), out)
    return report


def summarize(group: Group, reference: Group, bottom: Optional[explain.Floor] = None) -> Summary:
    """The group's row; ``bottom``: the accuracy of learning nothing (explain.floor), None to not judge it."""
    runs = group.included
    finished = [r for r in runs if r.status == "finished"]
    timed = [r.seconds for r in runs if r.seconds is not None]
    difference, common = None, 0
    if group is not reference:
        theirs = {r.seed: r.accuracy for r in reference.included}
        pairs = [(r.accuracy, theirs[r.seed]) for r in runs if r.seed in theirs]
        common = len(pairs)
        if pairs:
            difference = paired_difference([a for a, _ in pairs], [b for _, b in pairs])
    kappas = [r.kappa_qkv for r in finished if r.kappa_qkv is not None]
    entropies = [r.entropy for r in finished if r.entropy is not None]
    fractions = [r.entropy / r.uniform_entropy for r in finished if r.entropy is not None and r.uniform_entropy]
    heads = [r.head_kappa_max for r in finished if r.head_kappa_max is not None]
    return Summary(
        label=group.label,
        is_reference=group is reference,
        seeds=[r.seed for r in runs],
        diverged=sum(r.status == "diverged" for r in runs),
        accuracy=mean_interval([r.accuracy for r in runs]),
        difference=difference,
        difference_seeds=common,
        loss=mean_interval([r.loss for r in finished]) if finished else None,
        kappa_qkv=sum(kappas) / len(kappas) if kappas else None,
        entropy=mean_interval(entropies) if entropies else None,
        seconds=sum(timed) / len(timed) if timed else None,
        head_kappa_max=max(heads) if heads else None,
        kappa_per_head=bool(runs) and all(r.kappa_per_head for r in runs),
        entropy_fraction=mean_interval(fractions) if fractions and len(fractions) == len(entropies) else None,
        nothing_learnt=(explain.within_noise([r.accuracy for r in finished], bottom)
                        if finished and bottom is not None else None),
    )


def _classes(groups: Sequence[Group]) -> Optional[int]:
    """The number of classes of the groups' task (chance is 1 / classes), None when they differ or it is unknown."""
    from speccond.harness.tasks.datasets import task_shape

    tasks = {r.config.data.task for g in groups for r in g.runs}
    try:
        return task_shape(tasks.pop()).classes if len(tasks) == 1 else None
    except (ValueError, KeyError, AttributeError, OSError):
        return None


def shared_reading(folders: Sequence[str | Path]) -> str:
    """How every run under ``folders`` reads its task (datasets.py's readings, "scenes" for detection), by
    their config.json; "" when there is no run, a run's config is unreadable, or the runs differ."""
    try:
        runs = find_runs(folders)
    except ValueError:
        return ""
    readings = {_reading(run) for run in runs}
    return readings.pop() if len(readings) == 1 else ""


def _reading(run_dir: Path) -> str:
    try:
        name = json.loads((Path(run_dir) / "config.json").read_text())["config"].get("task")
        return task(name).reading
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ""


def scored_split(groups: Sequence) -> str:
    """The split the runs' final rows score, in words: "test", or "validation" for tuning runs (speccond tune's
    tuning stage: their final row has split "val" and test is never scored), or both when the runs differ."""
    splits = {"validation" if (run.last_eval or {}).get("split") == "val" else "test"
              for group in groups for run in group.runs if run.status != "unfinished"}
    return " or ".join(sorted(splits, reverse=True)) if splits else "test"


def _markdown(report: Report) -> str:
    runs = [r for g in report.groups for r in g.runs]
    shared = _shared([r.config.to_dict() for r in runs])
    split = scored_split(report.groups)
    lines = [f"# speccond report: {_title(shared)}", "",
             f"Regenerate this report from the run directories (no training): `{report.command}`", ""]
    runs_scored = [r for g in report.groups for r in g.included]
    bounded = [s.label for s in report.summaries if s.kappa_per_head]
    lines += [f"- {line}" for line in _settings(shared, report.reference, split, runs_scored, bounded)]
    lines.append("")
    summary_unit = time_unit(s.seconds for s in report.summaries)  # one unit per column
    run_unit = time_unit(r.seconds for r in runs if r.status != "unfinished")
    judged = [s.nothing_learnt for s in report.summaries]
    if any(judged):
        bottom = explain.floor(runs_scored, _classes([g for g in report.groups if g.included]))
        lines += [explain.nothing_learnt_line(bottom, split, every=all(judged)), ""]
    if report.summaries:
        kappa = ("kappa(W_q,k,v) of the whole block at end | largest per-head kappa at end" if bounded
                 else "kappa(W_q,k,v) at end")
        lines += [
            f"| method | seeds | diverged | accuracy, % | difference vs {report.reference}, % | final {split} loss | "
            f"{kappa} | attention entropy at end, nats (fraction of uniform) | wall time per run |",
            "|---|---|---|---|---|---|---|---|---|" + ("---|" if bounded else ""),
        ]
        lines += [_summary_row(s, summary_unit, bool(bounded)) for s in report.summaries]
        lines += declared_figures(report.groups, shared.get("task", ""), split)
    else:
        lines.append("No run has finished or diverged yet: nothing to summarise.")
    lines += ["", _plots_line(report.plots, report.plot_notes), "", "## Runs", "",
              f"| method | seed | status | accuracy, % | {split} loss | kappa (at step) | wall time | run directory |",
              "|---|---|---|---|---|---|---|---|"]
    lines += [_run_row(g, r, report.out, run_unit) for g in report.groups for r in g.runs if r.status != "unfinished"]
    unfinished = [(g, r) for g in report.groups for r in g.runs if r.status == "unfinished"]
    if unfinished:
        lines += ["", "## Unfinished runs (excluded from all statistics)", ""]
        lines += [
            f"- `{r.path}`: {g.label}, seed {r.seed}, at step {r.step} of {r.total_steps or '?'}; resume it with "
            f"`speccond train --resume {shlex.quote(str(r.path))}` (or rerun its compare), then regenerate this report."
            for g, r in unfinished
        ]
    lines += ["", "## Commands that made the runs (config.json)", ""]
    for group in report.groups:
        commands = list(dict.fromkeys(shlex.join(r.command) for r in group.runs if r.command))
        lines += [f"- {group.label}: " + ("; ".join(f"`{c}`" for c in commands) or "(not recorded)")]
    return "\n".join(lines) + "\n"


def _title(shared: dict) -> str:
    family = shared.get("model")
    model = f"timm {FAMILY_NAMES.get(family, family)}" if family else "several model families"
    last = ("patch_size", "patch {}")
    if family == "nystromformer":
        model, last = f"transformers Nystromformer, {_attention(shared)}", ("landmarks", "{} landmarks")
    sizes = [("embed_dim", "width {}"), ("depth", "depth {}"), ("num_heads", "{} heads"), last]
    if family == "bert":
        start = shared.get("init_from", "(varies)")
        model, sizes = f"transformers BERT, encoder from {start or 'random weights'}", sizes[:3]
    if family and family.startswith(("timm:", "hf:")):  # sized by its own arguments, not by the fields above
        arguments = shared.get("model_args", "(varies)")
        return f"{shared.get('task', 'several tasks')}, {family} ({arguments or 'timm defaults'})"
    size = ", ".join(text.format(shared[f]) if f in shared else text.format("varies") for f, text in sizes)
    return f"{shared.get('task', 'several tasks')}, {model} ({size})"


def _attention(shared: dict) -> str:
    """Which attention the Nystromformer runs compute (sequence.attention_mode): transformers falls back
    to full softmax attention, silently, when the landmarks equal the padded sequence length."""
    from speccond.harness.models.sequence import attention_mode, padded_length
    from speccond.harness.tasks.datasets import task_shape

    if "task" not in shared or "landmarks" not in shared:
        return "attention varies"
    length = padded_length(task_shape(shared["task"]).length, shared["landmarks"])
    if attention_mode(length, shared["landmarks"]) == "full":
        return f"FULL softmax attention (landmarks = sequence length {length}: no Nystrom approximation)"
    return f"Nystrom attention over {length} tokens"


def _example_noun(shared: dict) -> str:
    """What one example of the runs' task is called: images, or examples for token sequences and text."""
    from speccond.harness.tasks.datasets import task_shape

    return "images" if "task" not in shared or task_shape(shared["task"]).kind == "image" else "examples"


def _settings(shared: dict, reference: Optional[str], split: str = "test", runs: Sequence[RunRecord] = (),
              bounded: Sequence[str] = ()) -> list[str]:
    fields = ("epochs", "train_size", "batch_size", "lr", "weight_decay", "warmup_steps", "grad_clip", "test_size")
    value = {f: show_value(shared[f]) if f in shared else VARIES for f in fields}
    unit = _example_noun(shared)
    train = f"all training {unit}" if value["train_size"] == "0" else f"{value['train_size']} training {unit}" + (
        " (a seeded subset)" if value["train_size"] != VARIES else "")
    if value["train_size"] == "0" and shared.get("val_size"):  # the validation split is held out of them
        train = f"the training {unit} left after the {show_value(shared['val_size'])} held out for validation"
    test = f"all test {unit}" if value["test_size"] == "0" else f"the first {value['test_size']} test {unit}"
    if split != "test":  # tuning runs score the validation split they hold out, and never the test split
        held_out = show_value(shared["val_size"]) if "val_size" in shared else VARIES
        test = (f"the {held_out} validation {unit} held out of the training data (tuning runs: test not scored)"
                if split == "validation" else f"{test} for final runs; the held-out validation {unit} for tuning runs")
    note = f" {VARIES}: differs between the groups, given in their labels." if VARIES in value.values() else ""
    optimizer, decay = explain.schedule_text(shared)
    others = explain.other_settings(shared)
    return [
        f"Training: {value['epochs']} epoch(s) on {train}, batch {value['batch_size']}, {optimizer} lr "
        f"{value['lr']}, weight decay {value['weight_decay']}, {explain.warmup_text(runs, value['warmup_steps'])} "
        f"then {decay}, gradient clip {value['grad_clip']} (0 = off). Evaluation: {test}.{note}"
        + (f" Other settings that differ from the defaults: {', '.join(others)}." if others else ""),
        f"Accuracy: final {split} accuracy, mean +- 95 % t interval over seeds (Student t, n - 1 degrees of freedom). "
        + (f"Difference: paired by seed against `{reference}` (over the seeds both groups ran), mean +- 95 % t interval."
         if reference is not None else "Difference: none yet, as no group has a finished or diverged run to pair "
         "with (the reference is the baseline group when there is one, else the first)."),
        "Diverged runs (training loss NaN or inf: training stopped, the last good checkpoint kept) stay in the "
        "table and count with chance accuracy (1 / number of classes) in the accuracy and difference columns, "
        "not with their last evaluation before divergence (which can already be broken; it is listed per run). "
        "They are left out of the loss and kappa columns. Unfinished runs are left out of all statistics.",
        "kappa: condition number of the effective W_q, W_k, W_v blocks (W + C when conditioned), mean over layers "
        "and the three roles, at the final step; read from the tracker's rows when the run was tracked at that "
        "step, else computed from the final checkpoint. " + (explain.head_kappa_note(bounded) + " " if bounded else "")
        + "Wall time: training time per run from timing.json "
        "(written by speccond compare and speccond tune), mean over the runs whose record is complete (a run "
        "killed between two records of its time is left out).",
        "Attention entropy: the tracker's, in nats, mean over layers and heads at the last tracked step of each "
        "finished run, then mean +- 95 % t interval over those runs, and in brackets as a fraction of the entropy of "
        "uniform attention over the same keys (1 = uniform, near 0 = one-hot; comparison.png draws it over training, "
        "with uniform attention as a dotted line); - when the runs were not tracked or the tracker cannot rebuild "
        "the model's attention.",
    ]


def _summary_row(s: Summary, unit: str, per_head_column: bool = False) -> str:
    if s.is_reference:
        difference = "- (reference)"
    elif s.difference is None:
        difference = "- (no seed in common)"
    else:
        some = "" if s.difference_seeds == len(s.seeds) else f" ({s.difference_seeds} seeds)"
        difference = signed_percent(s.difference) + some
    kappa = "-" if s.kappa_qkv is None else f"{s.kappa_qkv:.3g}"
    if per_head_column:
        kappa += " | " + ("-" if s.head_kappa_max is None else f"{s.head_kappa_max:.3g}")
    entropy = "-" if s.entropy is None else str(s.entropy)
    if s.entropy is not None and s.entropy_fraction is not None:
        entropy += f" ({s.entropy_fraction.mean:.2f})"
    accuracy = percent(s.accuracy) + (" (nothing learnt)" if s.nothing_learnt else "")
    return (f"| {s.label} | {len(s.seeds)} | {s.diverged}/{len(s.seeds)} | {accuracy} | {difference} | "
            f"{s.loss if s.loss is not None else '-'} | {kappa} | {entropy} | {duration(s.seconds, unit)} |")


def declared_figures(groups: Sequence[Group], task_name: str, split: str) -> list[str]:
    """A table of the figures the task declares beside accuracy (registry.Task.metrics: Matthews correlation for
    glue-cola, F1 for glue-mrpc), mean +- 95 % t interval over each group's finished and diverged runs (a diverged
    run counts 0, chance for MCC); no lines for a task that declares accuracy alone, or runs of a withdrawn task."""
    try:
        metrics = [m for m in task(task_name).metrics if m != "accuracy"]
    except ValueError:
        return []
    rows = [g for g in groups if g.included]
    if not metrics or not rows:
        return []
    lines = ["", f"Beside accuracy, as GLUE scores {task_name}:", "",
             "| method | seeds | " + " | ".join(f"{METRIC_NAMES.get(m, m)} (final {split}), %" for m in metrics) + " |",
             "|---" * (len(metrics) + 2) + "|"]
    for group in rows:
        values = {m: [0.0 if r.status == "diverged" else float(r.last_eval[m]) for r in group.included] for m in metrics}
        lines.append(f"| {group.label} | {len(group.included)} | "
                     + " | ".join(percent(mean_interval(values[m])) for m in metrics) + " |")
    return lines


def _run_row(group: Group, run: RunRecord, out: Path, unit: str) -> str:
    if run.status == "diverged":
        status = f"diverged at step {run.step} of {run.total_steps or '?'} (loss {run.diverged_loss})"
        last = run.last_eval
        before = "none" if last is None else f"{100 * last['accuracy']:.2f} at epoch {last.get('epoch', '?')}"
        accuracy = f"{100 * run.accuracy:.2f} (chance; last eval before: {before})"
    else:
        status, accuracy = "finished", f"{100 * run.accuracy:.2f}"
    loss = "-" if run.loss is None else f"{run.loss:.4f}"
    kappa = "-" if run.kappa_qkv is None else f"{run.kappa_qkv:.3g} ({run.kappa_step})"
    return (f"| {group.label} | {run.seed} | {status} | {accuracy} | {loss} | {kappa} | {duration(run.seconds, unit)} | "
            f"`{os.path.relpath(run.path, out)}` |")


def _plots_line(plots: list[str], notes: dict[str, str]) -> str:
    if not plots:
        return "Plots: none (no run has finished or diverged)."
    line = f"Plots: comparison.png ({notes['comparison.png']}"
    if "; below, " not in notes["comparison.png"]:
        line += "; no kappa row: no run was tracked (train with track_every > 0 to record kappa over training)"
    line += ")"
    if "sweep.png" in plots:
        line += "; sweep.png (accuracy, entropy at step 0 and kappa at the end against the swept value)"
    return line + "."


def _shared(configs: list[dict]) -> dict:
    """The config fields every run has the same value of."""
    return {k: v for k, v in configs[0].items() if all(c[k] == v for c in configs)} if configs else {}


def _json(report: Report) -> dict:
    return {
        "command": report.command,
        "reference": report.reference,
        "accuracy_of_diverged_runs": "chance (1 / number of classes)",
        "groups": [
            {**asdict(s), "method": g.method, "settings": g.settings,
             "commands": list(dict.fromkeys(shlex.join(r.command) for r in g.runs if r.command))}
            for g, s in zip([g for g in report.groups if g.included], report.summaries)
        ],
        "runs": [
            {"group": g.label, "method": r.config.method.name, "seed": r.seed, "status": r.status, "step": r.step,
             "total_steps": r.total_steps, "accuracy": r.accuracy, "loss": r.loss, "kappa_qkv": r.kappa_qkv,
             "kappa_step": r.kappa_step, "head_kappa_max": r.head_kappa_max, "entropy": r.entropy,
             "uniform_entropy": r.uniform_entropy, "majority": r.majority, "warmup_adapted": r.warmup or None,
             "seconds": r.seconds, "last_eval": r.last_eval,
             "diverged_loss": r.diverged_loss, "path": os.path.relpath(r.path, report.out)}
            for g in report.groups for r in g.runs
        ],
        "plots": report.plots,
    }
