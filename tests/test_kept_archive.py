"""Kept run records are committed packed (kept.tar.xz, its manifest folded into docs/results/kept-archives.json;
harness/protocol/kept_runs.py): the archive restores every file bit for bit, the same records always pack to
the same bytes, a damaged archive or manifest is refused, naming the file, before anything is read, and a
folder published in the earlier layout (kept.manifest.json beside the archive) reads the same and folds in."""
from __future__ import annotations

import json
import shutil

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


def _files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("folded", [False, True], ids=["manifest beside", "manifest folded"])
@pytest.mark.parametrize("damage", ["flip a byte of the archive", "truncate the archive", "edit the manifest"])
def test_a_damaged_archive_is_refused_naming_the_file_and_the_fix(tmp_path, damage, folded):
    kept = tmp_path / "results" / "protocol-x" / "kept"
    _records(kept)
    kept_runs.pack(kept)
    if folded:
        kept_runs.fold(tmp_path / "results")
    archive = kept_runs.archive_of(kept)
    manifest = tmp_path / "results" / kept_runs.INDEX if folded else kept_runs.manifest_of(kept)
    data = bytearray(archive.read_bytes())
    if damage == "flip a byte of the archive":
        data[len(data) // 2] ^= 0xFF
        archive.write_bytes(bytes(data))
    elif damage == "truncate the archive":
        archive.write_bytes(bytes(data[:-20]))
    else:
        record = json.loads(manifest.read_text())
        entry = record["protocol-x/kept.tar.xz"] if folded else record
        next(iter(entry["files"].values()))["sha256"] = "0" * 64
        manifest.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"kept\.tar\.xz.*(kept\.manifest|kept-archives)\.json.*git checkout") as error:
        with kept_runs.opened(kept):
            pass
    assert str(manifest) in str(error.value)  # the fix names the file the manifest was read from


def test_a_published_folder_reads_with_its_manifest_beside_it_then_folds_into_the_index(tmp_path):
    """The layout ``pack`` writes (and an older checkout's ``scripts/protocol64.sh publish`` wrote): the manifest
    beside the archive. It reads as is; ``fold`` checks it and moves it into RESULTS/kept-archives.json beside
    the entries already there, after which the archive reads the same."""
    results = tmp_path / "results"
    first, second = results / "protocol-a" / "kept", results / "protocol-b" / "kept"
    files = _records(first)
    _records(second)
    kept_runs.pack(first)
    assert kept_runs.main(["fold", str(results)]) == 0  # protocol-a folded first
    kept_runs.pack(second)  # then a folder in the published layout comes in
    assert kept_runs.manifest_of(second).is_file() and not kept_runs.manifest_of(first).is_file()
    with kept_runs.opened(second) as folder:
        assert _files(folder) == files
    assert [p.parent.name for p in kept_runs.fold(results)] == ["protocol-b"]
    assert sorted(p.relative_to(results).as_posix() for p in results.rglob("*") if p.is_file()) == [
        "kept-archives.json", "protocol-a/kept.tar.xz", "protocol-b/kept.tar.xz"]
    assert sorted(json.loads((results / kept_runs.INDEX).read_text())) == ["protocol-a/kept.tar.xz",
                                                                          "protocol-b/kept.tar.xz"]
    for kept in (first, second):
        with kept_runs.opened(kept) as folder:
            assert _files(folder) == files


def test_packing_a_folded_archive_again_moves_its_manifest_beside_it_and_a_stale_one_is_refused(tmp_path):
    """``keep`` re-packs an archive it adds runs to: the new manifest is written beside it and its entry in the
    index dropped, so the two never disagree here; a copy of the folder from elsewhere that meets an older
    entry (both manifests, different) is refused with the fold that settles it, and fold refuses a manifest
    its archive does not match."""
    results = tmp_path / "results"
    kept = results / "protocol-a" / "kept"
    _records(kept)
    kept_runs.pack(kept)
    kept_runs.fold(results)
    with kept_runs.opened(kept) as folder:
        shutil.copytree(folder, kept)
    (kept / "tune" / "extra.json").write_bytes(b"{}")
    kept_runs.pack(kept)
    assert kept_runs.manifest_of(kept).is_file() and not (results / kept_runs.INDEX).exists()
    kept_runs.fold(results)
    stale = (results / kept_runs.INDEX).read_text()
    with kept_runs.opened(kept) as folder:
        shutil.copytree(folder, kept)
    (kept / "tune" / "extra.json").write_bytes(b"[]")
    kept_runs.pack(kept)
    (results / kept_runs.INDEX).write_text(stale)  # the index as committed before the copy came in
    with pytest.raises(ValueError, match=r"two manifests that differ.*kept_runs fold"):
        with kept_runs.opened(kept):
            pass
    assert kept_runs.fold(results) == [kept_runs.manifest_of(kept)]
    with kept_runs.opened(kept) as folder:
        assert (folder / "tune" / "extra.json").read_bytes() == b"[]"
    kept_runs.archive_of(kept).write_bytes(b"not an archive")
    manifest = json.loads((results / kept_runs.INDEX).read_text())["protocol-a/kept.tar.xz"]
    kept_runs.manifest_of(kept).write_text(json.dumps(manifest))
    before = (results / kept_runs.INDEX).read_bytes()
    with pytest.raises(ValueError, match=r"does not match its manifest"):
        kept_runs.fold(results)
    assert (results / kept_runs.INDEX).read_bytes() == before and kept_runs.manifest_of(kept).is_file()


def test_every_committed_archive_has_its_manifest_in_the_index_and_none_beside_it():
    """The repository's layout (docs/RESULTS_LAYOUT.md): one index for all kept archives."""
    results = kept_runs.ROOT / "docs" / "results"
    archives = sorted(p.relative_to(results).as_posix() for p in results.glob("*/*.tar.xz"))
    assert archives and sorted(json.loads((results / kept_runs.INDEX).read_text())) == archives
    assert not list(results.glob("*/*.manifest.json")), "fold them: python -m speccond.harness.protocol.kept_runs fold"


def test_keep_adds_to_a_packed_archive_and_restore_reads_every_run_back(tmp_path):
    """On real records (the committed ListOps protocol's kept runs): the command line's keep unpacks a packed
    KEPT, adds the runs it lacks and packs again; restore then brings every run back, file for file."""
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
