"""The report's figure, comparison.png (matplotlib, Agg), one colour per group and one line per seed.

Its top row: (a) training loss over steps, (b) validation (or, without a validation split, test)
accuracy after each epoch, left out when the runs have one epoch, (c) final accuracy per seed (a cross
at chance for a diverged run). Its second row, only when some run was tracked: kappa of W_q, W_k, W_v
over training (mean over layers), with, dotted, the largest per-head kappa of the groups whose correction is
sized per head (the figure it bounds), and the attention entropy (mean over layers and heads) when tracked;
there the baseline is dashed and the key of the groups is below the row. Everything is read from each
run's metrics.jsonl.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from speccond.diagnostics.entropy import uniform_reference
from speccond.diagnostics.plot import finite_number, mean_by_step, save_figure
from speccond.diagnostics.records import read_metrics

ROLES = ("q", "k", "v")


def write_plots(groups: Sequence, out: Path, scored: str = "test") -> dict[str, str]:
    """Write comparison.png for report groups; return {file name: what its panels show}, in the words the
    report's "Plots:" line uses. ``scored``: the split the runs' final rows score (report.scored_split)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = {run.path: read_metrics(run.path / "metrics.jsonl") for g in groups for run in g.included}
    tracked = {path: [r for r in found if r.get("kind") in ("spectra", "entropy")] for path, found in rows.items()}
    entropy = any(r["kind"] == "entropy" for found in tracked.values() for r in found)
    if not any(tracked.values()):
        figure = plt.figure(figsize=(16, 4.5), layout="constrained")
        shown = _outcome_row(figure, groups, rows, scored)
    else:  # the second row's key goes below its panels, where it covers no curve
        figure = plt.figure(figsize=(16.8, 9.2 + 0.2 * ((len(groups) + 2) // 3)), layout="constrained")
        top, bottom = figure.subfigures(2, 1, height_ratios=(4.5, 4.7 + 0.2 * ((len(groups) + 2) // 3)))
        shown = _outcome_row(top, groups, rows, scored)
        shown += "; below, " + _conditioning_row(bottom, groups, tracked, entropy)
    save_figure(figure, out / "comparison.png")
    return {"comparison.png": shown}


def _outcome_row(figure, groups: Sequence, rows: dict, scored: str) -> str:
    """(a) loss, (b) accuracy per epoch when there are several, (c) accuracy per seed; what they show."""
    from matplotlib.ticker import MaxNLocator

    # (b) follows the per-epoch rows: validation ("val") rows when the runs hold out a validation split,
    # else the test rows; with one epoch there is one point per run and the panel is left out.
    per_epoch = "val" if any(r.get("kind") == "val" for found in rows.values() for r in found) else "eval"
    epochs = max((sum(r.get("kind") == per_epoch for r in found) for found in rows.values()), default=0)
    if epochs > 1:
        loss_axis, epoch_axis, seed_axis = figure.subplots(1, 3)
    else:
        (loss_axis, seed_axis), epoch_axis = figure.subplots(1, 2), None
    for index, group in enumerate(groups):
        color = f"C{index % 10}"
        for number, run in enumerate(group.included):
            label = group.label if number == 0 else None
            train = [r for r in rows[run.path] if r.get("kind") == "train" and finite_number(r.get("loss"))]
            loss_axis.plot([r["step"] for r in train], [r["loss"] for r in train], color=color, alpha=0.7,
                           marker="o", markersize=2, label=label)
            if epoch_axis is not None:
                evals = [r for r in rows[run.path] if r.get("kind") == per_epoch]
                epoch_axis.plot([r.get("epoch", r["step"]) for r in evals], [100 * r["accuracy"] for r in evals],
                                color=color, alpha=0.7, marker="o", markersize=3, label=label)
            spread = 0.06 * (number - (len(group.included) - 1) / 2)  # seeds side by side
            seed_axis.scatter([index + spread], [100 * run.accuracy], color=color,
                              marker="x" if run.status == "diverged" else "o")
    loss_axis.set(xlabel="training step", ylabel="training loss (cross-entropy)", yscale="log",
                  title="(a) training loss, one line per seed")
    if epoch_axis is not None:
        split = "validation" if per_epoch == "val" else "test"
        epoch_axis.set(xlabel="epoch", ylabel=f"{split} accuracy, %", title=f"(b) {split} accuracy after each epoch")
        epoch_axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    seed_axis.set_xticks(range(len(groups)), [g.label for g in groups], rotation=20, ha="right")
    seed_axis.set(ylabel=f"final {scored} accuracy, %",
                  title=f"({'c' if epoch_axis is not None else 'b'}) one dot per seed (x: diverged, at chance)")
    loss_axis.legend(fontsize="small")
    per_epoch_text = f"{'validation' if per_epoch == 'val' else 'test'} accuracy per epoch, " if epoch_axis else ""
    return f"training loss, {per_epoch_text}accuracy per seed"


def _conditioning_row(figure, groups: Sequence, tracked: dict, entropy: bool) -> str:
    """kappa of W_q, W_k, W_v over training, and attention entropy when tracked; what they show."""
    axes = figure.subplots(1, 3 + entropy)
    per_head = False
    for index, group in enumerate(groups):
        # The baseline dashed and on top: a group with the same curves (lam = 0) no longer hides it.
        style = dict(color=f"C{index % 10}", alpha=0.7, marker="o", markersize=2, linestyle="-", zorder=2)
        if group.method == "baseline":
            style.update(linestyle="--", linewidth=2, zorder=3)
        for number, run in enumerate(group.included):
            label = group.label if number == 0 else None
            spectra = [r for r in tracked[run.path] if r["kind"] == "spectra" and r.get("head") is None]
            bounded = run.kappa_per_head and any(finite_number(r.get("head_kappa_max")) for r in spectra)
            for axis, role in zip(axes, ROLES):
                axis.plot(*mean_by_step(spectra, "kappa", projection=role), label=label, **style)
                if bounded:
                    axis.plot(*largest_by_step(spectra, "head_kappa_max", role), **dict(style, linestyle=":"))
            per_head = per_head or bounded
            if entropy:
                rows_ = [r for r in tracked[run.path] if r["kind"] == "entropy"]
                axes[3].plot(*mean_by_step(rows_, "entropy"), **style)
    for axis, role in zip(axes, ROLES):
        axis.set(xlabel="training step", ylabel=f"kappa(W_{role}), mean over layers", yscale="log",
                 title=f"effective W_{role.upper()}" + (" (dotted: largest per-head kappa)" if per_head else ""))
    if entropy:
        uniform = uniform_reference([r for found in tracked.values() for r in found])
        if uniform is not None:
            axes[3].axhline(uniform, color="grey", linestyle=":", label="uniform attention")
            axes[3].legend(fontsize="small", loc="best")  # the uniform line only: the groups' key is below
        axes[3].set(xlabel="training step", ylabel="attention entropy, nats (mean over layers, heads)")
    figure.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=3, fontsize="small")
    return ("kappa of W_q, W_k, W_v" + (" and attention entropy" if entropy else "")
            + " over training, mean over layers"
            + (" (dotted: the largest per-head kappa, over layers, of the groups whose correction is sized per head)"
               if per_head else "") + ("" if entropy else
            "; no entropy: the tracker cannot rebuild these models' attention"))


def largest_by_step(rows: list[dict], field: str, role: str) -> tuple[list[int], list[float]]:
    """(steps, the largest ``field`` over the layers of projection ``role`` at each step), finite values only."""
    by_step: dict[int, float] = {}
    for row in rows:
        if row.get("projection") == role and finite_number(row.get(field)):
            step = int(row["step"])
            by_step[step] = max(by_step.get(step, float(row[field])), float(row[field]))
    steps = sorted(by_step)
    return steps, [by_step[step] for step in steps]
