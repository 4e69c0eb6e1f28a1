"""Finished tuning runs kept in the repository, so that a fresh clone does not train them again.

runs/ is not committed (each run's checkpoints weigh megabytes), so a tuning stage cut short by the end of a
session would start again from nothing on a fresh machine. What the choice reads of a finished tuning run is
small: config.json (what ran) and metrics.jsonl (its final validation row), with timing.json (its wall
time). :func:`keep` copies those files of every finished tuning run under OUT/tune into KEPT/tune;
:func:`restore` copies them back into OUT/tune for every run OUT does not have, where
``tuning.outcome`` reads them as finished and ``speccond tune`` skips them.

    .venv/bin/python -m speccond.experiments.kept_runs keep runs/tune-lra-listops docs/results/protocol-lra-listops/kept
    .venv/bin/python -m speccond.experiments.kept_runs restore runs/tune-lra-listops docs/results/protocol-lra-listops/kept

Only tuning runs are kept: nothing reads more of them than their final validation figure, whereas a final
run's report also reads its checkpoint (kappa). Nothing is overwritten: ``keep`` refuses a run that KEPT
holds with other contents, and ``restore`` leaves alone a run that OUT already has (finished, or under way
from its own checkpoint).
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from speccond.experiments.tuning import outcome

FILES = ("config.json", "metrics.jsonl", "timing.json")  # what is kept of a run; the first two are required


def tuning_runs(root: Path) -> list[Path]:
    """The run folders ROOT/tune/<arm>-lr=<lr>/seed-<k> that hold a finished tuning run, sorted."""
    return sorted(run for run in root.glob("tune/*/seed-*")
                  if (run / "config.json").is_file() and outcome(run, "val") is not None)


def keep(out: Path, kept: Path) -> list[Path]:
    """Copy the kept files of every finished tuning run under OUT into KEPT; returns the runs newly kept.
    Raises ValueError, before copying anything, when KEPT already holds one of them with other contents."""
    runs = tuning_runs(out)
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
        _copy(run, kept / run.relative_to(out))
    return new


def restore(kept: Path, out: Path) -> list[Path]:
    """Copy every run KEPT holds into OUT where OUT does not have it; returns the runs restored."""
    restored = []
    for record in tuning_runs(kept):
        target = out / record.relative_to(kept)
        if not target.exists():
            _copy(record, target)
            restored.append(target)
    return restored


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def _copy(source: Path, target: Path) -> None:
    """The kept files of ``source`` into ``target``, through a temporary folder renamed at the end, so a
    copy cut short never leaves a folder that reads as a run."""
    partial = target.with_name(f".{target.name}.partial")  # hidden: no glob of seed-* finds it
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for name in FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, partial / name)
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
    print(f"{len(runs)} finished tuning run(s) {verb}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
