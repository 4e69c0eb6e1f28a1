"""sweep.png: the report's figure for a sweep, accuracy (and what explains it) against the swept value.

A sweep is a method with two or more groups whose settings differ in exactly one numeric field (lam
in ``--sweep lam=0,1,2,5,10``; lam = 10 against lam = "auto" is no line to draw). The figure has (a) the final test accuracy of every seed and the mean
against the value, with the reference group (the baseline) as a band of its mean +- 95 % interval;
(b) the attention entropy at step 0 (mean over layers, heads and seeds), when the runs were tracked,
next to log N; (c) kappa of the effective W_q, W_k, W_v at the end (mean over layers and seeds).
The x axis is symmetric-log when a value is 0, so lam = 0, 1, 2, ..., 50 read evenly.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional, Sequence

from speccond.diagnostics.entropy import uniform_reference
from speccond.diagnostics.plot import finite_number, save_figure
from speccond.diagnostics.records import read_metrics
from speccond.harness.reporting.stats import mean_interval

FILE = "sweep.png"


def swept_field(groups: Sequence) -> Optional[tuple[str, list]]:
    """(method, field) of the one sweep among ``groups`` with the most groups, or None when there is none."""
    best = None
    for method in dict.fromkeys(g.method for g in groups):
        mine = [g for g in groups if g.method == method]
        if len(mine) < 2:
            continue
        differing = {f for g in mine for f, v in g.settings.items() if v != mine[0].settings.get(f)}
        if len(differing) == 1:
            field = differing.pop()
            if all(isinstance(g.settings[field], (int, float)) for g in mine) and (best is None or len(mine) > len(best[1])):
                best = (field, mine)
    return best


def write_sweep_plot(groups: Sequence, reference, out: Path) -> Optional[str]:
    """Write sweep.png for the sweep among ``groups`` (see the module docstring); its name, or None."""
    found = swept_field(groups)
    if found is None:
        return None
    field, mine = found
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mine = sorted(mine, key=lambda g: g.settings[field])
    values = [g.settings[field] for g in mine]
    rows = {run.path: read_metrics(run.path / "metrics.jsonl") for g in mine for run in g.included}
    entropy = [_mean([_step0_entropy(rows[run.path]) for run in g.included]) for g in mine]
    uniform = uniform_reference([r for found in rows.values() for r in found])
    panels = 3 if any(finite_number(e) for e in entropy) else 2
    figure, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4.2))
    method = mine[0].method
    accuracy_axis, kappa_axis = axes[0], axes[-1]
    for value, group in zip(values, mine):
        accuracy_axis.scatter([value] * len(group.included), [100 * r.accuracy for r in group.included],
                              color="C0", alpha=0.5, s=14)
    means = [mean_interval([r.accuracy for r in g.included]) for g in mine]
    accuracy_axis.errorbar(values, [100 * m.mean for m in means],
                           yerr=[0 if math.isnan(m.half_width) else 100 * m.half_width for m in means],
                           color="C0", marker="o", capsize=3,
                           label=f"{method}: mean +- 95 % interval" if min(m.n for m in means) > 1 else f"{method} (one seed)")
    if reference is not None and reference.method != method and reference.included:
        band = mean_interval([r.accuracy for r in reference.included])
        half = 0 if math.isnan(band.half_width) else band.half_width
        accuracy_axis.axhspan(100 * (band.mean - half), 100 * (band.mean + half), color="grey", alpha=0.25)
        accuracy_axis.axhline(100 * band.mean, color="grey", linestyle="--", label=f"{reference.label}")
    accuracy_axis.set(xlabel=field, ylabel="final test accuracy, %", title=f"(a) accuracy against {field}")
    accuracy_axis.legend(fontsize="small")
    if panels == 3:
        axes[1].plot(values, entropy, color="C1", marker="o", label=f"{method}")
        if uniform is not None:
            axes[1].axhline(uniform, color="grey", linestyle="--", label="uniform attention")
        axes[1].set(xlabel=field, ylabel="attention entropy at step 0, nats", title="(b) attention at initialisation")
        axes[1].legend(fontsize="small")
    kappas = [_mean([r.kappa_qkv for r in g.included if r.status == "finished"]) for g in mine]
    kappa_axis.plot(values, kappas, color="C2", marker="o")
    kappa_axis.set(xlabel=field, ylabel="kappa(W_q,k,v) at the end, mean", yscale="log",
                   title=f"({'c' if panels == 3 else 'b'}) conditioning at the end")
    low, high = min(values), max(values)
    for axis in axes:
        if low <= 0:  # symmetric-log keeps 0 on the axis; no room for negative values nobody swept
            axis.set_xscale("symlog", linthresh=1)
            axis.set_xlim(low - 0.25 * max(1, abs(low)), high * 1.6 if high > 0 else 1)
        else:
            axis.set_xscale("log")
            axis.set_xlim(low / 1.6, high * 1.6)
    save_figure(figure, out / FILE)
    return FILE


def _step0_entropy(rows: list[dict]) -> float:
    """Mean attention entropy over layers and heads at step 0 (nan when not tracked)."""
    return _mean([r["entropy"] for r in rows if r.get("kind") == "entropy" and r.get("step") == 0])


def _mean(values: list) -> float:
    finite = [float(v) for v in values if finite_number(v)]
    return sum(finite) / len(finite) if finite else math.nan
