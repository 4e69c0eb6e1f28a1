"""Finished runs kept in the repository, so that a fresh clone does not train them again.

runs/ is not committed (each run's checkpoints weigh megabytes), so a protocol stage cut short by the end of
a session (or by the machine going away) would start again from nothing on a fresh machine. What the
protocol reads of a finished run is small: config.json (what ran), metrics.jsonl (its final row, and the
tracker's rows the plots draw) and timing.json (its wall time). :func:`keep` copies those files of every
finished run under OUT, tuning runs (OUT/tune) and final runs (OUT/final), into KEPT; :func:`restore`
copies them back into OUT for every run OUT does not have, where ``tuning.outcome`` reads them as finished
and ``speccond tune`` skips them.

    python -m speccond.harness.protocol.kept_runs keep runs/tune-lra-listops docs/results/protocol-lra-listops/kept
    python -m speccond.harness.protocol.kept_runs restore runs/tune-lra-listops docs/results/protocol-lra-listops/kept

The language protocol's pre-training runs (``speccond compare`` folders, OUT/<arm>/seed-<k>) are kept the same
way with ``--pretraining``, and with the one thing of their checkpoint that fine-tuning reads: the encoder's
tensors (encoder.safetensors, about 6 MB for the language preset's BERT, with encoder.json; written by
pretrained.write_kept_encoder, read by pretrained.load_pretrained). ``speccond train`` and ``compare`` return a
restored run's final row without training it again (train.train_run).

    python -m speccond.harness.protocol.kept_runs keep --pretraining runs/protocol-mlm docs/results/protocol-mlm/kept

A final run's report also reads its kappa at the end, which an untracked run computes from its checkpoint:
a kept final run carries that figure in kappa.json (runs.write_kept_kappa), written while the checkpoint
was there, and ``runs.read_run`` reads it. Nothing is overwritten: ``keep`` refuses a run that KEPT holds
with other contents, and ``restore`` leaves alone a run that OUT already has (finished, or under way from
its own checkpoint).

In the repository KEPT is packed: KEPT.tar.xz, with a manifest (the archive's size and sha256, and every
member's), so the tree holds one file a protocol instead of hundreds. ``pack`` makes them from a KEPT folder
(deterministically: the same records give the same bytes), writes the manifest beside the archive
(KEPT.manifest.json, so a freshly published folder travels whole) and removes the folder. ``fold`` moves every
such manifest of a results folder into its one index, RESULTS/kept-archives.json ({"<folder>/kept.tar.xz":
manifest}), which is how the repository commits them (docs/RESULTS_LAYOUT.md). ``keep`` and ``restore`` read a
packed KEPT through :func:`opened`, which finds its manifest in either place (both, when they agree), checks
the archive and every member against it before anything is read, and refuses a damaged one naming the file
and the fix; ``keep`` packs again what it added to.

    python -m speccond.harness.protocol.kept_runs pack docs/results/protocol-lra-listops/kept
    python -m speccond.harness.protocol.kept_runs fold docs/results
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Iterator

from speccond.harness.protocol.tuning import outcome
from speccond.harness.training.pretrained import KEPT_ENCODER, KEPT_ENCODER_RECORD, write_kept_encoder
from speccond.harness.training.runs import KEPT_KAPPA, run_status, write_kept_kappa

ROOT = Path(__file__).resolve().parents[4]  # the checkout: its docs/results hold the committed archives
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


def pretraining_runs(root: Path) -> list[Path]:
    """The run folders ROOT/<arm>/seed-<k> that hold a finished pre-training run, sorted."""
    return sorted(run for run in root.glob("*/seed-*")
                  if (run / "config.json").is_file() and run_status(run) == "finished")


def archive_of(kept: Path) -> Path:
    """Where KEPT is packed: KEPT.tar.xz."""
    return kept.with_name(kept.name + ".tar.xz")


def manifest_of(kept: Path) -> Path:
    """KEPT.manifest.json, the manifest beside the archive that ``pack`` writes: {"archive": {"size", "sha256"},
    "files": {member: {"size", "sha256"}}}."""
    return kept.with_name(kept.name + ".manifest.json")


INDEX = "kept-archives.json"  # in a results folder: {"<folder>/kept.tar.xz": manifest} of every archive under it


def index_of(kept: Path) -> tuple[Path, str]:
    """(the index that may hold KEPT's manifest, its key there): RESULTS/kept-archives.json for
    RESULTS/<folder>/kept, keyed "<folder>/kept.tar.xz"."""
    return kept.parent.parent / INDEX, f"{kept.parent.name}/{archive_of(kept).name}"


def _read_index(index: Path) -> dict:
    if not index.is_file():
        return {}
    try:
        entries = json.loads(index.read_text())
        if not isinstance(entries, dict):
            raise TypeError(f"a {type(entries).__name__}, not an object")
    except (OSError, ValueError, TypeError) as error:
        raise ValueError(f"{index}: unreadable index of kept archives ({error}); restore the committed copy "
                         f"(git checkout -- {index})") from None
    return entries


def _write_index(index: Path, entries: dict) -> None:
    if entries:
        _write_atomic(index, (json.dumps(entries, indent=1, sort_keys=True) + "\n").encode())
    elif index.is_file():
        index.unlink()


def manifest_for(kept: Path) -> tuple[dict, str]:
    """(KEPT's manifest, where it was read: a file, or "INDEX entry KEY"): KEPT.manifest.json, else its entry in
    the index (:func:`index_of`). Raises ValueError naming the files and the fix when neither holds one, when
    one is unreadable, or when both hold one and they differ."""
    beside, (index, key) = manifest_of(kept), index_of(kept)
    found = []
    if beside.is_file():
        try:
            found.append((json.loads(beside.read_text()), str(beside)))
        except (OSError, ValueError) as error:
            raise ValueError(f"{beside}: unreadable manifest of kept runs ({error}); restore the committed copies "
                             f"(git checkout -- {archive_of(kept)} {beside})") from None
    entry = _read_index(index).get(key)
    if entry is not None:
        found.append((entry, f"{index} entry {key}"))
    if not found:
        raise ValueError(f"{archive_of(kept)} has no manifest: neither {beside} nor an entry {key} in {index}; restore "
                         f"the committed copies (git checkout -- {archive_of(kept)} {index})")
    if len(found) == 2 and found[0][0] != found[1][0]:
        raise ValueError(f"{archive_of(kept)} has two manifests that differ, {beside} and its entry in {index} (it was "
                         f"packed again after it was folded); check and fold the new one: python -m "
                         f"speccond.harness.protocol.kept_runs fold {kept.parent.parent}")
    return found[0]


def _digest(data: bytes) -> dict:
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def pack(kept: Path) -> Path:
    """Pack the folder KEPT into KEPT.tar.xz and KEPT.manifest.json (an entry the index held for the archive it
    replaces is dropped: ``fold`` puts the new one there), check the archive against the folder, then remove
    the folder; returns the archive. Members are sorted and carry no time, owner or mode of this
    machine, so the same records always give the same bytes."""
    if not kept.is_dir():
        raise ValueError(f"{kept} is not a folder of kept runs; nothing to pack")
    files = sorted(path for path in kept.rglob("*") if path.is_file())
    members = {path.relative_to(kept).as_posix(): path.read_bytes() for path in files}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz", format=tarfile.PAX_FORMAT) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            archive.addfile(info, io.BytesIO(data))
    packed = buffer.getvalue()
    manifest = {"archive": _digest(packed), "files": {name: _digest(data) for name, data in members.items()}}
    index, key = index_of(kept)
    entries = _read_index(index)  # an unreadable index stops here, before anything is written
    _write_atomic(archive_of(kept), packed)
    _write_atomic(manifest_of(kept), (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    if entries.pop(key, None) is not None:  # its folded manifest is of the archive just replaced
        _write_index(index, entries)
    with tempfile.TemporaryDirectory() as scratch:  # read back before the only other copy goes
        _unpack_checked(kept, Path(scratch) / kept.name)
    shutil.rmtree(kept)
    return archive_of(kept)


def _write_atomic(path: Path, data: bytes) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_bytes(data)
    partial.replace(path)


def _unpack_checked(kept: Path, target: Path) -> None:
    """Unpack KEPT.tar.xz into TARGET after checking the archive, then every member, against its manifest."""
    manifest, where = manifest_for(kept)
    _unpack_checked_with(kept, manifest, where, target)


def _unpack_checked_with(kept: Path, manifest: dict, where: str, target: Path) -> None:
    """Unpack KEPT.tar.xz into TARGET after checking the archive, then every member, against MANIFEST (read
    from WHERE: a file, or an index's entry)."""
    archive = archive_of(kept)
    advice = f"restore the committed copies (git checkout -- {archive} {where.split(' entry ')[0]})"
    try:
        expected_archive, expected_files = manifest["archive"], manifest["files"]
    except (KeyError, TypeError) as error:
        raise ValueError(f"{where}: unreadable manifest of kept runs (no {error}); {advice}") from None
    packed = archive.read_bytes()
    if _digest(packed) != expected_archive:
        raise ValueError(f"{archive} does not match its manifest ({where}: size or sha256 differ); {advice}")
    found = {}
    with tarfile.open(fileobj=io.BytesIO(packed), mode="r:xz") as members:
        for info in members.getmembers():
            if not info.isfile() or info.name.startswith("/") or ".." in Path(info.name).parts:
                raise ValueError(f"{archive}: member {info.name!r} is not a plain relative file; {advice}")
            found[info.name] = members.extractfile(info).read()
    if {name: _digest(data) for name, data in found.items()} != expected_files:
        raise ValueError(f"{archive}: its members differ from its manifest ({where}); {advice}")
    for name, data in found.items():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_bytes(data)


def fold(results: Path) -> list[Path]:
    """Move every RESULTS/<folder>/kept.manifest.json into RESULTS/kept-archives.json, each after its archive and
    every member check against it (a damaged one stops the fold before anything is written); returns the
    manifests folded. An entry already there for the archive is replaced by the checked manifest."""
    if not results.is_dir():
        raise ValueError(f"{results} is not a folder; give the results folder whose */kept.manifest.json to fold "
                         "(docs/results)")
    manifests = sorted(path for path in results.glob("*/*.manifest.json") if archive_of(
        path.with_name(path.name.removesuffix(".manifest.json"))).is_file())
    if not manifests:
        return []
    index = results / INDEX
    entries = _read_index(index)
    for path in manifests:
        kept = path.with_name(path.name.removesuffix(".manifest.json"))
        try:
            manifest = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise ValueError(f"{path}: unreadable manifest of kept runs ({error}); restore it from where the folder "
                             "was published, or pack the records again") from None
        entries.pop(index_of(kept)[1], None)  # checked against the manifest beside it alone
        with tempfile.TemporaryDirectory() as scratch:
            _unpack_checked_with(kept, manifest, str(path), Path(scratch))
        entries[index_of(kept)[1]] = manifest
    _write_index(index, entries)
    for path in manifests:
        path.unlink()
    return manifests


@contextlib.contextmanager
def opened(kept: Path) -> Iterator[Path]:
    """KEPT as a folder to read: itself when it is one, else its checked archive unpacked into a temporary
    folder (removed on exit); a KEPT that is neither reads as an empty folder."""
    if kept.is_dir() or not archive_of(kept).is_file():
        yield kept
        return
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / kept.name
        folder.mkdir()
        _unpack_checked(kept, folder)
        yield folder


def kept_list(kept: Path, pretraining: bool = False) -> list[str]:
    """Every run KEPT holds (only finished runs are kept), packed or not, as <stage>/<arm>/seed-<k> (with
    ``pretraining``: <arm>/seed-<k>); none when KEPT is neither a folder nor an archive."""
    with opened(kept) as folder:
        runs = sorted(folder.glob("*/seed-*")) if pretraining else sorted(
            [*folder.glob("tune/*/seed-*"), *folder.glob("final/*/seed-*")])
        return [run.relative_to(folder).as_posix() for run in runs]


def keep(out: Path, kept: Path, pretraining: bool = False) -> list[Path]:
    """Copy the kept files of every finished run under OUT into KEPT (a final run with its kappa.json, a
    pre-training run, with PRETRAINING, with its kappa.json and encoder); returns the runs newly kept. Raises
    ValueError, before copying anything, when KEPT already holds one of them with other contents."""
    finals = pretraining_runs(out) if pretraining else final_runs(out)
    runs = finals if pretraining else tuning_runs(out) + finals
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
        _copy(run, kept / run.relative_to(out), kappa=run in finals, encoder=pretraining)
    return new


def keep_packed(out: Path, kept: Path, pretraining: bool = False) -> list[Path]:
    """:func:`keep` into KEPT whether it is a folder or packed; a packed KEPT is unpacked (checked), added to
    and packed again."""
    if kept.is_dir() or not archive_of(kept).is_file():
        return keep(out, kept, pretraining)
    with opened(kept) as folder:
        new = keep(out, folder, pretraining)
        if new:
            shutil.copytree(folder, kept)
            pack(kept)
    return new


def restore(kept: Path, out: Path, pretraining: bool = False) -> list[Path]:
    """Copy every run KEPT holds into OUT where OUT does not have it; returns the runs restored."""
    restored = []
    for record in pretraining_runs(kept) if pretraining else finished_runs(kept):
        target = out / record.relative_to(kept)
        if not target.exists():
            _copy(record, target)
            restored.append(target)
    return restored


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def _copy(source: Path, target: Path, kappa: bool = False, encoder: bool = False) -> None:
    """The kept files of ``source`` into ``target`` (with KAPPA, its kappa.json; with ENCODER, its encoder
    files: each kept from the run's own copy, else computed from its checkpoint), through a temporary folder
    renamed at the end, so a copy cut short never leaves a folder that reads as a run."""
    partial = target.with_name(f".{target.name}.partial")  # hidden: no glob of seed-* finds it
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for name in FILES + (KEPT_KAPPA, KEPT_ENCODER, KEPT_ENCODER_RECORD):
        if (source / name).is_file():
            shutil.copy2(source / name, partial / name)
    if kappa and not (partial / KEPT_KAPPA).is_file():
        write_kept_kappa(source, partial)
    if encoder and not (partial / KEPT_ENCODER).is_file():
        write_kept_encoder(source, partial)
    partial.rename(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("keep", "restore", "pack", "list", "fold"))
    parser.add_argument("out", type=Path, nargs="?", help="the speccond tune folder (runs/tune-NAME), or with --pretraining "
                        "the speccond compare folder of pre-training runs")
    parser.add_argument("kept", type=Path, nargs="?", help="where the records are kept (docs/results/protocol-NAME/kept)")
    parser.add_argument("--pretraining", action="store_true",
                        help="OUT is a speccond compare folder of pre-training runs (runs/protocol-mlm): keep their encoders too")
    args = parser.parse_intermixed_args(argv)  # a flag may stand between the paths
    if args.action == "fold":  # one path: a results folder
        args.kept = args.kept or args.out or ROOT / "docs" / "results"
    elif args.action in ("pack", "list"):  # one path: KEPT
        args.kept = args.kept or args.out
    elif args.kept is None:
        parser.error(f"{args.action} takes OUT and KEPT")
    try:
        if args.action == "pack":
            print(f"packed into {pack(args.kept)} and {manifest_of(args.kept)}")
            return 0
        if args.action == "fold":  # KEPT is a results folder here
            folded = fold(args.kept)
            print(f"{len(folded)} manifest(s) checked and folded into {args.kept / INDEX}")
            return 0
        if args.action == "list":
            print("".join(f"{run}\n" for run in kept_list(args.kept, args.pretraining)), end="")
            return 0
        if args.action == "keep":
            runs = keep_packed(args.out, args.kept, args.pretraining)
        else:
            with opened(args.kept) as folder:
                runs = restore(folder, args.out, args.pretraining)
    except ValueError as error:
        print(f"kept_runs: {error}", file=sys.stderr)
        return 1
    verb = {"keep": f"kept in {args.kept}", "restore": f"restored into {args.out}"}[args.action]
    print(f"{len(runs)} finished run(s) {verb}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
