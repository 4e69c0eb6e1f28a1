"""Your own texts streamed (text:DIR?...&stream=1, data/text_stream.py and harness/training/streaming.py): prepared
a chunk of rows at a time into memory-mapped token ids that equal the in-memory cache's, with the same recorded
SHA-256; a run reads its batches through a DataLoader (with or without workers) and trains BERT to the in-memory
run's figures exactly; it resumes to the same bytes, and under torchrun (2 gloo processes) each rank reads its own
rows and evaluates its own shard, ending at one process's figures. A damaged cache and a wrong name or column are
refused in one line."""
from __future__ import annotations

import json
import pickle

import pytest
import torch

from speccond.harness.cli import main
from tests.test_text_files import SPLITS, local_tokenizer, rows, write
from tests.torchrun import one_and_two_processes

pytest.importorskip("datasets")
pytest.importorskip("pyarrow")

BERT = {"model": "bert", "embed_dim": 32, "depth": 1, "num_heads": 2, "batch_size": 16, "epochs": 2, "lr": 1e-3,
        "warmup_steps": 1, "method": "spectral", "eval_batch_size": 7}
OPTIONS = "text=sentence&text_pair=other&label=label&width=24&vocab=120"


@pytest.fixture
def data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "data"))
    return tmp_path / "data"


def records(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def config(**fields):
    from speccond.harness.config.train_config import TrainConfig

    return TrainConfig().replaced(**{**BERT, **fields})


@pytest.mark.parametrize("kind, tokenizer", [("csv", False), ("parquet", False), ("saved", False), ("parquet", True)])
def test_preparation_chunk_by_chunk_stores_the_one_shot_arrays_and_checksum(tmp_path, data_home, monkeypatch, kind,
                                                                          tokenizer):
    """Chunks of 5 rows (CSV blocks of 256 bytes): the 64 + 20 rows are read in many chunks, and the token ids,
    lengths, labels and tokenizer equal the in-memory preparation's, as does the SHA-256 the cache records."""
    from speccond import data
    from speccond.data import text_files, text_stream

    monkeypatch.setattr(text_stream, "CHUNK_ROWS", 5)
    monkeypatch.setattr(text_stream, "CSV_BLOCK_BYTES", 256)
    if tokenizer:
        local_tokenizer(tmp_path / "bpe")
    options = OPTIONS.replace("&vocab=120", f"&tokenizer={tmp_path / 'bpe'}") if tokenizer else OPTIONS
    name = f"text:{write(tmp_path / kind, kind)}?{options}"
    source = text_files.parse(name)
    found, _ = text_stream.splits(source)
    chunks = list(found["train"].chunks(["sentence", "label"]))
    assert len(chunks) > 4 and sum(len(chunk["label"]) for chunk in chunks) == 64
    assert max(len(chunk["label"]) for chunk in chunks) <= (5 if kind != "csv" else 64 // 4)
    folder = data.prepare(f"{name}&stream=1")
    small, tokens = text_stream.open_cache(folder, name)
    memory = data.load(name)
    assert sorted([*small, "test_tokens", "train_tokens"]) == sorted(memory)
    assert all(torch.equal(small[key], memory[key]) for key in small)
    for split in ("train", "test"):
        assert isinstance(tokens[split], __import__("numpy").memmap)
        assert torch.equal(torch.from_numpy(tokens[split][:]), memory[f"{split}_tokens"])
    recorded = text_stream.metadata(f"{name}&stream=1")
    assert recorded["sha256"] == text_files.metadata(name)["sha256"] and recorded["stream"] == "1"
    dataset = text_stream.TokenRows(folder / "train_tokens.npy", torch.arange(64).flip(0), small["train_labels"])
    assert dataset[0][0].tolist() == memory["train_tokens"][63].tolist()
    assert dataset[0][1:] == (int(memory["train_labels"][63]), 0)
    copy = pickle.loads(pickle.dumps(dataset))  # what a loader's worker receives: the path and row numbers, no ids
    assert copy._ids is None and torch.equal(copy[5][0], dataset[5][0])
    assert data.prepare(f"{name}&stream=1") == folder  # current: not read again
    with pytest.raises(ValueError, match="never read whole into memory"):
        data.load(f"{name}&stream=1")


def test_a_damaged_token_file_is_refused_and_removed(tmp_path, data_home):
    from speccond import data
    from speccond.data import text_stream

    name = f"text:{write(tmp_path / 'parquet', 'parquet')}?{OPTIONS}&stream=1"
    folder = data.prepare(name)
    ids = folder / "train_tokens.npy"
    damaged = bytearray(ids.read_bytes())
    damaged[-3] ^= 1
    ids.write_bytes(bytes(damaged))
    with pytest.raises(ValueError, match="are damaged and were removed"):
        text_stream.open_cache(folder, name)
    assert not folder.exists()
    small, _ = text_stream.open_cache(data.prepare(name), name)  # read anew
    assert small["train_labels"].tolist() == SPLITS["train"]["label"]


def test_a_streamed_run_trains_bert_to_the_in_memory_runs_figures_exactly(tmp_path, data_home):
    """The same rows in the same batches through the same arithmetic: every metrics row (validation and test,
    each epoch) equals the in-memory run's exactly, with or without loader workers."""
    from speccond.harness.training.train import train

    task = f"text:{write(tmp_path / 'parquet', 'parquet')}?{OPTIONS}"
    memory = train(config(task=task, val_size=8), tmp_path / "memory", progress=False)
    streamed = train(config(task=f"{task}&stream=1", val_size=8), tmp_path / "stream", progress=False)
    workers = train(config(task=f"{task}&stream=1", val_size=8, num_workers=2), tmp_path / "workers", progress=False)
    assert memory["step"] == streamed["step"] == 8  # 56 rows: 4 batches of 16, 2 epochs
    assert memory == streamed == workers
    assert [r for r in records(tmp_path / "memory") if r["kind"] == "val"]
    assert records(tmp_path / "memory") == records(tmp_path / "stream") == records(tmp_path / "workers")


def test_a_streamed_run_resumed_mid_epoch_ends_with_the_same_bytes(tmp_path, data_home):
    """Stopped after step 2 of 8, resumed: the loader starts at the resumed step's batch; the metrics and the
    final weights equal the uninterrupted run's exactly (and accumulation slices this rank's rows)."""
    from speccond.harness.training import checkpoint
    from speccond.harness.training.train import train

    task = f"text:{write(tmp_path / 'csv', 'csv')}?{OPTIONS}&stream=1"
    chosen = config(task=task, num_workers=1, checkpoint_every=2, accumulate_steps=2)
    train(chosen, tmp_path / "whole", progress=False)
    assert train(chosen, tmp_path / "resumed", progress=False, stop_after=2) == {}
    train(chosen, tmp_path / "resumed", progress=False)
    assert records(tmp_path / "whole") == records(tmp_path / "resumed")
    weights = [(checkpoint.latest(tmp_path / run) / "model.safetensors").read_bytes() for run in ("whole", "resumed")]
    assert weights[0] == weights[1]


def test_torchrun_two_processes_stream_the_texts_and_shard_evaluation_to_the_one_process_figures(tmp_path,
                                                                                                   data_home):
    """torchrun --nproc_per_node 2 on gloo, a loader worker per rank: each rank reads its rows of every global
    batch and evaluates its shard of the 20 test rows (10 each, none twice). The final figures and the per-epoch
    evaluation rows are one process's (accuracy equal, loss within 1e-5, DDP's all-reduced gradient)."""
    task = f"text:{write(tmp_path / 'parquet', 'parquet')}?{OPTIONS}&stream=1"
    sets = [f"{key}={value}" for key, value in BERT.items()] + [f"task={task}", "num_workers=1", "device=cpu"]
    sets = [part for pair in sets for part in ("--set", pair)]
    single, double = one_and_two_processes(["train", *sets], tmp_path, {"SPECCOND_DATA": str(data_home)})
    one, two = (json.loads(run.stdout.strip().splitlines()[-1]) for run in (single, double))
    assert one["step"] == two["step"] == 8
    assert abs(one["loss"] - two["loss"]) < 1e-5 and one["accuracy"] == two["accuracy"]
    evaluations = [[r for r in records(tmp_path / run) if r["kind"] == "eval"] for run in ("single", "double")]
    assert len(evaluations[0]) == len(evaluations[1]) == 2
    for a, b in zip(*evaluations):
        assert abs(a["loss"] - b["loss"]) < 1e-5 and a["accuracy"] == b["accuracy"]


@pytest.mark.parametrize("problem, message", [
    ("stream=2", "stream must be 0"),
    ("missing column", "the train split has no column 'sentense'"),
    ("empty text", "row 3 of the test split has no 'sentence'"),
    ("unlabelled test", "has label -1 (unlabelled examples"),
    ("in-memory workers", "num_workers=2 sets the processes that decode a streamed image folder or read streamed texts"),
])
def test_a_wrong_streamed_name_or_column_is_refused_in_one_line_and_nothing_is_written(tmp_path, data_home, capsys,
                                                                                        problem, message):
    root = tmp_path / "texts"
    options = {"stream=2": "text=sentence&label=label&stream=2", "missing column": "text=sentense&label=label&stream=1",
               "in-memory workers": "text=sentence&label=label"}.get(problem, "text=sentence&label=label&stream=1")
    test = dict(SPLITS["test"])
    if problem == "empty text":
        test["sentence"] = [None if i == 3 else text for i, text in enumerate(test["sentence"])]
    if problem == "unlabelled test":
        test["label"] = [-1] * 20
    write(root, "parquet", {"train": SPLITS["train"], "test": test})
    sets = ["--set", "num_workers=2"] if problem == "in-memory workers" else []
    out = tmp_path / "cmp"
    assert main(["compare", "--task", f"text:{root}?{options}", "--model", "bert", "--methods", "baseline",
                 "--seeds", "1", *sets, "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1, error
    assert not out.exists()
    if problem != "in-memory workers":  # a streamed task's refusals come before its cache is written
        assert not data_home.exists()


def test_a_changed_file_is_prepared_again(tmp_path, data_home):
    from speccond import data
    from speccond.data import text_stream

    root = write(tmp_path / "csv", "csv")
    name = f"text:{root}?text=sentence&label=label&vocab=100&stream=1"
    first = data.prepare(name)
    write(root, "csv", {"train": rows(65, 0), "test": SPLITS["test"]})
    second = data.prepare(name)
    assert second != first and text_stream.counts(second) == (65, 20)


def test_a_csv_text_column_of_numbers_is_read_as_written_when_streamed(tmp_path, data_home):
    """The one difference from the in-memory path (text_stream.py): pyarrow infers a CSV column of numbers as
    integers there (007 reads as 7), the streamed reader reads the text columns as the strings written."""
    from speccond import data
    from speccond.data import text_stream, wordpiece

    numbers = {split: {"code": [f"00{i % 10}" for i in range(count)], "label": [i % 2 for i in range(count)]}
               for split, count in (("train", 12), ("test", 4))}
    name = f"text:{write(tmp_path / 'codes', 'csv', numbers)}?text=code&label=label&width=8&vocab=64"
    tokenizers = {"memory": wordpiece.from_bytes(data.load(name)["tokenizer"]),
                  "stream": wordpiece.from_bytes(text_stream.open_cache(data.prepare(f"{name}&stream=1"), name)[0]
                                                 ["tokenizer"])}
    assert "007" in tokenizers["stream"].get_vocab() and "007" not in tokenizers["memory"].get_vocab()
    assert "7" in tokenizers["memory"].get_vocab()


def test_two_processes_preparing_at_once_leave_one_intact_cache(tmp_path, data_home):
    """As torchrun's ranks do on a first run: each writes its own partial folder, the first to finish moves it in
    place, the other finds it there; both return the folder, whose checksum holds."""
    import os
    import subprocess
    import sys

    from speccond.data import text_stream

    root = write(tmp_path / "parquet", "parquet", {"train": rows(400, 0), "test": rows(40, 1)})
    name = f"text:{root}?{OPTIONS}&stream=1"
    script = ("import sys; from speccond.data import text_stream; text_stream.CHUNK_ROWS = 7; "
              "print(text_stream.prepare(sys.argv[1]))")
    environment = {**os.environ, "SPECCOND_DATA": str(data_home), "OMP_NUM_THREADS": "1"}
    launched = [subprocess.Popen([sys.executable, "-c", script, name], env=environment, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(2)]
    finished = [process.communicate(timeout=300) for process in launched]
    assert [process.returncode for process in launched] == [0, 0], finished
    folders = {out.strip() for out, _ in finished}
    assert len(folders) == 1
    small, tokens = text_stream.open_cache(text_stream.prepare(name), name)  # the recorded SHA-256 holds
    assert tokens["train"].shape == (400, 24) and small["test_labels"].shape == (40,)
    assert not list(data_home.rglob("*.partial"))


@pytest.fixture
def verified(tmp_path, data_home, monkeypatch):
    """A streamed cache opened once (read whole, verified.json written) with its files' mtimes set 10 s back
    first, so the stamp vouches for them, and a count of the SHA-256 readings of the cache from then on."""
    import os

    from speccond import checksum, data
    from speccond.data import text_stream

    name = f"text:{write(tmp_path / 'parquet', 'parquet')}?{OPTIONS}&stream=1"
    folder = data.prepare(name)
    for file in text_stream.FILES:
        stat = (folder / file).stat()
        os.utime(folder / file, ns=(stat.st_atime_ns, stat.st_mtime_ns - 10**10))
    text_stream.open_cache(folder, name)
    readings = []
    real = checksum.tensors_sha256
    monkeypatch.setattr(checksum, "tensors_sha256", lambda arrays: readings.append(1) or real(arrays))
    return name, folder, readings


def test_a_verified_cache_opens_again_without_reading_its_files(verified):
    from speccond.data import text_stream

    name, folder, readings = verified
    small, tokens = text_stream.open_cache(folder, name)
    assert readings == [] and tokens["train"].shape == (64, 24)
    assert json.loads((folder / "verified.json").read_text())["sha256"] == text_stream.metadata(name)["sha256"]


def test_a_touched_but_unchanged_token_file_is_read_again_passes_and_is_stamped_anew(verified):
    import os

    from speccond.data import text_stream

    name, folder, readings = verified
    ids = folder / "train_tokens.npy"
    os.utime(ids, ns=(ids.stat().st_atime_ns, ids.stat().st_mtime_ns + 10**9))
    text_stream.open_cache(folder, name)
    assert readings == [1]
    assert json.loads((folder / "verified.json").read_text())["files"]["train_tokens.npy"][1] == ids.stat().st_mtime_ns
    text_stream.open_cache(folder, name)
    assert readings == [1]  # stamped anew: not read a third time


def test_a_truncated_token_file_is_refused_and_removed(verified):
    from speccond.data import text_stream

    name, folder, _ = verified
    ids = folder / "test_tokens.npy"
    ids.write_bytes(ids.read_bytes()[:-96])
    with pytest.raises(ValueError, match="are damaged .* run again to prepare them anew"):
        text_stream.open_cache(folder, name)
    assert not folder.exists()


def test_a_changed_byte_under_a_restored_mtime_passes_the_stamp_and_is_caught_once_verified_json_is_deleted(verified):
    """What size and mtime cannot show (text_stream.py's docstring): the same size and an mtime set back pass; a
    full reading, asked for by deleting verified.json, refuses the cache."""
    import os

    from speccond.data import text_stream

    name, folder, readings = verified
    ids = folder / "train_tokens.npy"
    before = ids.stat()
    changed = bytearray(ids.read_bytes())
    changed[-3] ^= 1
    ids.write_bytes(bytes(changed))
    os.utime(ids, ns=(before.st_atime_ns, before.st_mtime_ns))
    text_stream.open_cache(folder, name)  # not seen
    assert readings == []
    (folder / "verified.json").unlink()
    with pytest.raises(ValueError, match="are damaged"):
        text_stream.open_cache(folder, name)


def test_a_stamp_no_newer_than_its_files_is_not_trusted(verified):
    """git's racy rule: a file whose recorded mtime is not older than verified.json (written in the same tick of
    a coarse clock) is read again at the next opening, so a same-size change in that tick is caught."""
    import os

    from speccond.data import text_stream

    name, folder, readings = verified
    ids = folder / "train_tokens.npy"
    stamp = (folder / "verified.json").stat().st_mtime_ns
    os.utime(ids, ns=(ids.stat().st_atime_ns, stamp))
    text_stream.open_cache(folder, name)  # re-stamped with the file's mtime == the old stamp's: read again
    assert readings == [1]
    changed = bytearray(ids.read_bytes())
    changed[-3] ^= 1
    ids.write_bytes(bytes(changed))
    os.utime(ids, ns=(ids.stat().st_atime_ns, stamp))
    os.utime(folder / "verified.json", ns=(stamp, stamp))  # as if the stamp and the write shared one tick
    with pytest.raises(ValueError, match="are damaged"):
        text_stream.open_cache(folder, name)
