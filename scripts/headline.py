"""The headline of issue 17's pre-registered protocol: task x method, from the committed final tables.

    .venv/bin/python scripts/headline.py            # print it
    .venv/bin/python scripts/headline.py --write    # and write docs/results/headline.md, headline.png and the two blocks

Reads docs/results/protocol-<task>/final/holm.json (``scripts/protocol.sh publish`` copies them from
runs/tune-<task>) and docs/results/long-budget/holm.json (scripts/long_budget_report.py); both are
harness/reporting/final_table.py's records. The language task's row averages its eight glue-* tables (four
tasks, two pre-training seeds): :func:`language_table`. Per task: each arm's test figure at the lr it chose on validation, its
difference from the baseline paired by seed, Holm over the task's arms, and the verdict (win or loss: adjusted
p < 0.05). A task without a committed table is listed as owed, with the command that runs it. headline.md
ends with the secondary analysis registered for the goal of issue 17 (:func:`versus_peers`, :func:`ahead`):
every conditioning arm against every peer of a task, Holm over those pairs, and the tasks on which an arm is
ahead of the baseline and of every peer.

docs/RESULTS.md opens with the full table and docs/RECOMMENDATIONS.md holds the matrix (arm x task), each
between the markers ``<!-- headline -->`` and ``<!-- /headline -->``; tests/test_headline.py fails when either
block is not what this script makes of the committed files.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from speccond.diagnostics.plot import save_figure  # noqa: E402
from speccond.harness import ARM_NAMES as ARMS, PEERS  # noqa: E402
from speccond.harness import METRIC_NAMES, Interval, family, final_table, lr_text, mean_interval, read_final_table  # noqa: E402

RESULTS = ROOT / "docs" / "results"
OUT = RESULTS / "headline.md"
DOCUMENTS = {ROOT / "docs" / "RESULTS.md": "table", ROOT / "docs" / "RECOMMENDATIONS.md": "matrix"}
START, END = "<!-- headline -->", "<!-- /headline -->"

@dataclass(frozen=True)
class Task:
    family: str  # vision, long-range, language or detection: the goal counts families
    name: str
    setting: str
    folder: str  # under docs/results
    command: str  # what makes it


TASKS = (
    Task("vision", "Fashion-MNIST", "ViT, full protocol", "protocol-fashion-mnist", "scripts/protocol.sh tier1"),
    Task("vision", "CIFAR-10 (withdrawn 10k copy)", "ViT, full protocol", "protocol-cifar10", "scripts/protocol.sh tier1"),
    Task("long-range", "ListOps", "Nystromformer, reduced protocol", "protocol-lra-listops", "scripts/protocol.sh tier1"),
    Task("detection", "fashion scenes", "Mask R-CNN, XCiT trunk, reduced protocol", "protocol-detection",
         "scripts/protocol.sh tier1"),
    Task("vision", "Fashion-MNIST, 20 epochs", "ViT, long budget, lr 1e-3 fixed, not tuned", "long-budget",
         "scripts/long_budget.sh"),
    Task("vision", "CIFAR-10 (withdrawn 10k copy)", "Swin, reduced protocol, tier 2", "protocol-cifar10-swin", "scripts/protocol.sh tier2"),
    Task("vision", "CIFAR-10 (withdrawn 10k copy)", "XCiT, reduced protocol, tier 2", "protocol-cifar10-xcit", "scripts/protocol.sh tier2"),
    Task("vision", "CIFAR-10 (withdrawn 10k copy)", "XCiT without class attention, reduced protocol, tier 2", "protocol-cifar10-xcit-noca",
         "scripts/protocol.sh tier2"),
    Task("vision", "CIFAR-10 (withdrawn 10k copy)", "DaViT, reduced protocol, tier 2", "protocol-cifar10-davit", "scripts/protocol.sh tier2"),
    Task("vision", "CIFAR-10 (withdrawn 10k copy)", "DeiT, reduced protocol, tier 2", "protocol-cifar10-deit", "scripts/protocol.sh tier2"),
    Task("detection", "fashion scenes", "Mask R-CNN, ViT trunk, reduced protocol, tier 2", "protocol-detection-vit",
         "scripts/protocol.sh tier2"),
    Task("language", "GLUE-like average (withdrawn text)", "BERT, 2 pre-training seeds per method, reduced protocol, tier 2",
         "protocol-language", "scripts/protocol.sh language"),
)


def table_path(task: Task) -> Path:
    folder = RESULTS / task.folder
    return folder / "holm.json" if task.folder == "long-budget" else folder / "final" / "holm.json"


def tables() -> dict[str, dict]:
    """{task folder: its final table} of the tasks with one committed (the language task: once all of its
    glue-* tables are, :func:`language_table`)."""
    found = {t.folder: read_final_table(table_path(t)) for t in TASKS if table_path(t).is_file()}
    language = language_table()
    if language is not None:
        found[LANGUAGE] = language
    return found


LANGUAGE = "protocol-language"
GLUE = ("sentiment", "fact", "pairs", "hyperbaton")
PRE_TRAINING_SEEDS = (0, 1)


def glue_tables() -> dict[tuple[str, int], Path]:
    """{(task, pre-training seed): its final table's path}, in the order the tables are shown."""
    return {(task, p): RESULTS / f"protocol-glue-{task}-pre{p}" / "final" / "holm.json"
            for task in GLUE for p in PRE_TRAINING_SEEDS}


def language_table() -> dict | None:
    """The GLUE-like average as a final table whose seeds are the pre-training seeds: per arm and
    pre-training seed, the mean over the four glue-* tasks of the mean test accuracy over that task's final
    fine-tuning seeds (each task at the lr chosen once, on validation from pre-training seed 0's encoder;
    pre-training seed 1's runs reuse that choice, ``--choice-of`` in ``protocol.sh list language``, and are
    fine-tuned from their own encoder). Pairing and the t interval run over
    the pre-training seeds, so the interval carries pre-training noise, not fine-tuning noise alone. None
    until the tables of every task and pre-training seed are committed
    (docs/results/protocol-glue-<task>-pre<p>/final/holm.json)."""
    paths = glue_tables()
    if not all(path.is_file() for path in paths.values()):
        return None
    records = {key: read_final_table(path) for key, path in paths.items()}
    arms = list(records[GLUE[0], PRE_TRAINING_SEEDS[0]]["arms"])
    figures = {arm: {} for arm in arms}
    for arm in arms:
        for p in PRE_TRAINING_SEEDS:
            per_task = [list(records[task, p]["arms"][arm]["figures"].values()) for task in GLUE]
            if all(per_task):
                figures[arm][p] = sum(sum(values) / len(values) for values in per_task) / len(GLUE)
    _, record = final_table(figures, {arm: "chosen per task" for arm in arms}, "baseline", "accuracy",
                            len(PRE_TRAINING_SEEDS), "", "")
    record["owed"] = sum(r["owed"] for r in records.values())  # fine-tuning runs not finished yet
    return record


def language_breakdown() -> str:
    """The language row task by task: for each glue-* task and pre-training seed with a committed final
    table, each arm's test accuracy (the baseline) or paired difference and verdict over its fine-tuning
    seeds (Holm over that table's arms); the tables not committed yet are listed as owed."""
    paths = glue_tables()
    records = {key: read_final_table(path) for key, path in paths.items() if path.is_file()}
    if not records:
        return "No glue-* final table is committed yet: `scripts/protocol.sh language`."
    keys = [key for key in paths if key in records]
    lines = ["| arm | " + " | ".join(f"{task}, pre-training {p}" for task, p in keys) + " |",
             "|---|" + "---|" * len(keys)]
    arms = list(dict.fromkeys(arm for key in keys for arm in records[key]["arms"]))
    for arm in arms:
        lines.append(f"| {ARMS.get(arm, arm)} | " + " | ".join(_cell(records[key], arm) for key in keys) + " |")
    lines += ["", "Each column is one final table (docs/results/protocol-glue-TASK-preP/final/holm.md): 5 "
              "fine-tuning seeds from one pre-trained encoder per arm, differences in points paired by "
              "fine-tuning seed, Holm over the table's arms. Its intervals carry fine-tuning noise only; "
              "the headline's language row pairs by pre-training seed."]
    average = language_table()
    if average is not None:
        differences = {c["arm"]: f"{_difference(c)}, {c['verdict']}" for c in average["comparisons"]}
        lines += ["", "The headline's language row per pre-training seed: the GLUE-like average (mean over the four "
                  "tasks of each task's mean test accuracy over its fine-tuning seeds), %, and the difference paired "
                  "over the pre-training seeds (t with 1 degree of freedom, Holm over the arms), then the difference "
                  "from each encoder alone, points:", "",
                  "| arm | " + " | ".join(f"pre-training {p}" for p in PRE_TRAINING_SEEDS) + " | difference, points | "
                  + " | ".join(f"difference at pre-training {p}" for p in PRE_TRAINING_SEEDS) + " |",
                  "|---|" + "---|" * (2 * len(PRE_TRAINING_SEEDS) + 1)]
        baseline = average["arms"].get("baseline", {}).get("figures", {})
        for arm, entry in average["arms"].items():
            figures = entry["figures"]
            cells = [f"{100 * figures[str(p)]:.2f}" if str(p) in figures else "-" for p in PRE_TRAINING_SEEDS]
            each = ["-" if arm == "baseline" or str(p) not in figures or str(p) not in baseline
                    else f"{100 * (figures[str(p)] - baseline[str(p)]):+.2f}" for p in PRE_TRAINING_SEEDS]
            lines.append(f"| {ARMS.get(arm, arm)} | " + " | ".join(cells) + f" | {differences.get(arm, 'reference')} | "
                         + " | ".join(each) + " |")
    owed = [f"glue-{task}-pre{p}" for task, p in paths if (task, p) not in records]
    if owed:
        lines += ["", f"Owed ({len(owed)} of {len(paths)} tables): {', '.join(owed)}; `scripts/protocol.sh language`."]
    return "\n".join(lines)


def _cell(record: dict, arm: str) -> str:
    """One arm's cell of a final table: the reference's test figure, else its difference and verdict."""
    if arm == record["reference"]:
        return _percent(list(record["arms"][arm]["figures"].values())) + " (reference)"
    c = next((c for c in record["comparisons"] if c["arm"] == arm), None)
    return "" if c is None else f"{_difference(c)}, {c['verdict']}"


def _percent(values: list[float]) -> str:
    return str(mean_interval([100 * v for v in values]))


def _difference(comparison: dict) -> str:
    return str(Interval(**comparison["difference"]).scaled(100))


def table(found: dict[str, dict]) -> str:
    lines = ["| family | task | setting | arm | lr | seeds | test figure, % | difference, points | Holm p (m) | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for task in TASKS:
        record = found.get(task.folder)
        if record is None:
            lines.append(f"| {task.family} | {task.name} | {task.setting} | owed: {_command(task)} | | | | | | |")
            continue
        comparisons = {c["arm"]: c for c in record["comparisons"]}
        figure = METRIC_NAMES.get(record["metric"], record["metric"])
        setting = task.setting + (f"; {record['owed']} runs owed" if record["owed"] else "")
        for arm, entry in record["arms"].items():
            figures = list(entry["figures"].values())
            c = comparisons.get(arm)
            cells = [ARMS.get(arm, arm), lr_text(entry["lr"]), str(len(figures)), _percent(figures) if figures else "-"]
            if arm == record["reference"]:
                cells += ["-", "-", "reference"]
            elif c is None:
                cells += ["-", "-", "fewer than 2 seeds"]
            else:
                cells += [_difference(c), f"{c['holm']:.3g} ({c['m']})", c["verdict"]]
            lines.append(f"| {task.family} | {task.name} ({figure}) | {setting} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def matrix(found: dict[str, dict]) -> str:
    """Arm x task: the paired difference and verdict, then the tasks still owed."""
    done = [t for t in TASKS if t.folder in found]
    lines = []
    if done:
        lines += ["| arm | " + " | ".join(f"{t.name}, {t.setting}" for t in done) + " |",
                  "|---|" + "---|" * len(done)]
        arms = [a for a in ARMS if any(a in found[t.folder]["arms"] for t in done)]
        for arm in arms:
            lines.append(f"| {ARMS[arm]} | " + " | ".join(_cell(found[t.folder], arm) for t in done) + " |")
        lines.append("")
        lines.append("Differences in points from the baseline, paired by seed, 95 % t intervals; win or loss: "
                     "Holm-adjusted p < 0.05 over the task's arms.")
    else:
        lines.append("No task of the protocol has finished yet.")
    owed = [t for t in TASKS if t.folder not in found]
    if owed:
        lines += ["", "Owed:"] + [f"- {t.name} ({t.setting}): {_command(t)}" for t in owed]
    return "\n".join(lines)


CONDITIONING = ("spectral", "spectral-corrected=q", "spectral-target_kappa=2", "spectral-svd")  # the settings of speccond


def versus_peers(record: dict) -> list:
    """The secondary analysis docs/RESULTS.md registers for the goal of issue 17: every conditioning arm
    of a task against every peer of that task, paired by seed, Holm over those comparisons (one family per
    task); stats.Comparison each, named "<arm> vs <peer>". Empty when the task has no peer."""
    figures = {arm: {int(s): v for s, v in entry["figures"].items()} for arm, entry in record["arms"].items()}
    return family([(f"{arm} vs {peer}", figures[arm], figures[peer])
                   for arm in CONDITIONING if arm in figures for peer in PEERS if peer in figures])


def ahead(record: dict, arm: str, comparisons: list | None = None) -> bool:
    """Whether ``arm`` is ahead of the baseline (a win in the task's final table) and of every peer of the
    task (a win in :func:`versus_peers`, or in ``comparisons`` when the caller has them already), each after
    its Holm correction: the goal's test on one task."""
    primary = next((c for c in record["comparisons"] if c["arm"] == arm), None)
    comparisons = versus_peers(record) if comparisons is None else comparisons
    secondary = [c for c in comparisons if c.arm.startswith(f"{arm} vs ")]
    peers = [peer for peer in PEERS if peer in record["arms"]]
    return (primary is not None and primary["verdict"] == "win" and len(secondary) == len(peers)
            and all(c.verdict == "win" for c in secondary))


def goal(found: dict[str, dict]) -> str:
    """Each task's conditioning-against-peers table, then per conditioning arm the tasks it is ahead on."""
    lines = []
    by_task = {t.folder: versus_peers(found[t.folder]) for t in TASKS if t.folder in found}
    done = [t for t in TASKS if by_task.get(t.folder)]
    for task in done:
        comparisons = by_task[task.folder]
        lines += [f"**{task.name}, {task.setting}** (m = {comparisons[0].m}):", "",
                  "| conditioning arm | peer | difference, points | p | Holm p | verdict |", "|---|---|---|---|---|---|"]
        for c in comparisons:
            arm, _, peer = c.arm.partition(" vs ")
            verdict = {"win": "ahead", "loss": "behind"}.get(c.verdict, "tie")
            lines.append(f"| {ARMS[arm]} | {ARMS[peer]} | {c.difference.scaled(100)} | {c.p:.3g} | {c.holm:.3g} | {verdict} |")
        lines.append("")
    if not done:
        return "No task with a peer has finished yet."
    lines += ["Ahead of the baseline and of every peer, after correction (the goal's test), per conditioning arm:", ""]
    for arm in CONDITIONING:
        tasks = [t for t in done if arm in found[t.folder]["arms"]]
        won = [f"{t.name} ({t.family})" for t in tasks if ahead(found[t.folder], arm, by_task[t.folder])]
        lines.append(f"- {ARMS[arm]}: {len(won)} of {len(tasks)} finished tasks with a peer"
                     + (f": {', '.join(won)}" if won else ""))
    return "\n".join(lines)


def _command(task: Task) -> str:
    return f"`{task.command}`" if task.command.startswith("scripts/") else task.command


def headline(found: dict[str, dict]) -> str:
    return "\n".join(["# Headline: task x method (issue 17's pre-registered protocol)", "",
                      "Made by `.venv/bin/python scripts/headline.py --write` from the committed final tables "
                      "(its docstring says which).", "", table(found), "", "## As a matrix", "", matrix(found), "",
                      "## The language row, task by task", "", language_breakdown(), "",
                      "## Conditioning against the peers (the secondary analysis registered for the goal)", "",
                      "Differences in points, conditioning arm minus peer, paired by seed, 95 % t intervals; "
                      "Holm over each task's conditioning-peer pairs; ahead or behind: adjusted p < 0.05.", "",
                      goal(found)]) + "\n"


def block(kind: str, found: dict[str, dict]) -> str:
    return f"{START}\n{table(found) if kind == 'table' else matrix(found)}\n{END}"


def current_block(path: Path) -> str | None:
    text = path.read_text()
    if START not in text or END not in text:
        return None
    return text[text.index(START): text.index(END) + len(END)]


PLOT = RESULTS / "headline.png"
VERDICT_COLOURS = {"win": "tab:green", "loss": "tab:red", "tie": "tab:grey"}


def forest(found: dict[str, dict]) -> list[tuple[str, str, Interval, str]]:
    """The rows :func:`plot` draws, top to bottom: (task label, arm label, difference from the baseline in
    points, verdict), every compared arm of every finished task in TASKS order."""
    rows = []
    for task in (t for t in TASKS if t.folder in found):
        for c in found[task.folder]["comparisons"]:
            rows.append((f"{task.name}, {task.setting}", ARMS.get(c["arm"], c["arm"]),
                         Interval(**c["difference"]).scaled(100), c["verdict"]))
    return rows


def plot(found: dict[str, dict], path: Path = PLOT) -> None:
    """headline.png: each arm's paired difference from the baseline with its 95 % t interval, one panel a
    task, coloured by the Holm verdict."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = forest(found)
    tasks = list(dict.fromkeys(task for task, *_ in rows))
    if not tasks:
        return
    heights = [sum(1 for t, *_ in rows if t == task) + 1 for task in tasks]
    figure, axes = plt.subplots(len(tasks), 1, figsize=(8, 0.32 * sum(heights) + 1), squeeze=False,
                                gridspec_kw={"height_ratios": heights})
    for axis, task in zip(axes[:, 0], tasks):
        mine = [(arm, difference, verdict) for t, arm, difference, verdict in rows if t == task]
        for y, (arm, difference, verdict) in enumerate(reversed(mine)):
            axis.errorbar(difference.mean, y, xerr=difference.half_width, fmt="o", color=VERDICT_COLOURS[verdict],
                          capsize=3)
        axis.set_yticks(range(len(mine)), [arm for arm, *_ in reversed(mine)], fontsize=8)
        axis.axvline(0, color="black", linewidth=0.8)
        axis.set_title(task, fontsize=9)
        axis.set_ylim(-0.7, len(mine) - 0.3)
    axes[-1, 0].set_xlabel("difference from the baseline, points (paired by seed, 95 % t interval)")
    handles = [plt.Line2D([], [], marker="o", linestyle="", color=colour, label=verdict + " (Holm)" if verdict != "tie"
                          else "tie") for verdict, colour in VERDICT_COLOURS.items()]
    axes[0, 0].legend(handles=handles, fontsize=7, loc="lower left")
    save_figure(figure, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true",
                        help="write docs/results/headline.md, headline.png and the two blocks")
    found = tables()
    text = headline(found)
    print(text)
    if parser.parse_args().write:
        OUT.write_text(text)
        plot(found)
        for path, kind in DOCUMENTS.items():
            old = current_block(path)
            if old is None:
                raise SystemExit(f"{path}: no {START} ... {END} block to replace; add the two markers where it belongs")
            path.write_text(path.read_text().replace(old, block(kind, found)))


if __name__ == "__main__":
    main()
