"""``speccond compare``: the same training run per method and seed, then a table anyone can check.

Every (method, seed) is an ordinary resumable run in ``<out>/<method>/seed-<k>``; finished runs are not
trained again, so an interrupted comparison continues where it stopped. The report gives, per method,
the final test accuracy (mean and 95 % t interval over seeds), the paired difference from the baseline
(same seeds), the final test loss, the mean kappa of the effective W_Q, W_K, W_V at the end, and the
training wall time; it writes results.md, results.json and plots.
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from speccond.experiments import checkpoint
from speccond.experiments.config import TrainConfig
from speccond.experiments.stats import Interval, mean_interval, paired_difference
from speccond.experiments.train import build_model, train

PRESETS = {
    # About 4 minutes for 2 methods x 3 seeds on 2 CPU cores: a ViT of width 64 on 7 x 7 patches (16
    # tokens), one epoch over 51,200 training images (400 steps), 2,000 test images.
    "quick": ["embed_dim=64", "patch_size=7", "train_size=51200", "epochs=1", "test_size=2000", "warmup_steps=20"],
    # The full small-scale reproduction: all 60,000 images, 10 epochs, the whole test set (hours).
    "full": ["epochs=10"],
}


@dataclass(frozen=True)
class RunResult:
    method: str
    seed: int
    accuracy: float
    loss: float
    kappa_qkv: float  # mean kappa of the effective q, k, v blocks over layers, at the end
    seconds: float  # wall time spent training this run (summed over resumptions)


def compare(base: TrainConfig, methods: Sequence[str], seeds: Sequence[int], out: Path, progress: bool = True) -> list[RunResult]:
    """Train every (method, seed) that is not finished, then write the report; return the results."""
    out = Path(out)
    results = []
    for method in methods:
        for seed in seeds:
            config = dataclasses.replace(base, method=method, seed=seed)
            results.append(_run(config, out / method / f"seed-{seed}", progress))
    write_report(results, base, out)
    return results


def _run(config: TrainConfig, run_dir: Path, progress: bool) -> RunResult:
    timing = run_dir / "timing.json"
    spent = json.loads(timing.read_text())["seconds"] if timing.is_file() else 0.0
    started = time.perf_counter()
    final = train(config, run_dir, progress=progress)
    if not timing.is_file() or final.get("step", 0) > json.loads(timing.read_text()).get("step", -1):
        spent += time.perf_counter() - started
        run_dir.mkdir(parents=True, exist_ok=True)
        timing.write_text(json.dumps({"seconds": spent, "step": final["step"]}))
    return RunResult(config.method, config.seed, final["accuracy"], final["loss"], _kappa_qkv(config, run_dir), spent)


def _kappa_qkv(config: TrainConfig, run_dir: Path) -> float:
    from speccond.diagnostics import projection_spectra

    model = build_model(config, 28, 1, 10)
    checkpoint.load(checkpoint.latest(run_dir), model)
    rows = projection_spectra(model, per_head=False)
    return sum(r["kappa"] for r in rows) / len(rows)


def summarize(results: list[RunResult], methods: Sequence[str]) -> list[dict]:
    """One row per method: intervals over seeds and the paired difference from the first method."""
    by_method = {m: sorted((r for r in results if r.method == m), key=lambda r: r.seed) for m in methods}
    reference = by_method[methods[0]]
    rows = []
    for method, runs in by_method.items():
        accuracy = [r.accuracy for r in runs]
        rows.append(
            {
                "method": method,
                "seeds": len(runs),
                "accuracy": mean_interval(accuracy),
                "difference": paired_difference(accuracy, [r.accuracy for r in reference]) if method != methods[0] else None,
                "loss": mean_interval([r.loss for r in runs]),
                "kappa_qkv": sum(r.kappa_qkv for r in runs) / len(runs),
                "minutes": sum(r.seconds for r in runs) / 60,
            }
        )
    return rows


def write_report(results: list[RunResult], base: TrainConfig, out: Path) -> str:
    methods = list(dict.fromkeys(r.method for r in results))
    rows = summarize(results, methods)
    reference = methods[0]
    lines = [
        f"# speccond compare: {base.task}, timm ViT (D {base.embed_dim}, depth {base.depth}, {base.num_heads} heads, patch {base.patch_size})",
        "",
        f"Test accuracy after {base.epochs} epoch(s) on {base.train_size or 'all'} training images, "
        f"{base.test_size or 'all'} test images; mean +- 95 % t interval over seeds; difference paired by seed vs {reference}.",
        f"spectral: identity correction lam = {base.lam:g} on q, k, v (the paper's default) unless the config says otherwise.",
        "",
        f"| method | seeds | accuracy | difference vs {reference} | final test loss | mean kappa(W_q,k,v) at end | train minutes (all seeds) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        difference = "-" if row["difference"] is None else _signed(row["difference"])
        lines.append(
            f"| {row['method']} | {row['seeds']} | {_pct(row['accuracy'])} | {difference} | {row['loss']} | "
            f"{row['kappa_qkv']:.3g} | {row['minutes']:.1f} |"
        )
    lines += ["", "Per run:", "", "| method | seed | accuracy | loss | kappa | seconds |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.method} | {r.seed} | {r.accuracy:.4f} | {r.loss:.4f} | {r.kappa_qkv:.3g} | {r.seconds:.0f} |" for r in results]
    text = "\n".join(lines) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(text)
    (out / "results.json").write_text(json.dumps([dataclasses.asdict(r) for r in results], indent=2))
    _plot(results, methods, out)
    return text


def _pct(interval: Interval) -> str:
    scaled = Interval(100 * interval.mean, 100 * interval.half_width, interval.n)
    return f"{scaled} %"


def _signed(interval: Interval) -> str:
    text = _pct(interval)
    return text if text.startswith("-") else "+" + text


def _plot(results: list[RunResult], methods: Sequence[str], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from speccond.diagnostics.tracker import read_metrics

    figure, (loss_axis, accuracy_axis) = plt.subplots(1, 2, figsize=(11, 4))
    for index, method in enumerate(methods):
        color = f"C{index}"
        for run in (r for r in results if r.method == method):
            rows = read_metrics(out / method / f"seed-{run.seed}" / "metrics.jsonl", kind="train")
            loss_axis.plot([r["step"] for r in rows], [r["loss"] for r in rows], color=color, alpha=0.6,
                           label=method if run.seed == min(r.seed for r in results if r.method == method) else None)
        accuracy = [100 * r.accuracy for r in results if r.method == method]
        accuracy_axis.scatter([index] * len(accuracy), accuracy, color=color)
    loss_axis.set_xlabel("training step")
    loss_axis.set_ylabel("training loss (cross-entropy)")
    loss_axis.legend()
    accuracy_axis.set_xticks(range(len(methods)), methods)
    accuracy_axis.set_ylabel("test accuracy, % (one dot per seed)")
    figure.tight_layout()
    figure.savefig(out / "comparison.png", dpi=110)
    plt.close(figure)
