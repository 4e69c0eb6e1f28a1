"""The report's figures (matplotlib, Agg), one colour per group and one line per seed.

comparison.png: (a) training loss over steps, (b) test accuracy after each epoch, (c) final accuracy per
seed (a cross at chance for a diverged run). kappa.png, only when some run was tracked: kappa of W_q,
W_k, W_v over training (mean over layers), and the attention entropy (mean over layers and heads) when
tracked. Everything is read from each run's metrics.jsonl.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from speccond.diagnostics.entropy import uniform_reference
from speccond.diagnostics.plot import finite_number, mean_by_step, save_figure
from speccond.diagnostics.records import read_metrics

ROLES = ("q", "k", "v")


def write_plots(groups: Sequence, out: Path) -> list[str]:
    """Write comparison.png (and kappa.png when tracked) for report groups; return the file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows = {run.path: read_metrics(run.path / "metrics.jsonl") for g in groups for run in g.included}
    written = ["comparison.png"]
    figure, (loss_axis, epoch_axis, seed_axis) = plt.subplots(1, 3, figsize=(16, 4.5))
    for index, group in enumerate(groups):
        color = f"C{index % 10}"
        for number, run in enumerate(group.included):
            label = group.label if number == 0 else None
            train = [r for r in rows[run.path] if r.get("kind") == "train" and finite_number(r.get("loss"))]
            loss_axis.plot([r["step"] for r in train], [r["loss"] for r in train], color=color, alpha=0.7,
                           marker="o", markersize=2, label=label)
            evals = [r for r in rows[run.path] if r.get("kind") == "eval"]
            epoch_axis.plot([r.get("epoch", r["step"]) for r in evals], [100 * r["accuracy"] for r in evals],
                            color=color, alpha=0.7, marker="o", markersize=3, label=label)
            spread = 0.06 * (number - (len(group.included) - 1) / 2)  # seeds side by side
            seed_axis.scatter([index + spread], [100 * run.accuracy], color=color,
                              marker="x" if run.status == "diverged" else "o")
    loss_axis.set(xlabel="training step", ylabel="training loss (cross-entropy)", yscale="log",
                  title="(a) training loss, one line per seed")
    epoch_axis.set(xlabel="epoch", ylabel="test accuracy, %", title="(b) test accuracy after each epoch")
    epoch_axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    seed_axis.set_xticks(range(len(groups)), [g.label for g in groups], rotation=20, ha="right")
    seed_axis.set(ylabel="final test accuracy, %", title="(c) one dot per seed (x: diverged, at chance)")
    loss_axis.legend(fontsize="small")
    save_figure(figure, out / "comparison.png")

    tracked = {path: [r for r in found if r.get("kind") in ("spectra", "entropy")] for path, found in rows.items()}
    if not any(tracked.values()):
        return written
    entropy = any(r["kind"] == "entropy" for found in tracked.values() for r in found)
    figure, axes = plt.subplots(1, 3 + entropy, figsize=(4.2 * (3 + entropy), 4))
    for index, group in enumerate(groups):
        for number, run in enumerate(group.included):
            label = group.label if number == 0 else None
            spectra = [r for r in tracked[run.path] if r["kind"] == "spectra" and r.get("head") is None]
            for axis, role in zip(axes, ROLES):
                axis.plot(*mean_by_step(spectra, "kappa", projection=role), color=f"C{index % 10}", alpha=0.7,
                          marker="o", markersize=2, label=label)
            if entropy:
                rows_ = [r for r in tracked[run.path] if r["kind"] == "entropy"]
                axes[3].plot(*mean_by_step(rows_, "entropy"), color=f"C{index % 10}", alpha=0.7, marker="o",
                             markersize=2, label=label)
    for axis, role in zip(axes, ROLES):
        axis.set(xlabel="training step", ylabel=f"kappa(W_{role}), mean over layers", yscale="log",
                 title=f"effective W_{role.upper()}")
    if entropy:
        uniform = uniform_reference([r for found in tracked.values() for r in found])
        if uniform is not None:
            axes[3].axhline(uniform, color="grey", linestyle="--", label="uniform attention")
            axes[3].legend(fontsize="small")
        axes[3].set(xlabel="training step", ylabel="attention entropy, nats (mean over layers, heads)")
    axes[0].legend(fontsize="small")
    save_figure(figure, out / "kappa.png")
    return written + ["kappa.png"]
