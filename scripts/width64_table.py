"""Every finished run of the head-width-64 protocol, both instances (CPU and GPU), in one page.

    .venv/bin/python scripts/width64_table.py           # prints the page
    .venv/bin/python scripts/width64_table.py --write   # writes docs/results/protocol64-runs.md

Read from the kept archives (docs/results/protocol64-*/kept.tar.xz, checked against their manifests by
speccond.harness.protocol.kept_runs) and the pilots' folders (docs/results/protocol64-*pilot*/baseline/seed-0).
Per run: its validation accuracy (tuning runs and pilots score validation only), the attention entropy as
a fraction of uniform attention (mean over layers and heads, at step 0 and at the last tracked step), and
the largest kappa(W + C) of the whole q, k or v projection over the blocks (the tracker's block figure, also for
SVD per head, whose bound is per head) at step 0 and at the end. Where an instance has final runs, the registered
statistics at the seeds finished (paired by seed, Holm over the arms: the harness's final_table) follow its runs,
and once every run has finished, the registered secondary reading (Holm over the protocol's 15 comparisons).
tests/test_width64_table.py fails when the committed page is stale.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
PAGE = RESULTS / "protocol64-runs.md"
REGISTERED_SEEDS = range(100, 105)  # the final runs' seeds (docs/RESULTS.md, the protocol at head width 64)
REGISTERED_COMPARISONS = 15  # its secondary reading's Holm family: five arms on three tasks
sys.path.insert(0, str(ROOT / "src"))

from speccond.harness import ARM_NAMES  # noqa: E402  (the arms' display names)


def run_summary(config: dict, rows: list[dict]) -> dict:
    """One run's figures from its config.json and metrics.jsonl rows."""
    finals = [r for r in rows if r.get("kind") == "eval" and r.get("step") == r.get("total_steps")]
    entropy = [r for r in rows if r.get("kind") == "entropy"]
    spectra = [r for r in rows if r.get("kind") == "spectra"]
    steps = sorted({r["step"] for r in entropy})

    def entropy_at(step):  # mean over layers and heads, as a fraction of uniform attention
        at = [r for r in entropy if r["step"] == step]
        return sum(r["entropy"] / r["uniform_entropy"] for r in at) / len(at) if at else None

    def kappa_at(step):
        at = [float(r["kappa"]) for r in spectra if r["step"] == step]  # "inf" where W + C is singular
        return max(at) if at else None

    last_spectra = max((r["step"] for r in spectra), default=None)
    return {
        "accuracy": 100 * finals[-1]["accuracy"] if finals else None,
        "split": finals[-1].get("split", "test") if finals else None,
        "steps": finals[-1]["total_steps"] if finals else None,
        "entropy_init": entropy_at(steps[0]) if steps else None,
        "entropy_end": entropy_at(steps[-1]) if steps else None,
        "kappa_init": kappa_at(0),
        "kappa_end": kappa_at(last_spectra) if last_spectra is not None else None,
        "lr": config["lr"], "seed": config["seed"], "epochs": config["epochs"],
        "device": config.get("device", "auto"),
    }


def archive_runs(kept: Path) -> dict[str, dict]:
    """{run path inside the kept records ("tune/baseline-lr=0.001/seed-0"): its summary}, read through the
    checked archive (kept_runs.opened refuses one that differs from its manifest)."""
    from speccond.harness import opened_kept as opened

    with opened(kept) as folder:
        return {str(metrics.parent.relative_to(folder)): folder_run(metrics.parent)
                for metrics in sorted(folder.rglob("metrics.jsonl"))}


def folder_run(folder: Path) -> dict:
    config = json.loads((folder / "config.json").read_text())["config"]
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line]
    return run_summary(config, rows)


def arm_of(run: str) -> str:
    """"tune/spectral-svd-lr=0.001/seed-0" -> "spectral-svd"; "final/qk-norm/seed-100" -> "qk-norm"."""
    parts = run.split("/")
    return parts[1].rsplit("-lr=", 1)[0] if parts[0] == "tune" else parts[1]


def number(value, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def chosen_table(choice: dict) -> list[str]:
    """Each arm's choice (speccond tune's choice.json) and its validation figure's difference from the
    baseline's at the baseline's choice, in points."""
    def chosen(arm):
        values = choice[arm]["validation"][f"{choice[arm]['lr']:g}"]
        return 100 * sum(values) / len(values)

    lines = ["Each arm at the lr it chose (choice.json), and its difference from the baseline at the baseline's:", "",
             "| arm | chosen lr | validation accuracy, % | difference, points |", "|---|---|---|---|"]
    for arm in choice:
        difference = "reference" if arm == "baseline" else f"{chosen(arm) - chosen('baseline'):+.2f}"
        lines.append(f"| {ARM_NAMES.get(arm, arm)} | {choice[arm]['lr']:g} | {chosen(arm):.2f} | {difference} |")
    return lines + [""]


def finals_table(finals: dict[str, dict]) -> list[str]:
    """The final runs (test, scored once) as the registered statistics read them at the seeds finished: each
    arm against the baseline, paired by seed, Holm over the arms (the harness's final_table, as holm.md)."""
    from speccond.harness import final_table

    figures: dict[str, dict[int, float]] = {}  # {arm's display name: {seed: accuracy, a fraction}}
    lrs: dict[str, float] = {}
    for run, summary in sorted(finals.items(), key=lambda item: list(ARM_NAMES).index(arm_of(item[0]))):
        arm = ARM_NAMES.get(arm_of(run), arm_of(run))
        figures.setdefault(arm, {})[summary["seed"]] = summary["accuracy"] / 100
        lrs[arm] = summary["lr"]
    seeds = sorted({summary["seed"] for summary in finals.values()})
    complete = all(len(by_seed) == len(REGISTERED_SEEDS) for by_seed in figures.values())
    described = (f"Test scored once per run, each arm at its chosen lr; seeds {seeds[0]} to {seeds[-1]}, every run "
                 "finished: the registered verdict;" if complete else
                 f"Test scored once per run, each arm at its chosen lr; seeds finished so far: {seeds[0]} to "
                 f"{seeds[-1]} of 100 to 104, so this is an interim reading, not the registered verdict;")
    text, record = final_table(figures, lrs, ARM_NAMES["baseline"], "accuracy", len(REGISTERED_SEEDS),
                               "### Final runs: the registered statistics at the seeds finished", described)
    return text.splitlines() + [""] + (secondary_reading(record["comparisons"]) if complete else [])


def secondary_reading(comparisons: list[dict]) -> list[str]:
    """The registered secondary reading: Holm over every comparison of the protocol (REGISTERED_COMPARISONS), the
    ones that did not run counted as p = 1 (the most conservative reading)."""
    from speccond.harness import holm, verdict

    unrun = REGISTERED_COMPARISONS - len(comparisons)
    adjusted = holm([c["p"] for c in comparisons] + [1.0] * unrun)
    lines = [f"Secondary reading (registered): Holm over all {REGISTERED_COMPARISONS} comparisons of the protocol, "
             f"five arms on three tasks. {unrun} of them (CIFAR-10's and language's) have not run and count as "
             "p = 1, the most conservative reading.", "",
             f"| arm | p | Holm p over {REGISTERED_COMPARISONS} | verdict |", "|---|---|---|---|"]
    for c, p in zip(comparisons, adjusted):
        lines.append(f"| {c['arm']} | {c['p']:.3g} | {p:.3g} | {verdict(c['difference']['mean'], p)} |")
    return lines + [""]


def page() -> str:
    lines = ["# Head width 64: every finished run", "",
             "Written by `scripts/width64_table.py --write` from the kept archives and the pilots' folders; the",
             "protocol is in docs/RESULTS.md. Tuning runs and pilots are scored on validation only. Entropy: mean over",
             "layers and heads, as a fraction of uniform attention, at step 0 and at the last tracked step. kappa:",
             "the largest kappa(W + C) of the whole q, k or v projection (192 x 192) over the blocks, as the tracker",
             "records it. For SVD per head that is not the figure the correction bounds: each head's 64 x 192",
             "block of W + C has kappa <= 2 at initialisation, the whole projection does not. qk-norm has no",
             "correction and its attention is not tracked (-). inf: the tracker of the code these runs ran called the",
             "projection singular in float32 (sigma_min <= eps x 192 x sigma_max: kappa above about 43,000). Since",
             "2026-12-06 speccond.core.spectral.spectrum calls singular only what float32's rounding hides (sigma_min",
             "<= eps ||W||_F / sqrt(192)), so such a projection now reads a finite kappa above 43,000.", ""]
    for archive in sorted(RESULTS.glob("protocol64-*/kept.tar.xz")):
        instance = archive.parent.name
        runs = archive_runs(archive.parent / "kept")
        devices = sorted({summary["device"] for summary in runs.values()})
        lines += [f"## {instance} ({'GPU' if devices == ['cuda'] else 'CPU'}, {len(runs)} finished runs)", "",
                  "| arm | lr | seed | steps | accuracy, % | split | entropy at init | entropy at end "
                  "| kappa at init | kappa at end |", "|---|---|---|---|---|---|---|---|---|---|"]
        for run, s in sorted(runs.items(), key=lambda item: (list(ARM_NAMES).index(arm_of(item[0]))
                                                              if arm_of(item[0]) in ARM_NAMES else 99,
                                                              item[1]["lr"], item[1]["seed"])):
            lines.append(f"| {ARM_NAMES.get(arm_of(run), arm_of(run))} | {s['lr']:g} | {s['seed']} | {s['steps']} | "
                         f"{number(s['accuracy'], 2)} | {s['split']} | {number(s['entropy_init'], 3)} | "
                         f"{number(s['entropy_end'], 3)} | {number(s['kappa_init'], 1)} | {number(s['kappa_end'], 1)} |")
        lines.append("")
        choice_file = archive.parent / "choice.json"
        if choice_file.is_file():
            lines += chosen_table(json.loads(choice_file.read_text()))
        finals = {run: summary for run, summary in runs.items() if run.startswith("final/")}
        if finals:
            lines += finals_table(finals)
    pilots = sorted(path for path in RESULTS.glob("protocol64-*pilot*/baseline/seed-0") if path.is_dir())
    if pilots:
        lines += ["## Plateau pilots (baseline, lr 1e-3, seed 0, on validation)", "",
                  "| pilot | device | epochs | steps | accuracy, % | entropy at init | entropy at end |",
                  "|---|---|---|---|---|---|---|"]
        for path in pilots:
            s = folder_run(path)
            lines.append(f"| {path.parents[1].name} | {s['device']} | {s['epochs']} | {s['steps']} | "
                         f"{number(s['accuracy'], 2)} | {number(s['entropy_init'], 3)} | {number(s['entropy_end'], 3)} |")
        lines.append("")
    return "\n".join(lines)


# The opening table of docs/RESULTS.md: one column per task of the protocol as amended on 2026-12-07, each
# read from the instance folder that holds its registered result (or its progress), with its resume command.
OPENING = (
    ("Fashion-MNIST, 5 epochs (pilot: finals at the GPU's choice)", "protocol64-gpuchoice-fashion-mnist",
     "done"),
    ("Fashion-MNIST, 10 epochs (the registered primary)", "protocol64-10ep-fashion-mnist",
     "speccond protocol run width64-10ep fashion-mnist"),
    ("CIFAR-10 (JPEG), 10 epochs", "protocol64-cifar10", "speccond protocol run width64 cifar10"),
    ("GLUE SST-2, CoLA, MRPC, RTE after MLM pre-training", "protocol64-language",
     "speccond protocol run width64 language"),
)
OPENING_ARMS = ("baseline", "spectral", "spectral-corrected=q", "spectral-target_kappa=2", "spectral-svd", "qk-norm",
                "spectral-target_kappa=5-key_basis=orthogonal")  # the seventh arm joins the tasks not yet run
OPENING_START, OPENING_END = "<!-- width64-opening -->", "<!-- /width64-opening -->"
STEPS_PER_TASK = 3  # tuning runs per arm on the grid, before any edge extension


def opening_cell(arm: str, runs: dict[str, dict], finished: bool = False) -> str:
    """What the committed runs of one task say of one arm: its final verdict, else its tuning runs, else owed
    (or, in a task that ``finished`` before the arm was registered, that it was not registered there)."""
    if finished and not any(arm_of(run) == arm for run in runs):
        return "not registered (finished before this arm)"
    finals = {run: s for run, s in runs.items() if run.startswith("final/")}
    if finals:
        figures: dict[str, dict[int, float]] = {}
        for run, s in finals.items():
            figures.setdefault(arm_of(run), {})[s["seed"]] = s["accuracy"] / 100
        if arm not in figures:
            return "owed"
        from speccond.harness import final_table

        _, record = final_table(figures, {a: 0.0 for a in figures}, "baseline", "accuracy", len(REGISTERED_SEEDS), "", "")
        seeds = len(figures[arm])
        state = "" if seeds == len(REGISTERED_SEEDS) else f", interim: {seeds} of {len(REGISTERED_SEEDS)} seeds"
        if arm == "baseline":
            mean = 100 * sum(figures[arm].values()) / seeds
            return f"{mean:.2f} % on test (reference{state})"
        found = [c for c in record["comparisons"] if c["arm"] == arm]
        if not found:
            return f"not compared yet ({seeds} seed)"
        from speccond.harness import Interval

        c = found[0]
        return f"{Interval(**c['difference']).scaled(100)} (Holm p {c['holm']:.3g}), {c['verdict']}{state}"
    tuned = sorted((s["lr"], s["accuracy"]) for run, s in runs.items() if run.startswith("tune/") and arm_of(run) == arm)
    if not tuned:
        return "owed"
    done = ", ".join(f"{accuracy:.2f} at lr {lr:g}" for lr, accuracy in tuned)
    return f"tuning {len(tuned)} of {STEPS_PER_TASK}: validation {done}"


def opening() -> str:
    """The table RESULTS opens with: every arm on every task of the protocol, from the committed runs."""
    sources = {}
    for title, folder, command in OPENING:
        kept = RESULTS / folder / "kept"
        sources[title] = archive_runs(kept) if (RESULTS / folder / "kept.tar.xz").is_file() else {}
    lines = ["| arm | " + " | ".join(title for title, _, _ in OPENING) + " |", "|---|" + "---|" * len(OPENING)]
    for arm in OPENING_ARMS:
        cells = [opening_cell(arm, sources[title], finished=command == "done") for title, _, command in OPENING]
        lines.append(f"| {ARM_NAMES.get(arm, arm)} | " + " | ".join(cells) + " |")
    lines += ["", "Test differences are in points from the baseline, paired by seed (95 % t interval), Holm over the "
              "task's arms; tuning cells are one seed on validation. Still owed, with the command that resumes it "
              "(finished runs are kept and skipped):", ""]
    for title, _, command in OPENING:
        runs = sources[title]
        if command == "done":
            continue
        lines.append(f"- {title}: {len(runs)} runs kept; `{command}`")
    return "\n".join(lines)


def write_opening(document: Path) -> None:
    """Put :func:`opening` between the markers of ``document``."""
    text = document.read_text()
    start, end = text.index(OPENING_START) + len(OPENING_START), text.index(OPENING_END)
    document.write_text(text[:start] + "\n" + opening() + "\n" + text[end:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true",
                        help=f"write {PAGE.relative_to(ROOT)} and the opening table of docs/RESULTS.md")
    args = parser.parse_args(argv)
    text = page()
    if args.write:
        PAGE.write_text(text)
        write_opening(ROOT / "docs" / "RESULTS.md")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
