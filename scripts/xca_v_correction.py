"""Which of lam = 10's corrections costs XCiT without class attention: q and k, v, or all three (a post hoc
check of the fair-comparison protocol; docs/RESULTS.md). Reads the 20 validation-scored runs of

    speccond tune --task cifar10 --model xcit-noca --val-size 800 --lrs 3e-3 --tuning-seeds 5 --stage tune \\
        --jobs 1 --arms baseline,spectral,spectral:corrected=v,spectral:corrected=qk --out runs/xca-v-correction

kept in docs/results/xca-v-correction/kept (packed: kept.tar.xz, read through kept_runs.opened; or any folder of
the same layout) and writes holm.md and holm.json
there (harness/reporting/final_table.py): each arm against the baseline, paired by seed, Holm over the 3 arms.

    .venv/bin/python scripts/xca_v_correction.py [FOLDER]
"""
from __future__ import annotations

import sys
from pathlib import Path

from speccond.harness import final_table, opened_kept as opened, outcome, write_final_table

FOLDER = Path(__file__).resolve().parents[1] / "docs" / "results" / "xca-v-correction"
LR = 3e-3


def main(folder: Path = FOLDER) -> int:
    figures: dict[str, dict[int, float]] = {}
    with opened(folder / "kept") as kept:
        for run in sorted((kept / "tune").glob("*/seed-*")):
            arm = run.parent.name.removesuffix(f"-lr={LR:g}")
            figure = outcome(run, "val")
            if figure is not None:
                figures.setdefault(arm, {})[int(run.name.removeprefix("seed-"))] = figure
    if "baseline" not in figures:
        print(f"{folder}/kept/tune holds no finished baseline run; run the command in this script's docstring",
              file=sys.stderr)
        return 1
    text, record = final_table(figures, {arm: LR for arm in figures}, "baseline", "accuracy", 5,
                               "# Which correction costs XCiT without class attention (post hoc, validation)",
                               "Seeds 0 to 4 at lr 3e-3, scored on the 800 held-out validation images (test not scored);",
                               split="validation")
    write_final_table(folder, text, record)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else FOLDER))
