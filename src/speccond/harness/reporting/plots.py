"""The report's figures (matplotlib, Agg), one colour per group and one line per seed.

comparison.png: (a) training loss over steps, (b) validation (or, without a validation split, test)
accuracy after each epoch, left out when the runs have one epoch, (c) final accuracy per seed (a cross
at chance for a diverged run). kappa.png, only when some run was tracked: kappa of W_q,
W_k, W_v over training (mean over layers), and the attention entropy (mean over layers and heads) when
tracked; the baseline is dashed, and the key of the groups is in the W_q panel. Everything is read from
each run's metrics.jsonl.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from speccond.diagnostics.entropy import uniform_reference
from speccond.diagnostics.plot import finite_number, mean_by_step, save_figure
from speccond.diagnostics.records import read_metrics

ROLES = ("q", "k", "v")


def write_plots(groups: Sequence, out: Path, scored: str = "test") -> dict[str, str]:
    """Write comparison.png (and kappa.png when tracked) for report groups; return {file name: what its
    panels show}, in the words the report's "Plots:" line uses. ``scored``: the split the runs' final rows
    score (report.scored_split)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows = {run.path: read_metrics(run.path / "metrics.jsonl") for g in groups for run in g.included}
    written = {}
    # (b) follows the per-epoch rows: validation ("val") rows when the runs hold out a validation split,
    # else the test rows; with one epoch there is one point per run and the panel is left out.
    per_epoch = "val" if any(r.get("kind") == "val" for found in rows.values() for r in found) else "eval"
    epochs = max((sum(r.get("kind") == per_epoch for r in found) for found in rows.values()), default=0)
    if epochs > 1:
        figure, (loss_axis, epoch_axis, seed_axis) = plt.subplots(1, 3, figsize=(16, 4.5))
    else:
        (figure, (loss_axis, seed_axis)), epoch_axis = plt.subplots(1, 2, figsize=(11, 4.5)), None
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
    save_figure(figure, out / "comparison.png")
    per_epoch_text = f"{'validation' if per_epoch == 'val' else 'test'} accuracy per epoch, " if epoch_axis else ""
    written["comparison.png"] = f"training loss, {per_epoch_text}accuracy per seed"

    tracked = {path: [r for r in found if r.get("kind") in ("spectra", "entropy")] for path, found in rows.items()}
    if not any(tracked.values()):
        return written
    entropy = any(r["kind"] == "entropy" for found in tracked.values() for r in found)
    # The groups' key goes below the panels, where it covers no curve.
    figure, axes = plt.subplots(1, 3 + entropy, figsize=(4.2 * (3 + entropy), 4.4 + 0.2 * ((len(groups) + 2) // 3)),
                                layout="constrained")
    for index, group in enumerate(groups):
        # The baseline dashed and on top: a group with the same curves (lam = 0) no longer hides it.
        style = dict(color=f"C{index % 10}", alpha=0.7, marker="o", markersize=2, linestyle="-", zorder=2)
        if group.method == "baseline":
            style.update(linestyle="--", linewidth=2, zorder=3)
        for number, run in enumerate(group.included):
            label = group.label if number == 0 else None
            spectra = [r for r in tracked[run.path] if r["kind"] == "spectra" and r.get("head") is None]
            for axis, role in zip(axes, ROLES):
                axis.plot(*mean_by_step(spectra, "kappa", projection=role), label=label, **style)
            if entropy:
                rows_ = [r for r in tracked[run.path] if r["kind"] == "entropy"]
                axes[3].plot(*mean_by_step(rows_, "entropy"), **style)
    for axis, role in zip(axes, ROLES):
        axis.set(xlabel="training step", ylabel=f"kappa(W_{role}), mean over layers", yscale="log",
                 title=f"effective W_{role.upper()}")
    if entropy:
        uniform = uniform_reference([r for found in tracked.values() for r in found])
        if uniform is not None:
            axes[3].axhline(uniform, color="grey", linestyle=":", label="uniform attention")
            axes[3].legend(fontsize="small", loc="best")  # the uniform line only: the groups' key is below
        axes[3].set(xlabel="training step", ylabel="attention entropy, nats (mean over layers, heads)")
    figure.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=3, fontsize="small")
    save_figure(figure, out / "kappa.png")
    written["kappa.png"] = ("kappa of W_q, W_k, W_v" + (" and attention entropy" if entropy else "")
                            + " over training, mean over layers" + ("" if entropy else
                            "; no entropy: the tracker cannot rebuild these models' attention"))
    return written
