"""The associative-recall task (harness/tasks/catalogue/associative_recall.py), added as one file and one line
of the task registry: generated with its pinned checksum by ``speccond data prepare``, every label the
value paired with the queried key, and a run of it trained by ``speccond train`` from the task's name alone."""
from __future__ import annotations

import json

import pytest
import torch

from speccond.data import store
from speccond.harness.cli import main
from speccond.harness.config.presets import preset
from speccond.harness.tasks.catalogue import associative_recall as recall
from speccond.harness.tasks.datasets import task, task_shape


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A data folder holding the task's dataset, prepared through the command line (the pinned SHA-256 checked)."""
    home = tmp_path_factory.mktemp("recall-data")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECCOND_DATA", str(home))
        assert main(["data", "prepare", "associative-recall"]) == 0
        yield home, store.load(recall.SPEC)


def test_prepare_writes_the_pinned_arrays_with_the_documented_shapes(prepared):
    home, arrays = prepared
    assert (home / "associative-recall" / store.ARRAYS).is_file()
    assert store.arrays_sha256(arrays) == recall.SPEC.generated_sha256
    for split, size in (("train", 8000), ("val", 1000), ("test", 1000)):
        assert arrays[f"{split}_tokens"].shape == (size, 64) and arrays[f"{split}_tokens"].dtype == torch.int16
        assert arrays[f"{split}_labels"].shape == arrays[f"{split}_lengths"].shape == (size,)


def test_every_label_is_the_value_paired_with_the_queried_key_and_splits_are_disjoint(prepared):
    _, arrays = prepared
    rows = {}
    for split in ("train", "val", "test"):
        tokens, lengths, labels = (arrays[f"{split}_{key}"] for key in ("tokens", "lengths", "labels"))
        for row, length, label in zip(tokens.tolist(), lengths.tolist(), labels.tolist()):
            assert 10 <= length <= 64 and all(t == recall.PAD for t in row[length:]) and recall.PAD not in row[:length]
            keys = row[:length - 2:2]
            assert len(set(keys)) == len(keys) and all(recall.FIRST_KEY <= k < recall.VOCAB for k in keys)
            assert recall.recalled(row) == label
        rows[split] = {tuple(row) for row in tokens.tolist()}
        assert len(rows[split]) == tokens.shape[0]
        assert sorted(set(labels.tolist())) == list(range(10))
    assert not rows["train"] & rows["test"] and not rows["train"] & rows["val"] and not rows["val"] & rows["test"]


def test_a_malformed_example_is_refused_by_the_reader():
    with pytest.raises(ValueError, match=r"an associative-recall example is k v \.\.\. k v \? k, got tokens"):
        recall.recalled([12, 2, 13])


def test_the_task_reads_as_tokens_and_its_presets_train_a_nystromformer():
    assert task("associative-recall").data is recall.SPEC
    shape = task_shape("associative-recall")
    assert (shape.kind, shape.length, shape.vocab, shape.classes) == ("sequence", 64, 44, 10)
    assert "model=nystromformer" in preset("quick", "associative-recall")
    assert "landmarks=16" in preset("full", "associative-recall")


def test_a_tiny_run_trains_on_it_from_the_command_line(prepared, tmp_path, monkeypatch, capsys):
    home, _ = prepared
    monkeypatch.setenv("SPECCOND_DATA", str(home))
    out = tmp_path / "run"
    tiny = ["task=associative-recall", "embed_dim=16", "depth=1", "train_size=64", "test_size=32", "epochs=1",
            "batch_size=16", "warmup_steps=1", "track_every=2"]
    given = {pair.partition("=")[0] for pair in tiny}  # train's --set gives each key once: the preset's are replaced
    kept = [pair for pair in preset("quick", "associative-recall") if pair.partition("=")[0] not in given]
    argv = ["train", "--out", str(out), *(f"--set={pair}" for pair in (*kept, *tiny))]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["kind"] == "eval" and result["total_steps"] == 4 and 0.0 <= result["accuracy"] <= 1.0, result
    recorded = json.loads((out / "config.json").read_text())["config"]
    assert (recorded["task"], recorded["model"], recorded["landmarks"]) == ("associative-recall", "nystromformer", 16)


def test_a_misspelt_task_is_one_line_naming_it_and_nothing_is_written(tmp_path, capsys):
    assert main(["train", "--out", str(tmp_path / "run"), "--set", "task=associative-recal"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "unknown task 'associative-recal'; nearest: associative-recall; known tasks: " in err
    assert list(tmp_path.iterdir()) == []
