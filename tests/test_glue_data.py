"""GLUE SST-2, CoLA, MRPC and RTE as read from the shared data folder (speccond.data.glue), their online path,
and ``speccond data list``."""
from __future__ import annotations

import pytest

from speccond.data import glue
from speccond.data.shared import shared_checksum, shared_data_dir

# Rows per split of the shared copy; GLUE publishes MRPC train 3,668 and RTE train 2,490 (glue.py's docstring).
ROWS = {"sst2": {"train": 67349, "dev": 872, "test": 1821}, "cola": {"train": 8551, "dev": 1043},
        "mrpc": {"train": 3667, "dev": 408, "test": 1725}, "rte": {"train": 2489, "dev": 277}}


@pytest.fixture(scope="module")
def text():
    folder = shared_data_dir()
    if folder is None or not (folder / "text").is_dir():
        pytest.skip("no shared data folder with text/ (put shared/data beside the checkout or set SPECCOND_SHARED_DATA)")
    return folder / "text"


@pytest.mark.parametrize("name", list(glue.TASKS))
def test_every_split_has_its_row_count_labels_and_the_checksum_sha256sums_lists(text, name):
    task = glue.TASKS[name]
    for split, (path, digest) in task.files.items():
        assert shared_checksum(f"text/{path}") == digest
        examples = glue.read_split(task, split, text / path)
        assert len(examples.first) == len(examples.labels) == ROWS[name][split]
        assert (examples.second is not None) == (name in ("mrpc", "rte")) and set(examples.labels) == {0, 1}
        assert all(examples.first) and (examples.second is None or all(examples.second))


def test_the_label_order_is_glues(text):
    first = {name: glue.read_split(task, "train", text / task.files["train"][0]) for name, task in glue.TASKS.items()}
    assert (first["sst2"].first[0], first["sst2"].labels[0]) == ("hide new secretions from the parental units ", 0)
    assert first["cola"].labels[:2] == [1, 1] and first["cola"].first[0].startswith("Our friends won't buy this")
    assert first["mrpc"].labels[0] == 1 and first["mrpc"].first[0].startswith("Amrozi accused his brother")
    assert first["rte"].labels[0] == 1 and glue.TASKS["rte"].classes[1] == "not_entailment"


@pytest.mark.parametrize("change, message", [
    (lambda lines: ["sentence\tgrade"] + lines[1:], r"sst2/dev.tsv: expected the header \('sentence', 'label'\)"),
    (lambda lines: lines[:-1], r"sst2/dev.tsv: expected 872 rows, found 871"),
    (lambda lines: lines[:5] + ["a fine film\t2"] + lines[6:], r"sst2/dev.tsv, line 6: label '2' is not one of"),
    (lambda lines: lines[:5] + ["a fine film"] + lines[6:], r"sst2/dev.tsv, line 6: expected 2 tab-separated columns"),
])
def test_a_malformed_file_is_refused_naming_it_and_the_line(text, tmp_path, change, message):
    lines = (text / "sst2" / "dev.tsv").read_text(encoding="utf-8").splitlines()
    (tmp_path / "dev.tsv").write_text("\n".join(change(lines)) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        glue.read_split(glue.TASKS["sst2"], "dev", tmp_path / "dev.tsv")


def test_the_online_path_reads_datasets_columns_into_the_same_examples(text):
    """glue.from_hub over a datasets.DatasetDict laid out as load_dataset("glue", ...) gives it (columns sentence or
    sentence1 / sentence2, label, idx; splits train and validation), built here from the shared rows."""
    from datasets import Dataset, DatasetDict

    def hub(task, published=True):
        splits = {split: glue.read_split(task, split, text / task.files[split][0]) for split in ("train", "dev")}
        if published and task.published:  # the shared copy lacks one training row: a copy of its last stands in
            e = splits["train"]
            splits["train"] = glue.Examples(e.first + e.first[-1:], e.second + e.second[-1:], e.labels + e.labels[-1:])
        columns = lambda e: ({"sentence1": e.first, "sentence2": e.second} if task.pairs  # noqa: E731
                             else {"sentence": e.first})
        return lambda name, config: DatasetDict({
            hub_split: Dataset.from_dict({**columns(splits[split]), "label": splits[split].labels,
                                          "idx": list(range(len(splits[split].labels)))})
            for split, hub_split in glue.HUB_SPLITS.items()}), splits

    for name in ("sst2", "cola", "mrpc"):
        load, expected = hub(glue.TASKS[name])
        assert glue.from_hub(glue.TASKS[name], load) == expected
    load, _ = hub(glue.TASKS["rte"], published=False)  # the shared copy's 2,489 rows, not GLUE's 2,490
    with pytest.raises(ValueError, match="glue/rte train: expected 2490 rows"):
        glue.from_hub(glue.TASKS["rte"], load)


def test_data_list_says_where_each_dataset_comes_from(text, capsys):
    from speccond.harness.cli import main

    assert main(["data", "list"]) == 0
    shown = capsys.readouterr().out
    assert "language\n    files (12, each checked against its SHA-256): bible.data, bible.data.conc, sst2/train.tsv" in shown
    assert f"1. the shared data folder ($SPECCOND_SHARED_DATA, else ../shared/data beside the checkout): {text}" in shown
    assert 'online: datasets.load_dataset("glue", "mrpc") (train, validation) (used only without the shared data folder)' in shown
    assert "listops\n    nothing to obtain: made here" in shown
