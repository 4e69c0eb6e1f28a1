"""The detection report's figure, detection.png (matplotlib, Agg), one colour per group, read from metrics.jsonl.

(a) the summed Mask R-CNN training loss over steps, one line per seed; (b) box AP and (c) mask AP on the
test scenes, one dot per seed (a cross at 0 for a diverged run) beside the group's mean and 95 % interval.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from speccond.diagnostics.plot import finite_number, save_figure
from speccond.diagnostics.records import read_metrics
from speccond.harness.reporting.stats import mean_interval

FILE = "detection.png"
PANELS = (("box_ap", "(b) box AP", "box AP (IoU 0.50:0.95), %"), ("mask_ap", "(c) mask AP", "mask AP, %"))


def write_detection_plot(groups: Sequence, out: Path) -> str:
    """Write ``out/detection.png`` for the report groups (their included runs); return its file name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (loss_axis, *ap_axes) = plt.subplots(1, 3, figsize=(15, 4.5))
    for index, group in enumerate(groups):
        color = f"C{index % 10}"
        for number, run in enumerate(group.included):
            train = [r for r in read_metrics(run.path / "metrics.jsonl") if r.get("kind") == "train" and finite_number(r.get("loss"))]
            loss_axis.plot([r["step"] for r in train], [r["loss"] for r in train], color=color, alpha=0.7,
                           linewidth=1, label=group.label if number == 0 else None)
        for axis, (figure_name, _, _) in zip(ap_axes, PANELS):
            values = [100 * run.metrics[figure_name] for run in group.included]
            spread = [0.06 * (n - (len(values) - 1) / 2) for n in range(len(values))]  # seeds side by side
            for offset, value, run in zip(spread, values, group.included):
                axis.scatter([index - 0.15 + offset], [value], color=color,
                             marker="x" if run.status == "diverged" else "o")
            interval = mean_interval(values)
            error = interval.half_width if math.isfinite(interval.half_width) else 0.0
            axis.errorbar([index + 0.15], [interval.mean], yerr=[error], color=color, marker="s", capsize=4)
    loss_axis.set(xlabel="training step", ylabel="Mask R-CNN loss (sum of its five terms)", yscale="log",
                  title="(a) training loss, one line per seed")
    loss_axis.legend(fontsize="small")
    for axis, (_, title, label) in zip(ap_axes, PANELS):
        axis.set_xticks(range(len(groups)), [g.label for g in groups], rotation=20, ha="right")
        axis.set_xlim(-0.6, len(groups) - 0.4)
        axis.set(ylabel=label, title=f"{title}: seeds (dots), mean +- 95 % (square)")
    save_figure(figure, out / FILE)
    return FILE
