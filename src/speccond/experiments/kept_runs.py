"""Finished runs kept in the repository, so that a fresh clone does not train them again.

runs/ is not committed (each run's checkpoints weigh megabytes), so a protocol stage cut short by the end of
a session (or by the machine going away) would start again from nothing on a fresh machine. What the
protocol reads of a finished run is small: config.json (what ran), metrics.jsonl (its final row, and the
tracker's rows the plots draw) and timing.json (its wall time). :func:`keep` copies those files of every
finished run under OUT, tuning runs (OUT/tune) and final runs (OUT/final), into KEPT; :func:`restore`
copies them back into OUT for every run OUT does not have, where ``tuning.outcome`` reads them as finished
and ``speccond tune`` skips them.

    .venv/bin/python -m speccond.experiments.kept_runs keep runs/tune-lra-listops docs/results/protocol-lra-listops/kept
    .venv/bin/python -m speccond.experiments.kept_runs restore runs/tune-lra-listops docs/results/protocol-lra-listops/kept

A final run's report also reads its kappa at the end, which an untracked run computes from its checkpoint:
a kept final run carries that figure in kappa.json (runs.write_kept_kappa), written while the checkpoint
was there, and ``runs.read_run`` reads it. Nothing is overwritten: ``keep`` refuses a run that KEPT holds
with other contents, and ``restore`` leaves alone a run that OUT already has (finished, or under way from
its own checkpoint).
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from speccond.experiments.runs import KEPT_KAPPA, write_kept_kappa
from speccond.experiments.tuning import outcome

FILES = ("config.json", "metrics.jsonl", "timing.json")  # what is kept of a run; the first two are required


def tuning_runs(root: Path) -> list[Path]:
    """The run folders ROOT/tune/<arm>-lr=<lr>/seed-<k> that hold a finished tuning run, sorted."""
    return sorted(run for run in root.glob("tune/*/seed-*")
                  if (run / "config.json").is_file() and outcome(run, "val") is not None)


def final_runs(root: Path) -> list[Path]:
    """The run folders ROOT/final/<arm>/seed-<k> that hold a finished (or diverged) final run, sorted."""
    return sorted(run for run in root.glob("final/*/seed-*")
                  if (run / "config.json").is_file() and outcome(run, "test") is not None)


def finished_runs(root: Path) -> list[Path]:
    return tuning_runs(root) + final_runs(root)


def keep(out: Path, kept: Path) -> list[Path]:
    """Copy the kept files of every finished run under OUT into KEPT (a final run with its kappa.json);
    returns the runs newly kept. Raises ValueError, before copying anything, when KEPT already holds one of
    them with other contents."""
    finals = final_runs(out)
    runs = tuning_runs(out) + finals
    new, clashes = [], []
    for run in runs:
        target = kept / run.relative_to(out)
        if not target.exists():
            new.append(run)
        elif any(_read(run / name) != _read(target / name) for name in FILES):
            clashes.append(str(run.relative_to(out)))
    if clashes:
        raise ValueError(f"{kept} keeps other records of {', '.join(clashes)} than {out} holds; compare the two "
                         "(a run trained twice should give the same figures) before replacing either")
    for run in new:
        _copy(run, kept / run.relative_to(out), kappa=run in finals)
    return new


def restore(kept: Path, out: Path) -> list[Path]:
    """Copy every run KEPT holds into OUT where OUT does not have it; returns the runs restored."""
    restored = []
    for record in finished_runs(kept):
        target = out / record.relative_to(kept)
        if not target.exists():
            _copy(record, target)
            restored.append(target)
    return restored


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def _copy(source: Path, target: Path, kappa: bool = False) -> None:
    """The kept files of ``source`` into ``target`` (with KAPPA, its kappa.json: kept from the run's own
    kappa.json, else computed from its checkpoint), through a temporary folder renamed at the end, so a copy
    cut short never leaves a folder that reads as a run."""
    partial = target.with_name(f".{target.name}.partial")  # hidden: no glob of seed-* finds it
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for name in FILES + (KEPT_KAPPA,):
        if (source / name).is_file():
            shutil.copy2(source / name, partial / name)
    if kappa and not (partial / KEPT_KAPPA).is_file():
        write_kept_kappa(source, partial)
    partial.rename(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("keep", "restore"))
    parser.add_argument("out", type=Path, help="the speccond tune folder (runs/tune-NAME)")
    parser.add_argument("kept", type=Path, help="where the records are kept (docs/results/protocol-NAME/kept)")
    args = parser.parse_args(argv)
    try:
        runs = keep(args.out, args.kept) if args.action == "keep" else restore(args.kept, args.out)
    except ValueError as error:
        print(f"kept_runs: {error}", file=sys.stderr)
        return 1
    verb = {"keep": f"kept in {args.kept}", "restore": f"restored into {args.out}"}[args.action]
    print(f"{len(runs)} finished run(s) {verb}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
