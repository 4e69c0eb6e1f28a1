"""docs/results/protocol64-runs.md (scripts/width64_table.py): every finished width-64 run, regenerated from
the kept archives and pilots, equals the committed page; the figures it reads are the runs' own."""
from __future__ import annotations

import json

from tests.scripts import load_script

table = load_script("width64_table")


def test_the_committed_page_of_width64_runs_is_regenerated_exactly():
    assert table.PAGE.read_text() == table.page(), "stale: run scripts/width64_table.py --write"


def test_a_runs_summary_reads_its_final_row_entropy_and_kappa():
    rows = [{"kind": "entropy", "step": 0, "entropy": 2.0, "uniform_entropy": 4.0},
            {"kind": "entropy", "step": 0, "entropy": 4.0, "uniform_entropy": 4.0},
            {"kind": "entropy", "step": 9, "entropy": 1.0, "uniform_entropy": 4.0},
            {"kind": "spectra", "step": 0, "kappa": 3.0}, {"kind": "spectra", "step": 0, "kappa": 7.0},
            {"kind": "spectra", "step": 9, "kappa": "inf"},
            {"kind": "eval", "step": 9, "total_steps": 10, "accuracy": 0.1, "split": "val"},
            {"kind": "eval", "step": 10, "total_steps": 10, "accuracy": 0.5, "split": "val"}]
    summary = table.run_summary({"lr": 1e-3, "seed": 0, "epochs": 1, "device": "cuda"}, rows)
    assert summary["accuracy"] == 50.0 and summary["split"] == "val" and summary["steps"] == 10
    assert summary["entropy_init"] == 0.75 and summary["entropy_end"] == 0.25
    assert summary["kappa_init"] == 7.0 and summary["kappa_end"] == float("inf")


def test_the_gpu_instances_tuning_cells_match_its_tuning_table():
    """The page and the tuning.md that speccond tune wrote agree on every cell of the GPU instance."""
    choice = json.loads((table.RESULTS / "protocol64-gpu-fashion-mnist" / "choice.json").read_text())
    runs = table.archive_runs(table.RESULTS / "protocol64-gpu-fashion-mnist" / "kept")
    for arm, chosen in choice.items():
        for lr, values in chosen["validation"].items():
            run = runs[f"tune/{arm}-lr={lr}/seed-0"]
            assert round(run["accuracy"], 6) == round(100 * values[0], 6)


def test_the_interim_finals_table_pairs_each_arm_with_the_baseline_by_seed():
    """Each difference in the finals table is the mean over the seeds both runs finished of arm - baseline."""
    runs = table.archive_runs(table.RESULTS / "protocol64-gpuchoice-fashion-mnist" / "kept")
    finals = {run: s for run, s in runs.items() if run.startswith("final/")}
    lines = table.finals_table(finals)
    by_arm: dict[str, dict[int, float]] = {}
    for run, s in finals.items():
        by_arm.setdefault(table.arm_of(run), {})[s["seed"]] = s["accuracy"]
    baseline = by_arm.pop("baseline")
    for arm, scores in by_arm.items():
        seeds = sorted(set(scores) & set(baseline))
        if len(seeds) < 2:
            continue
        mean = sum(scores[s] - baseline[s] for s in seeds) / len(seeds)
        row = next(line for line in lines if line.startswith(f"| {table.ARM_NAMES[arm]} |"))
        printed = row.split("|")[5].split("+-")[0].strip()  # "-5.4": as many decimals as its interval allows
        decimals = len(printed.split(".")[1]) if "." in printed else 0
        assert abs(float(printed) - mean) <= 0.5 * 10 ** -decimals + 1e-9, (arm, printed, mean)


def test_results_opens_with_the_width64_table_of_every_task_regenerated_exactly():
    text = (table.ROOT / "docs" / "RESULTS.md").read_text()
    start = text.index(table.OPENING_START) + len(table.OPENING_START)
    assert text[start:text.index(table.OPENING_END)] == "\n" + table.opening() + "\n", \
        "stale: run scripts/width64_table.py --write"
    assert text.index(table.OPENING_START) < text.index("## Head width 64: the registered verdict")


def test_an_opening_cell_says_owed_tuning_or_the_verdict_from_the_runs_it_has():
    tuning = {"tune/qk-norm-lr=0.001/seed-0": {"lr": 1e-3, "accuracy": 70.0, "seed": 0}}
    assert table.opening_cell("qk-norm", tuning) == "tuning 1 of 3: validation 70.00 at lr 0.001"
    assert table.opening_cell("spectral-svd", tuning) == "owed"
    finals = {f"final/{arm}/seed-{seed}": {"seed": seed, "accuracy": 80.0 + bump + seed - 100}
              for arm, bump in (("baseline", 0.0), ("qk-norm", 1.0)) for seed in (100, 101, 102)}
    assert table.opening_cell("baseline", finals) == "81.00 % on test (reference, interim: 3 of 5 seeds)"
    assert table.opening_cell("qk-norm", finals).startswith("1 +- 0 (Holm p ")
