"""``speccond tune``: the pre-registered protocol of the fair comparison (docs/RESULTS.md), every arm at its own
best lr.

    speccond tune --task fashion-mnist --val-size 6000 --out runs/tune-fashion --jobs 2 \
        --arms baseline,spectral,spectral:corrected=q,spectral:lam=auto,spectral-svd,qk-norm,sigma-reparam,sigma-reparam-all,spectral-norm

1. Tuning: every arm at every lr (``--lrs``, default 3e-4,1e-3,3e-3) for ``--tuning-seeds`` seeds (0, 1, ...),
   as tuning runs (``tuning=1``: the final row scores the validation split; the test split is never
   scored), into OUT/tune/<arm>-lr=<lr>/seed-<k>. They run seed by seed (every arm at every lr for seed
   0, then seed 1), so a cut leaves every arm with the same seeds: cutting tuning seeds
   (``--tuning-seeds 1``) then needs no new run.
2. Choice: per arm, the lr with the highest mean final validation accuracy (ties: the smaller lr),
   written to OUT/choice.json and OUT/tuning.md with OUT/tuning.png (validation accuracy against lr).
   ``--choice PATH`` takes a committed choice.json instead of steps 1 and 2 (:func:`adopt_choice`): the
   tuning runs are not committed, so a fresh clone resumes the final runs from the record of the choice.
3. Final: every arm at its chosen lr for ``--final-seeds`` new seeds (100, 101, ...), scored on test once,
   into OUT/final/<arm>/seed-<k>, seed by seed; then OUT/final's report (``speccond report``),
   OUT/final/holm.md and holm.json (harness/reporting/final_table.py: paired differences against the baseline,
   paired t-test p, Holm over the arms).

An arm is a method, optionally with TrainConfig settings after a colon, joined by "+" when there are
several ("spectral:corrected=q+lam=5"); ``spectral:lam=auto`` trains in OUT/tune/spectral-target_kappa=2-lr=...,
the folder name of the published lam = auto arm. Every run has ``flush_denormal=1``. Runs resume where they stopped
and finished ones are skipped, so the same command continues an interrupted protocol; ``--stage tune``
stops after step 2, and ``--stage report`` trains nothing and writes the tables of what has finished
(arms still short of runs are marked, and no choice.json is written until every tuning run finished).
``--jobs N`` trains N runs side by side, each in its own process with torch's threads divided among them
(one each under ``OMP_NUM_THREADS=1``); every run's config.json records the number in
``"arithmetic"``. A diverged run counts with accuracy 0 in the choice and in the final table.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Optional

from speccond.collapse_advice import Phrasing, current_phrasing, install_phrasing
from speccond.diagnostics.records import read_metrics
from speccond.harness.config.fields import arm_settings
from speccond.harness.config.train_config import TrainConfig, folder_settings, refuse_unread
from speccond.harness.protocol.compare import train_timed
from speccond.harness.protocol.engines import Job, Submitit
from speccond.harness.protocol.tuning_table import tuning_table
from speccond.harness.reporting.final_table import final_table, write_final_table
from speccond.harness.reporting.numbers import METRIC_NAMES
from speccond.harness.reporting.report import write_report
from speccond.harness.training.run_dir import PARALLEL_JOBS
from speccond.harness.training.training_tasks import headline_metric

FINAL_SEED = 100  # final seeds start here, apart from the tuning seeds 0, 1, ...


def arm_config(base: TrainConfig, arm: str) -> tuple[str, TrainConfig]:
    """("spectral-corrected=q", the config) of "spectral:corrected=q" (several settings joined by "+", each
    read as ``--set`` reads it: TrainConfig.with_overrides). The name says lam=auto by its bound
    ("spectral:lam=auto" -> "spectral-target_kappa=2", train_config.folder_settings). An ``init_from``
    setting (the pre-trained encoder this arm fine-tunes) is not part of the name: the arm is its method and
    settings, its runs' config.json say where it started."""
    method, pairs = arm_settings(arm)
    config = base.replaced(method=method).with_overrides(pairs)
    refuse_unread(pairs, [config], f"--arms {arm}:")  # a setting the arm's method or model never reads
    named = [s for s in pairs if not s.startswith("init_from=")]
    return "-".join([method, *folder_settings(named, config)]), config


def arm_name(arm: str, base: Optional[TrainConfig] = None) -> str:
    """The folder and table name of an arm ("spectral-corrected=q" of "spectral:corrected=q", init_from left
    out), as arm_config names it on ``base`` (default: TrainConfig())."""
    return arm_config(base or TrainConfig(), arm)[0]


def outcome(run_dir: Path, split: str) -> Optional[float]:
    """The final row's headline figure on ``split`` (its task's first metric: accuracy, Matthews correlation for
    glue-cola, box AP for detection) of a finished run; 0.0 for a diverged run (below chance, the protocol counts
    it so; for a Matthews correlation 0.0 is chance itself); None while the run has not finished."""
    rows = read_metrics(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").is_file() else []
    if any(r.get("kind") == "diverged" for r in rows):
        return 0.0
    finals = [r for r in rows if r.get("kind") == "eval" and r.get("step") == r.get("total_steps")
              and r.get("split", "test") == split]
    if not finals:
        return None
    config = TrainConfig.from_record(json.loads((run_dir / "config.json").read_text()))
    return finals[-1][headline_metric(config)]


def tuning_run(out: Path, name: str, lr: float, seed: int) -> Path:
    return out / "tune" / f"{name}-lr={lr:g}" / f"seed-{seed}"


def final_run(out: Path, name: str, seed: int) -> Path:
    return out / "final" / name / f"seed-{seed}"


def tuning_jobs(arms: dict[str, TrainConfig], lrs: list[float], seeds: int, out: Path) -> list[Job]:
    """Seed by seed, then lr by lr, every arm: a cut anywhere leaves the arms level."""
    return [Job(config.replaced(lr=lr, seed=seed, tuning=1), tuning_run(out, name, lr, seed))
            for seed in range(seeds) for lr in lrs for name, config in arms.items()]


def final_jobs(arms: dict[str, TrainConfig], choice: dict[str, dict], seeds: int, out: Path) -> list[Job]:
    return [Job(config.replaced(lr=choice[name]["lr"], seed=seed), final_run(out, name, seed))
            for seed in range(FINAL_SEED, FINAL_SEED + seeds) for name, config in arms.items()]


def run_jobs(jobs: list[Job], parallel: int, stage: str, engine: Optional[Submitit] = None) -> None:
    """Train every job not finished yet, ``parallel`` at a time. One at a time shows each run's step bar;
    side by side, one bar over the runs (rate and ETA) and a line per run as it ends. An error in one run
    lets the others finish, then is raised naming the run. ``engine``: submit them as submitit jobs
    instead (harness/protocol/engines.py), each with the threads the pool would give it."""
    split = {True: "val", False: "test"}
    pending = [job for job in jobs if outcome(job.run, split[bool(job.config.run.tuning)]) is None]
    print(f"[{stage}] {len(jobs) - len(pending)} of {len(jobs)} runs finished; {len(pending)} to train, "
          f"{parallel} at a time", flush=True)
    if engine is not None and pending:
        import torch

        _raise_failures(engine.run(pending, max(1, torch.get_num_threads() // parallel), parallel, stage,
                                   current_phrasing()), pending)
        return
    if parallel == 1:
        for index, job in enumerate(pending, 1):
            print(f"[{stage} run {index} of {len(pending)}] {job.run}", flush=True)
            train_timed(job.config, job.run)
        return
    import multiprocessing
    import sys
    from concurrent.futures import ProcessPoolExecutor, as_completed

    import torch
    from tqdm import tqdm

    threads = max(1, torch.get_num_threads() // parallel)
    context = multiprocessing.get_context("spawn")  # a fresh interpreter per worker: no forked torch state
    failures = []
    with ProcessPoolExecutor(parallel, mp_context=context, initializer=_worker_start,
                             initargs=(threads, parallel, current_phrasing())) as pool, \
            tqdm(total=len(pending), unit="run", desc=stage, file=sys.stderr, dynamic_ncols=True) as bar:
        futures = {pool.submit(_train_quietly, job): job for job in pending}
        try:
            for future in as_completed(futures):
                job = futures[future]
                error = future.exception()
                if error is not None:
                    failures.append((job, error))
                bar.write(f"[{stage}] {'failed' if error else 'finished'}: {job.run}" + (f" ({error})" if error else ""))
                bar.update()
        except KeyboardInterrupt:
            pool.shutdown(cancel_futures=True)
            raise
    _raise_failures(failures, pending)


def _raise_failures(failures: list[tuple[Job, BaseException]], pending: list[Job]) -> None:
    """A ValueError naming the first failed run, once every run of the stage has ended."""
    if failures:
        job, error = failures[0]
        raise ValueError(f"{len(failures)} of {len(pending)} runs failed; the first, {job.run}: {error}") from error


def _worker_start(threads: int, parallel: int, phrasing: Phrasing) -> None:
    """A pool worker's set-up: its torch threads, the pool's job count (config.json's "arithmetic") and the
    collapse advice phrased as the command that started the pool phrases it (its flags, not Python)."""
    import torch

    torch.set_num_threads(threads)
    os.environ[PARALLEL_JOBS] = str(parallel)
    install_phrasing(phrasing)


def _train_quietly(job: Job) -> None:
    train_timed(job.config, job.run, progress=False)


def tuning_scores(arms: dict[str, TrainConfig], lrs: list[float], seeds: int, out: Path,
                  extra: Optional[dict[str, float]] = None) -> dict[str, dict[str, list]]:
    """{arm: {lr as written ("1e-3" as "0.001"): [final validation figure per seed, None while unfinished]}}.
    ``extra``: {arm: one more lr} tried by that arm alone (the edge extensions, :func:`edge_extensions`)."""
    extra = extra or {}
    return {name: {f"{lr:g}": [outcome(tuning_run(out, name, lr, seed), "val") for seed in range(seeds)]
                   for lr in sorted({*lrs, *([extra[name]] if name in extra else [])})}
            for name in arms}


def step_past(lr: float, lrs: list[float]) -> Optional[float]:
    """The lr one step past the grid's edge that ``lr`` sits on, on the grid's 1-3-10 ladder (3e-4 -> 1e-4,
    3e-3 -> 1e-2); None for an lr inside the grid. Off the ladder, the step is the ratio of the two lrs at
    that edge (a grid of one lr has no edge to step past)."""
    grid = sorted(lrs)
    if len(grid) < 2 or lr not in (grid[0], grid[-1]):
        return None
    down = lr == grid[0]
    exponent = math.floor(math.log10(lr) + 1e-9)
    mantissa = round(lr / 10 ** exponent, 6)
    if mantissa in (1.0, 3.0):
        if down:
            return float(f"{1 if mantissa == 3.0 else 3}e{exponent if mantissa == 3.0 else exponent - 1}")
        return float(f"{3 if mantissa == 1.0 else 1}e{exponent if mantissa == 1.0 else exponent + 1}")
    ratio = grid[1] / grid[0] if down else grid[-1] / grid[-2]
    return float(f"{(lr / ratio if down else lr * ratio):.3g}")


def edge_extensions(choice: dict[str, dict], lrs: list[float]) -> dict[str, float]:
    """{arm: the lr one step past the edge} for every arm whose choice on ``lrs`` landed on the grid's edge
    (the registered rule of docs/RESULTS.md's width-64 protocol: such an arm also runs one step past it
    before any final run, and its choice is taken over the extended grid)."""
    return {name: step for name, chosen in choice.items() if (step := step_past(chosen["lr"], lrs)) is not None}


def protocol_scores(arms: dict[str, TrainConfig], lrs: list[float], seeds: int, out: Path,
                    extend_edges: bool) -> dict[str, dict[str, list]]:
    """The tuning scores the choice is made from: the grid's, plus each edge extension once the grid's runs
    have all finished (its cells None until its runs finish)."""
    scores = tuning_scores(arms, lrs, seeds, out)
    grid_done = all(None not in values for by_lr in scores.values() for values in by_lr.values())
    if not (extend_edges and grid_done):
        return scores
    return tuning_scores(arms, lrs, seeds, out, edge_extensions(choose(scores), lrs))


def choose(scores: dict[str, dict[str, list]]) -> dict[str, dict]:
    """Per arm {"lr": chosen, "validation": {lr: [figure per seed]}}: the highest mean, ties to the smaller
    lr. Every run must have finished (a partial choice would be a different protocol)."""
    unfinished = [f"{name} lr={lr}" for name, by_lr in scores.items() for lr, values in by_lr.items() if None in values]
    if unfinished:
        raise ValueError(f"no choice before every tuning run finished; unfinished: {', '.join(unfinished)}")
    choice = {}
    for name, by_lr in scores.items():
        best = max(sorted(by_lr, key=float), key=lambda lr: (sum(by_lr[lr]) / len(by_lr[lr]), -float(lr)))
        choice[name] = {"lr": float(best), "validation": by_lr}
    return choice


# the peers of the fair comparison (docs/RESULTS.md), in registered order
PEERS = ("qk-norm", "sigma-reparam", "sigma-reparam-all", "spectral-norm")

ARM_NAMES = {  # the arms' names, as the headline, the mechanism page and people read them
    "baseline": "baseline",
    "spectral": "lam = 10 on q, k, v (the paper)",
    "spectral-corrected=q": "lam = 10 on q only",
    "spectral-target_kappa=2": "lam = auto (kappa <= 2)",
    "spectral-target_kappa=5-key_basis=orthogonal": "lam = auto (kappa <= 5), lam R on k",
    "spectral-svd": "SVD per head",
    "qk-norm": "qk-norm",
    "sigma-reparam": "sigmaReparam on q, k, v",
    "sigma-reparam-all": "sigmaReparam on every layer",
    "spectral-norm": "spectral norm",
}


def read_choice(path: Path) -> dict[str, dict]:
    """choice.json as :func:`choose` wrote it, or a ValueError naming what is wrong with the file."""
    try:
        choice = json.loads(Path(path).read_text())
        for chosen in choice.values():
            chosen_validation(chosen)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError,
            ZeroDivisionError) as error:
        raise ValueError(f"{path}: not a choice ({type(error).__name__}: {error}); expected the choice.json speccond "
                         "tune writes once every tuning run has finished") from None
    return choice


def chosen_validation(chosen: dict) -> float:
    """An arm's mean validation figure at the lr it chose (KeyError when the choice has none at that lr)."""
    lr = f"{float(chosen['lr']):g}"
    if lr not in chosen["validation"]:
        raise KeyError(f"no validation figures at the chosen lr {lr}")
    values = chosen["validation"][lr]
    return sum(values) / len(values)


def adopt_choice(path: Path, arms: dict[str, TrainConfig], lrs: list[float], seeds: int, out: Path,
                 extend_edges: bool = False) -> dict[str, dict]:
    """A committed choice.json (``--choice``) in place of the tuning runs, for a machine that does not have
    them (a fresh clone: the runs are not committed, the choice is). Checked before anything is written:
    it must name exactly these arms, hold ``seeds`` validation figures at exactly these lrs for each, and
    its chosen lr must be the one :func:`choose` makes of those figures (an edited file is refused). Then
    written to OUT/choice.json, unless OUT already holds a different choice, which is refused too."""
    choice = read_choice(path)
    expected = {f"{lr:g}" for lr in lrs}
    problems = []
    if set(choice) != set(arms):
        problems.append(f"its arms are {', '.join(choice)}, this protocol's are {', '.join(arms)}")
    for name in set(choice) & set(arms):
        figures = choice[name]["validation"]
        allowed = set(expected)
        on_grid = {lr: values for lr, values in figures.items() if lr in expected}
        if extend_edges and set(on_grid) == expected and all(len(values) == seeds for values in on_grid.values()):
            step = step_past(choose({name: on_grid})[name]["lr"], lrs)
            allowed |= {f"{step:g}"} if step is not None else set()
        if set(figures) != allowed or any(len(values) != seeds for values in figures.values()):
            problems.append(f"{name} has {sum(map(len, figures.values()))} figures at lr {', '.join(figures)}; "
                            f"expected {seeds} at each of {', '.join(sorted(allowed, key=float))}")
        elif choose({name: figures})[name]["lr"] != float(choice[name]["lr"]):
            problems.append(f"{name} chose lr {choice[name]['lr']}, but its validation figures choose "
                            f"{choose({name: figures})[name]['lr']:g}")
    if problems:
        raise ValueError(f"--choice {path} does not fit this protocol: {'; '.join(problems)}. Pass the choice.json "
                         "that speccond tune wrote for these arms, lrs and --tuning-seeds, or leave out --choice to tune")
    adopted = choose({name: choice[name]["validation"] for name in arms})
    existing = out / "choice.json"
    if existing.is_file() and read_choice(existing) != adopted:
        raise ValueError(f"{existing} holds another choice than --choice {path}; move one of them aside (the "
                         "folder's runs were tuned for its own choice)")
    out.mkdir(parents=True, exist_ok=True)
    existing.write_text(json.dumps(adopted, indent=2) + "\n")
    return adopted


def validation_leads(choices: list[dict[str, dict]], peers: tuple[str, ...] = PEERS) -> dict[str, list[float]]:
    """{peer: [its validation figure at its chosen lr minus the baseline's at the baseline's, per choice]}.
    Raises ValueError when a choice lacks the baseline or a peer."""
    missing = sorted({name for choice in choices for name in ("baseline", *peers) if name not in choice})
    if not choices or missing:
        raise ValueError(f"best_peer needs the baseline and every peer in each choice; missing: {', '.join(missing) or 'every choice'}")
    return {peer: [chosen_validation(c[peer]) - chosen_validation(c["baseline"]) for c in choices] for peer in peers}


def best_peer(choices: list[dict[str, dict]], peers: tuple[str, ...] = PEERS) -> str:
    """The peer the reduced protocol takes (docs/RESULTS.md registers the rule): the one with the highest
    mean of :func:`validation_leads` over the full-protocol tasks' choices; ties go to the earlier in
    ``peers``. Test scores play no part."""
    leads = validation_leads(choices, peers)
    return max(peers, key=lambda peer: (sum(leads[peer]) / len(leads[peer]), -peers.index(peer)))


def tune(arms: dict[str, TrainConfig], lrs: list[float], seeds: int, out: Path, parallel: int = 1,
         extend_edges: bool = False, engine: Optional[Submitit] = None) -> dict[str, dict]:
    """Stage 1 and 2: the tuning runs, then the choice (:func:`choose`). With ``extend_edges``, an arm whose
    choice lands on the grid's edge also runs one step past it (:func:`edge_extensions`) and chooses over
    its extended grid."""
    run_jobs(tuning_jobs(arms, lrs, seeds, out), parallel, "tuning", engine)
    extra = edge_extensions(choose(tuning_scores(arms, lrs, seeds, out)), lrs) if extend_edges else {}
    jobs = [Job(arms[name].replaced(lr=lr, seed=seed, tuning=1), tuning_run(out, name, lr, seed))
            for seed in range(seeds) for name, lr in extra.items()]
    if jobs:
        run_jobs(jobs, parallel, "edges", engine)
    return choose(tuning_scores(arms, lrs, seeds, out, extra))


def write_tuning(scores: dict[str, dict[str, list]], out: Path, metric: str = "accuracy") -> Optional[dict]:
    """OUT/tuning.md and tuning.png of the tuning runs finished so far, and OUT/choice.json once all have
    (returned; None before). ``metric`` is the task's first metric, the figure the scores are of: it names
    the table's figure and the plot's axis ("box_ap" reads "box AP")."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    label = METRIC_NAMES.get(metric, metric)
    complete = all(None not in values for by_lr in scores.values() for values in by_lr.values())
    choice = choose(scores) if complete else None
    if choice is not None:
        (out / "choice.json").write_text(json.dumps(choice, indent=2) + "\n")
    lrs = sorted({lr for by_lr in scores.values() for lr in by_lr}, key=float)
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for name, by_lr in scores.items():
        xs, means = [], []
        for lr in lrs:
            values = [100 * v for v in by_lr.get(lr, []) if v is not None]
            if values:
                xs.append(float(lr))
                means.append(sum(values) / len(values))
        line, = axis.plot(xs, means, marker="o", label=name)
        for lr in lrs:
            for value in by_lr.get(lr, []):
                if value is not None:
                    axis.plot(float(lr), 100 * value, ".", color=line.get_color(), alpha=0.5)
    axis.set(xscale="log", xlabel="peak learning rate", ylabel=f"final validation {label}, %",
             title=f"validation {label} against lr (line: mean over tuning seeds, dots: seeds)")
    axis.legend(fontsize=7, loc="best")
    figure.tight_layout()
    figure.savefig(out / "tuning.png", dpi=120)
    plt.close(figure)
    (out / "tuning.md").write_text(tuning_table(scores, choice, metric))
    return choice


def final(arms: dict[str, TrainConfig], choice: dict[str, dict], seeds: int, out: Path, parallel: int = 1,
          engine: Optional[Submitit] = None) -> str:
    """Stage 3: the final runs, their report and the Holm table (returned as markdown)."""
    run_jobs(final_jobs(arms, choice, seeds, out), parallel, "final", engine)
    return write_final(arms, choice, seeds, out)


def write_final(arms: dict[str, TrainConfig], choice: dict[str, dict], seeds: int, out: Path) -> str:
    """OUT/final's report, holm.md and holm.json (harness/reporting/final_table.py) over the final runs finished so
    far (an arm counts the seeds it shares with the baseline; the header says when some are still owed)."""
    figures = {name: {seed: value for seed in range(FINAL_SEED, FINAL_SEED + seeds)
                      if (value := outcome(final_run(out, name, seed), "test")) is not None} for name in arms}
    if not any(figures.values()):
        return "no final run has finished yet\n"
    write_report([out / "final"], out / "final")
    text, record = final_table(
        figures, {name: choice[name]["lr"] for name in arms}, "baseline" if "baseline" in arms else next(iter(arms)),
        headline_metric(next(iter(arms.values()))), seeds,
        "# Final runs: paired differences against the baseline, Holm over the arms",
        f"Seeds {FINAL_SEED} to {FINAL_SEED + seeds - 1}, test scored once per run, each arm at the lr it chose on validation;")
    write_final_table(out / "final", text, record)
    return text
