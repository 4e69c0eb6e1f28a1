"""``speccond tune``: issue 17's tuning protocol (docs/RESULTS.md, pre-registered), every arm at its own best lr.

    speccond tune --task fashion-mnist --val-size 6000 --out runs/tune-fashion \
        --arms baseline,spectral,spectral:corrected=q,spectral:target_kappa=2,spectral-svd,qk-norm,sigma-reparam,sigma-reparam-all,spectral-norm

1. Tuning: every arm at every lr (``--lrs``, default 3e-4,1e-3,3e-3) for ``--tuning-seeds`` seeds (0, 1, ...),
   as tuning runs (``tuning=1``: the final row scores the validation split; the test split is never
   scored), into OUT/tune/<arm>-lr=<lr>/seed-<k>.
2. Choice: per arm, the lr with the highest mean final validation accuracy (ties: the smaller lr),
   written to OUT/choice.json and OUT/tuning.md with OUT/tuning.png (validation accuracy against lr).
3. Final: every arm at its chosen lr for ``--final-seeds`` new seeds (100, 101, ...), scored on test once,
   into OUT/final/<arm>/seed-<k>; then OUT/final's report (``speccond report``) and OUT/final/holm.md
   (paired differences against the baseline, paired t-test p, Holm over the arms).

An arm is a method, optionally with TrainConfig settings after a colon, joined by "+" when there are
several ("spectral:corrected=q+lam=5"). Every run has ``flush_denormal=1``. Runs resume where they stopped
and finished ones are skipped, so the same command continues an interrupted protocol; ``--stage tune``
stops after step 2. A diverged run counts with accuracy 0 in the choice and in the final table.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from speccond.diagnostics.records import read_metrics
from speccond.experiments.compare import train_timed
from speccond.experiments.config import TrainConfig
from speccond.experiments.report import write_report
from speccond.experiments.stats import holm, mean_interval, paired_difference, paired_p_value
from speccond.experiments.training_tasks import task_class

FINAL_SEED = 100  # final seeds start here, apart from the tuning seeds 0, 1, ...


def arm_config(base: TrainConfig, arm: str) -> tuple[str, TrainConfig]:
    """("spectral-corrected=q", the config) of "spectral:corrected=q" (several settings joined by "+")."""
    method, _, settings = arm.partition(":")
    pairs = [s for s in settings.split("+") if s]
    return "-".join([method, *pairs]), dataclasses.replace(base, method=method).with_overrides(pairs)


def final_accuracy(run_dir: Path, split: str) -> float | None:
    """The final row's headline figure (its task's first metric: accuracy, box AP for detection) of a
    finished run, on ``split``; None for a run that did not finish (a diverged run: the callers count it as 0)."""
    rows = read_metrics(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").is_file() else []
    finals = [r for r in rows if r.get("kind") == "eval" and r.get("step") == r.get("total_steps")
              and r.get("split", "test") == split]
    if not finals:
        return None
    config = TrainConfig.from_dict(json.loads((run_dir / "config.json").read_text())["config"])
    return finals[-1][task_class(config).metrics[0]]


def tune(arms: dict[str, TrainConfig], lrs: list[float], seeds: int, out: Path) -> dict[str, dict]:
    """Stage 1 and 2: the tuning runs, then per arm {"lr": chosen, "validation": {lr: [accuracy per seed]}}."""
    total, done = len(arms) * len(lrs) * seeds, 0
    choice = {}
    for name, config in arms.items():
        scores = {}
        for lr in lrs:
            for seed in range(seeds):
                done += 1
                run = out / "tune" / f"{name}-lr={lr:g}" / f"seed-{seed}"
                print(f"[tuning run {done} of {total}] {run}", flush=True)
                train_timed(dataclasses.replace(config, lr=lr, seed=seed, tuning=1), run)
                accuracy = final_accuracy(run, "val")
                scores.setdefault(lr, []).append(0.0 if accuracy is None else accuracy)  # diverged: 0
        best = max(sorted(scores), key=lambda lr: (sum(scores[lr]) / len(scores[lr]), -lr))  # ties: smaller lr
        choice[name] = {"lr": best, "validation": {f"{lr:g}": values for lr, values in scores.items()}}
    return choice


def write_tuning(choice: dict[str, dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (out / "choice.json").write_text(json.dumps(choice, indent=2) + "\n")
    lines = ["# Tuning on the validation split", "", "Mean final validation accuracy (box AP for detection), %, over the tuning seeds; "
             "the chosen lr in bold (highest mean, ties to the smaller lr).", ""]
    lrs = sorted({lr for c in choice.values() for lr in c["validation"]}, key=float)
    lines += ["| arm | " + " | ".join(f"lr {lr}" for lr in lrs) + " |", "|---|" + "---|" * len(lrs)]
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for name, c in choice.items():
        cells = []
        for lr in lrs:
            values = c["validation"].get(lr)
            text = "" if values is None else str(mean_interval([100 * v for v in values]))
            cells.append(f"**{text}**" if float(lr) == c["lr"] else text)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        xs = [float(lr) for lr in lrs if lr in c["validation"]]
        means = [100 * sum(c["validation"][lr]) / len(c["validation"][lr]) for lr in lrs if lr in c["validation"]]
        line, = axis.plot(xs, means, marker="o", label=name)
        for lr in lrs:
            for value in c["validation"].get(lr, []):
                axis.plot(float(lr), 100 * value, ".", color=line.get_color(), alpha=0.5)
    axis.set(xscale="log", xlabel="peak learning rate", ylabel="final validation accuracy, %",
             title="validation accuracy against lr (line: mean over tuning seeds, dots: seeds)")
    axis.legend(fontsize=7, loc="best")
    figure.tight_layout()
    figure.savefig(out / "tuning.png", dpi=120)
    plt.close(figure)
    (out / "tuning.md").write_text("\n".join(lines) + "\n\n![validation accuracy against lr](tuning.png)\n")


def final(arms: dict[str, TrainConfig], choice: dict[str, dict], seeds: int, out: Path) -> str:
    """Stage 3: the final runs, their report and the Holm table (returned as markdown)."""
    total, done = len(arms) * seeds, 0
    accuracy: dict[str, dict[int, float]] = {}
    for name, config in arms.items():
        for seed in range(FINAL_SEED, FINAL_SEED + seeds):
            done += 1
            run = out / "final" / name / f"seed-{seed}"
            print(f"[final run {done} of {total}] {run}", flush=True)
            train_timed(dataclasses.replace(config, lr=choice[name]["lr"], seed=seed), run)
            value = final_accuracy(run, "test")
            accuracy.setdefault(name, {})[seed] = 0.0 if value is None else value  # diverged: 0 (below chance)
    write_report([out / "final"], out / "final")
    reference = next((n for n in arms if n == "baseline"), next(iter(arms)))
    others = [n for n in arms if n != reference]
    seeds_of = sorted(accuracy[reference])
    tests = [(n, paired_difference([accuracy[n][s] for s in seeds_of], [accuracy[reference][s] for s in seeds_of]),
              paired_p_value([accuracy[n][s] for s in seeds_of], [accuracy[reference][s] for s in seeds_of]))
             for n in others]
    adjusted = holm([p for _, _, p in tests])
    lines = ["# Final runs: paired differences against the baseline, Holm over the arms", "",
             f"{len(seeds_of)} seeds ({seeds_of[0]} to {seeds_of[-1]}), test accuracy once per run, each arm at its "
             f"chosen lr; m = {len(tests)} comparisons.", "",
             "| arm | lr | test accuracy (box AP for detection), % | difference, points | p | Holm p | verdict |", "|---|---|---|---|---|---|---|",
             f"| {reference} | {choice[reference]['lr']:g} | {mean_interval([100 * accuracy[reference][s] for s in seeds_of])} "
             "| - | - | - | reference |"]
    for (name, difference, p), q in zip(tests, adjusted):
        verdict = ("win" if difference.mean > 0 else "loss") if q < 0.05 else "tie"
        scaled = type(difference)(100 * difference.mean, 100 * difference.half_width, difference.n)
        lines.append(f"| {name} | {choice[name]['lr']:g} | {mean_interval([100 * accuracy[name][s] for s in seeds_of])} "
                     f"| {scaled} | {p:.3g} | {q:.3g} | {verdict} |")
    text = "\n".join(lines) + "\n"
    (out / "final" / "holm.md").write_text(text)
    return text
