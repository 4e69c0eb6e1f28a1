"""Your own texts as a task (speccond/data/text_files.py): the same rows written as CSV, as parquet and as a
DatasetDict saved with save_to_disk are read into the same arrays, [CLS] a [SEP] (b [SEP]) then PAD with a
WordPiece learnt from the training split, cached with a checksum and read again when a file changes; a short
comparison with BERT runs end to end with the usual report; a wrong name, column, split, file or label is
refused in one line before anything is written."""
from __future__ import annotations

import json
import random

import pytest
import torch

from speccond.harness.cli import main
from tests.torchrun import one_and_two_processes

datasets = pytest.importorskip("datasets")
pyarrow = pytest.importorskip("pyarrow")
import pyarrow.csv  # noqa: E402
import pyarrow.parquet  # noqa: E402

GOOD = "great lovely wonderful superb fine excellent".split()
BAD = "awful terrible poor dreadful bad horrid".split()
FILLER = "the film was a plot with acting and music that felt".split()


def rows(count: int, seed: int) -> dict[str, list]:
    """Sentences whose one judging word gives the label (1 good, 0 bad), and a second text per row."""
    rng = random.Random(seed)
    columns = {"sentence": [], "other": [], "label": []}
    for _ in range(count):
        label = rng.randrange(2)
        words = rng.sample(FILLER, 5) + [rng.choice(GOOD if label else BAD)]
        rng.shuffle(words)
        columns["sentence"].append(" ".join(words))
        columns["other"].append(" ".join(rng.sample(FILLER, 3)))
        columns["label"].append(label)
    return columns


SPLITS = {"train": rows(64, 0), "test": rows(20, 1)}


def write(root, kind: str, splits=SPLITS):
    root.mkdir(parents=True, exist_ok=True)
    if kind == "saved":
        datasets.DatasetDict({split: datasets.Dataset.from_dict(columns) for split, columns in splits.items()}
                             ).save_to_disk(str(root))
        return root
    for split, columns in splits.items():
        table = pyarrow.table(columns)
        if kind == "csv":
            pyarrow.csv.write_csv(table, root / f"{split}.csv")
        else:  # parquet in two shards per split, read in name order
            half = table.num_rows // 2
            pyarrow.parquet.write_table(table.slice(0, half), root / f"{split}-00000-of-00002.parquet")
            pyarrow.parquet.write_table(table.slice(half), root / f"{split}-00001-of-00002.parquet")
    return root


@pytest.fixture
def data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "data"))
    return tmp_path / "data"


def test_csv_parquet_and_a_saved_dataset_are_read_into_the_same_wordpiece_arrays(tmp_path, data_home):
    from speccond import data
    from speccond.data import wordpiece

    loaded = {kind: data.load(f"text:{write(tmp_path / kind, kind)}?text=sentence&text_pair=other&label=label&width=24"
                              "&vocab=120")
              for kind in ("csv", "parquet", "saved")}
    for kind in ("parquet", "saved"):
        assert loaded[kind].keys() == loaded["csv"].keys()
        assert all(torch.equal(loaded[kind][key], loaded["csv"][key]) for key in loaded["csv"])
    arrays = loaded["csv"]
    assert arrays["train_tokens"].shape == (64, 24) and arrays["test_tokens"].shape == (20, 24)
    assert arrays["train_labels"].tolist() == SPLITS["train"]["label"]
    tokenizer = wordpiece.from_bytes(arrays["tokenizer"])
    assert tokenizer.get_vocab_size() <= 120
    first = arrays["test_tokens"][0]  # [CLS] a [SEP] b [SEP] then PAD
    length = int(arrays["test_lengths"][0])
    assert first[0] == wordpiece.CLS and first[length - 1] == wordpiece.SEP and (first[length:] == wordpiece.PAD).all()
    assert int((first == wordpiece.SEP).sum()) == 2
    expected = f"{SPLITS['test']['sentence'][0]} {SPLITS['test']['other'][0]}"
    assert wordpiece.decode(tokenizer, first) == expected  # every word was seen in training: nothing is [UNK]


def test_string_labels_are_classes_in_sorted_order_and_a_classlabel_keeps_its_names(tmp_path, data_home):
    from speccond.harness.tasks.datasets import task_shape
    from speccond import data
    from speccond.data import text_files

    named = {split: {**columns, "label": [["negative", "positive"][v] for v in columns["label"]]}
             for split, columns in SPLITS.items()}
    name = f"text:{write(tmp_path / 'strings', 'csv', named)}?text=sentence&label=label&vocab=100"
    assert json.loads(text_files.metadata(name)["classes"]) == ["negative", "positive"]
    assert data.load(name)["train_labels"].tolist() == SPLITS["train"]["label"]
    assert task_shape(name).classes == 2 and not task_shape(name).pairs and task_shape(name).length == 128
    features = datasets.Features({"sentence": datasets.Value("string"), "other": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["bad", "good", "unused"])})
    root = tmp_path / "classlabel"
    datasets.DatasetDict({split: datasets.Dataset.from_dict(columns, features=features)
                          for split, columns in SPLITS.items()}).save_to_disk(str(root))
    assert json.loads(text_files.metadata(f"text:{root}?text=sentence&label=label&vocab=100")["classes"]) == \
        ["bad", "good", "unused"]


def local_tokenizer(folder, specials=("<s>", "<pad>", "</s>", "<unk>", "<mask>")):
    """A RoBERTa-style BPE (its specials named <s>, <pad>, ...; <pad> is id 1) saved as folder/tokenizer.json."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(SPLITS["train"]["sentence"] + SPLITS["train"]["other"],
                                  trainers.BpeTrainer(vocab_size=100, special_tokens=list(specials)))
    folder.mkdir(parents=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    return tokenizer


def test_a_local_tokenizer_keeps_its_pieces_with_its_special_tokens_moved_to_the_projects_ids(tmp_path, data_home):
    from speccond import data
    from speccond.data import wordpiece
    from speccond.harness.tasks.datasets import task_shape

    tokenizer = local_tokenizer(tmp_path / "bpe")
    name = (f"text:{write(tmp_path / 'csv', 'csv')}?text=sentence&text_pair=other&label=label&width=20"
            f"&tokenizer={tmp_path / 'bpe'}")
    arrays = data.load(name)
    ids = arrays["tokenizer_ids"]  # the tokenizer's id -> the stored id
    vocabulary = tokenizer.get_vocab()
    assert [int(ids[vocabulary[token]]) for token in ("<pad>", "<unk>", "<s>", "</s>", "<mask>")] == [0, 1, 2, 3, 4]
    assert sorted(ids.tolist()) == list(range(tokenizer.get_vocab_size()))  # a renumbering: nothing merged
    row, length = arrays["train_tokens"][0], int(arrays["train_lengths"][0])
    assert row[0] == wordpiece.CLS and row[length - 1] == wordpiece.SEP and (row[length:] == wordpiece.PAD).all()
    original = ids.argsort()[row[:length].long()].tolist()  # back to the tokenizer's own ids
    first, second = SPLITS["train"]["sentence"][0], SPLITS["train"]["other"][0]
    assert original == [vocabulary["<s>"], *tokenizer.encode(first, add_special_tokens=False).ids, vocabulary["</s>"],
                        *tokenizer.encode(second, add_special_tokens=False).ids, vocabulary["</s>"]]
    assert task_shape(name).vocab == tokenizer.get_vocab_size() and task_shape(name).pairs


def test_a_changed_file_is_read_again_and_a_damaged_cache_is_refused(tmp_path, data_home):
    from speccond import data

    root = write(tmp_path / "csv", "csv")
    name = f"text:{root}?text=sentence&label=label&vocab=100"
    first = data.prepare(name)
    assert data.prepare(name) == first
    write(root, "csv", {"train": rows(65, 0), "test": SPLITS["test"]})
    second = data.prepare(name)
    assert second != first and data.load(name)["train_tokens"].shape[0] == 65
    from safetensors.torch import load_file, save_file
    from safetensors import safe_open

    with safe_open(str(second), "pt") as handle:
        metadata = handle.metadata()
    tensors = load_file(str(second))
    tensors["train_labels"][0] = 1 - tensors["train_labels"][0]
    save_file(tensors, str(second), metadata=metadata)
    with pytest.raises(ValueError, match="are damaged and were removed"):
        data.load(name)
    assert not second.exists()


def test_compare_trains_bert_on_the_texts_and_reports_it(tmp_path, data_home):
    out = tmp_path / "cmp"
    task = f"text:{write(tmp_path / 'pairs', 'parquet')}?text=sentence&text_pair=other&label=label&width=24&vocab=120"
    assert main(["compare", "--task", task, "--model", "bert", "--methods", "baseline,spectral", "--seeds", "1",
                 "--set", "epochs=2", "--set", "batch_size=16", "--set", "embed_dim=32", "--set", "depth=1",
                 "--set", "num_heads=2", "--set", "val_size=8", "--set", "lr=1e-3", "--out", str(out)]) == 0
    report = (out / "results.md").read_text()
    assert report.startswith(f"# speccond report: {task}, transformers BERT")
    records = [json.loads(line) for line in (out / "spectral" / "seed-0" / "metrics.jsonl").read_text().splitlines()]
    final = [r for r in records if r["kind"] == "eval"]
    assert len(final) == 1 and final[0]["step"] == 8  # 56 training rows (64 less 8 held out): 4 batches of 16, 2 epochs
    assert any(r["kind"] == "val" for r in records)
    config = json.loads((out / "spectral" / "seed-0" / "config.json").read_text())
    assert config["splits"]["val"]["size"] == 8


@pytest.mark.parametrize("problem, message", [
    ("no label option", "names no label column"),
    ("unknown option", "unknown option(s) ['lable']"),
    ("missing column", "the train split has no column 'sentense'"),
    ("empty split", "the test split(s) hold no rows"),
    ("unreadable file", "cannot be read as parquet"),
    ("no train split", "has no train split"),
    ("unlabelled test", "has label -1 (unlabelled examples"),
    ("unseen label", "labels ['maybe'] that the train split never has"),
    ("not a folder", "is not a folder"),
    ("tokenizer without specials", "has no [MASK] or <mask> token"),
    ("tokenizer and vocab", "leave vocab out"),
    ("no tokenizer.json", "holds no tokenizer.json"),
    ("mlm with a label", "mlm=1 pre-trains on the text column alone; label would be unused"),
    ("mlm with a pair", "text_pair would be unused"),
    ("mlm neither 0 nor 1", "mlm must be 1 (masked-language modelling) or 0"),
    ("mlm streamed", "holds its blocks in memory; leave stream=1 out"),
])
def test_a_wrong_name_column_split_file_or_label_is_refused_in_one_line_and_nothing_is_written(
        tmp_path, data_home, capsys, problem, message):
    root = tmp_path / "texts"
    options = "text=sentence&label=label"
    if problem == "no label option":
        options = "text=sentence"
    elif problem == "unknown option":
        options += "&lable=x"
    elif problem == "missing column":
        options = "text=sentense&label=label"
    elif problem.startswith("mlm"):
        options = {"mlm with a label": options + "&mlm=1", "mlm with a pair": "text=sentence&text_pair=other&mlm=1",
                   "mlm neither 0 nor 1": "text=sentence&mlm=yes", "mlm streamed": "text=sentence&mlm=1&stream=1"}[problem]
    elif problem.startswith("tokenizer") or problem == "no tokenizer.json":
        if problem == "tokenizer without specials":
            local_tokenizer(tmp_path / "tokenizer", specials=("<s>", "<pad>", "</s>", "<unk>"))
        else:
            (tmp_path / "tokenizer").mkdir()
        options += f"&tokenizer={tmp_path / 'tokenizer'}" + ("&vocab=100" if problem == "tokenizer and vocab" else "")
    if problem == "empty split":
        write(root, "csv", {"train": SPLITS["train"], "test": {key: [] for key in SPLITS["test"]}})
    elif problem == "unreadable file":
        write(root, "parquet")
        (root / "test-00001-of-00002.parquet").write_bytes(b"not parquet at all")
    elif problem == "no train split":
        write(root, "csv", {"training": SPLITS["train"], "test": SPLITS["test"]})
    elif problem == "unlabelled test":
        write(root, "parquet", {"train": SPLITS["train"], "test": {**SPLITS["test"], "label": [-1] * 20}})
    elif problem == "unseen label":
        strings = {split: {**columns, "label": ["yes" if v else "no" for v in columns["label"]]}
                   for split, columns in SPLITS.items()}
        strings["test"]["label"][3] = "maybe"
        write(root, "csv", strings)
    elif problem != "not a folder":
        write(root, "csv")
    out = tmp_path / "cmp"
    assert main(["compare", "--task", f"text:{root}?{options}", "--model", "bert", "--methods", "baseline",
                 "--seeds", "1", "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1, error
    assert not out.exists() and not data_home.exists()


def test_a_transformers_encoder_by_model_type_on_the_texts_under_torchrun_reports_what_one_process_reports(
        tmp_path, data_home):
    """--model hf:bert (any transformers encoder, built from its config) trains on a parquet text task, with
    progress and the usual report; 2 gloo processes under torchrun train each run data-parallel with evaluation
    sharded over them, and end at one process's figures (accuracy equal, loss within 1e-5)."""
    task = f"text:{write(tmp_path / 'pairs', 'parquet')}?text=sentence&text_pair=other&label=label&width=24&vocab=120"
    args = ["compare", "--task", task, "--model", "hf:bert", "--set",
            "model_args=hidden_size=32,num_hidden_layers=1,num_attention_heads=2,intermediate_size=64",
            "--methods", "baseline,spectral", "--seeds", "1", "--set", "epochs=2", "--set", "batch_size=16",
            "--set", "lr=1e-3", "--set", "device=cpu"]
    single, _ = one_and_two_processes(args, tmp_path, {"SPECCOND_DATA": str(data_home)})
    assert "## Runs" in single.stdout and (tmp_path / "single" / "results.md").is_file()
    one, two = (json.loads((tmp_path / name / "results.json").read_text())["runs"] for name in ("single", "double"))
    assert [(r["method"], r["accuracy"]) for r in one] == [(r["method"], r["accuracy"]) for r in two] and len(one) == 2
    assert all(abs(a["loss"] - b["loss"]) < 1e-5 for a, b in zip(one, two))


def test_texts_for_masked_language_modelling_load_as_the_mlm_tasks_blocks(tmp_path, data_home):
    """text:DIR?text=COLUMN&mlm=1: no label read, each row one [CLS] text [SEP] block; the training blocks stay
    whole (masked at each step), the test blocks are masked once with mlm.py's exact counts and seed, as the
    built-in mlm task's; the vocabulary is the prediction's classes; a classification task's cache key
    (the TextSource's repr) does not change."""
    from speccond.data import text_files, wordpiece
    from speccond.harness.config.train_config import TrainConfig
    from speccond.harness.tasks import mlm
    from speccond.harness.tasks.datasets import load_task, task, task_shape

    folder = write(tmp_path / "corpus", "parquet", {"train": {"sentence": SPLITS["train"]["sentence"]},
                                                    "test": {"sentence": SPLITS["test"]["sentence"]}})
    name = f"text:{folder}?text=sentence&mlm=1&width=16&vocab=100"
    shape = task_shape(name)
    assert task(name).reading == "mlm" and shape.mlm and shape.classes == shape.vocab <= 100 and shape.length == 16
    arrays = text_files.load(name)
    assert "train_labels" not in arrays and "test_labels" not in arrays
    tensors = load_task(TrainConfig().replaced(task=name, model="bert"))
    blocks = arrays["train_tokens"].long()  # (64, 16)
    assert blocks.shape == (64, 16) and (blocks[:, 0] == wordpiece.CLS).all()
    assert torch.equal(tensors["train_x"], blocks[torch.randperm(64, generator=torch.Generator().manual_seed(0))])
    assert torch.equal(tensors["train_x"], tensors["train_y"])
    inputs, labels = mlm.mask_tokens(arrays["test_tokens"], torch.Generator().manual_seed(mlm.EVAL_MASK_SEED),
                                     shape.vocab)
    assert torch.equal(tensors["test_x"], inputs) and torch.equal(tensors["test_y"], labels)
    flagged = tensors["test_x"][:, 1].bool()  # (20, 16): where a prediction is asked
    assert flagged.any(dim=1).all() and torch.equal(flagged, tensors["test_y"] != mlm.IGNORE)
    assert "mlm" not in repr(text_files.parse(f"text:{folder}?text=sentence&label=x"))
