"""Kept run records are committed packed (kept.tar.xz and kept.manifest.json, harness/protocol/kept_runs.py): the
archive restores every file bit for bit, the same records always pack to the same bytes, and a damaged
archive or manifest is refused, naming the file, before anything is read."""
from __future__ import annotations

import json

import pytest

from speccond.harness.protocol import kept_runs


def _records(folder):
    files = {"tune/baseline-lr=0.001/seed-0/config.json": b'{"config": {}}',
             "tune/baseline-lr=0.001/seed-0/metrics.jsonl": b'{"kind": "eval"}\n',
             "final/spectral/seed-100/kappa.json": b'{"kappa_qkv": 1.5, "step": 10}'}
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return files


def test_pack_then_open_gives_every_file_back_bit_for_bit_and_packing_is_deterministic(tmp_path):
    kept = tmp_path / "kept"
    files = _records(kept)
    kept_runs.pack(kept)
    assert not kept.exists()
    first = kept_runs.archive_of(kept).read_bytes()
    with kept_runs.opened(kept) as folder:
        assert {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()} == files
        again = tmp_path / "again" / "kept"
        _records(again)
        kept_runs.pack(again)
    assert kept_runs.archive_of(again).read_bytes() == first  # same records, same bytes: no churn in git


@pytest.mark.parametrize("damage", ["flip a byte of the archive", "truncate the archive", "edit the manifest"])
def test_a_damaged_archive_is_refused_naming_the_file_and_the_fix(tmp_path, damage):
    kept = tmp_path / "kept"
    _records(kept)
    kept_runs.pack(kept)
    archive, manifest = kept_runs.archive_of(kept), kept_runs.manifest_of(kept)
    data = bytearray(archive.read_bytes())
    if damage == "flip a byte of the archive":
        data[len(data) // 2] ^= 0xFF
        archive.write_bytes(bytes(data))
    elif damage == "truncate the archive":
        archive.write_bytes(bytes(data[:-20]))
    else:
        record = json.loads(manifest.read_text())
        next(iter(record["files"].values()))["sha256"] = "0" * 64
        manifest.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"kept\.(tar\.xz|manifest\.json).*git checkout"):
        with kept_runs.opened(kept):
            pass


def test_keep_adds_to_a_packed_archive_and_restore_reads_every_run_back(tmp_path):
    """On real records (the committed ListOps protocol's kept runs): the command line's keep unpacks a packed
    KEPT, adds the runs it lacks and packs again; restore then brings every run back, file for file."""
    import shutil

    committed = kept_runs.ROOT / "docs" / "results" / "protocol-lra-listops" / "kept"
    with kept_runs.opened(committed) as folder:
        out = tmp_path / "out"
        shutil.copytree(folder, out)  # a tune folder holding every kept run
    runs = kept_runs.finished_runs(out)
    assert len(runs) > 2, "the committed archive should hold finished ListOps runs"
    smaller = tmp_path / "kept"
    shutil.copytree(out, smaller)
    shutil.rmtree(smaller / runs[0].relative_to(out))  # KEPT lacks one run that OUT has
    kept_runs.pack(smaller)
    assert kept_runs.main(["keep", str(out), str(smaller)]) == 0
    assert not smaller.exists() and kept_runs.archive_of(smaller).is_file()  # packed again
    restored = tmp_path / "restored"
    assert kept_runs.main(["restore", str(restored), str(smaller)]) == 0
    assert [r.relative_to(restored) for r in kept_runs.finished_runs(restored)] == [r.relative_to(out) for r in runs]
    for run in runs:
        for name in kept_runs.FILES:
            source = run / name
            if source.is_file():
                assert (restored / run.relative_to(out) / name).read_bytes() == source.read_bytes()
