"""Pre-train on your own unlabelled texts, fine-tune on other labelled texts of yours (data/text_files.py's
``vocab_from=``, harness/training/pretrained.py): the classification task tokenises with the pre-training cache's
vocabulary (a word it cannot spell is [UNK]), in memory and streamed, under a cache key that holds that
vocabulary; ``init_from`` then loads the pre-trained encoder, and refuses, in one line naming ``vocab_from``, a
task that tokenises with another vocabulary. Without the option every cache is the one it was before."""
from __future__ import annotations

import random

import pytest
import torch

from speccond.harness.cli import main
from tests.test_text_files import BAD, FILLER, GOOD, rows, write

pytest.importorskip("pyarrow")

BERT = {"model": "bert", "embed_dim": 32, "depth": 1, "num_heads": 2, "batch_size": 16, "lr": 1e-3,
        "warmup_steps": 1, "method": "spectral", "eval_batch_size": 16}
UNSPELLABLE = "zzz"  # corpus A has no z, so A's WordPiece spells this word [UNK]


def corpus(count: int, seed: int) -> dict[str, list]:
    """Unlabelled texts over the labelled texts' words and a few more."""
    rng = random.Random(seed)
    words = GOOD + BAD + FILLER + "story scene camera actor".split()
    return {"text": [" ".join(rng.sample(words, 7)) for _ in range(count)]}


def labelled(count: int, seed: int) -> dict[str, list]:
    """The test_text_files sentences, a sentence in four led by a word corpus A cannot spell."""
    columns = rows(count, seed)
    sentences = [f"{UNSPELLABLE} " * (i % 4 == 0) + s for i, s in enumerate(columns["sentence"])]
    return {"sentence": sentences, "label": columns["label"]}


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """(data home, corpus A's mlm task, labelled folder B, the finished pre-training run on A)."""
    from speccond.harness.config.train_config import TrainConfig
    from speccond.harness.training.train import train

    root = tmp_path_factory.mktemp("textvocab")
    a = write(root / "a", "parquet", {"train": corpus(96, 0), "test": corpus(32, 1)})
    b = write(root / "b", "csv", {"train": labelled(48, 2), "test": labelled(16, 3)})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECCOND_DATA", str(root / "data"))
        task = f"text:{a}?text=text&mlm=1&width=16&vocab=120"
        run = root / "runs" / "mlm"
        assert train(TrainConfig().replaced(task=task, epochs=1, **BERT), run, progress=False)["kind"] == "eval"
    return root / "data", task, b, run


@pytest.fixture
def home(pretrained, monkeypatch):
    monkeypatch.setenv("SPECCOND_DATA", str(pretrained[0]))
    return pretrained


def fine_tune(task: str, run):
    from speccond.harness.config.train_config import TrainConfig

    return TrainConfig().replaced(task=task, init_from=str(run), epochs=1, **BERT)


def test_the_labelled_texts_take_the_pretraining_vocabulary_in_memory_and_streamed(home, capsys):
    """vocab_from= the path `speccond data prepare` prints for A: B's token ids are A's WordPiece applied to B's
    texts ([UNK] for a word it cannot spell), A's tokenizer bytes stored as they are; the streamed cache holds the
    same ids."""
    from speccond import data
    from speccond.data import text_stream, wordpiece

    _, task, b, _ = home
    assert main(["data", "prepare", task]) == 0
    cache = capsys.readouterr().out.strip().splitlines()[-1]
    assert cache == str(data.prepare(task))
    fine = f"text:{b}?text=sentence&label=label&width=16&vocab_from={cache}"
    arrays, theirs = data.load(fine), data.load(task)
    assert torch.equal(arrays["tokenizer"], theirs["tokenizer"])
    tokenizer = wordpiece.from_bytes(theirs["tokenizer"])
    for split, seed, count in (("train", 2, 48), ("test", 3, 16)):
        expected, lengths, _ = wordpiece.encode(tokenizer, labelled(count, seed)["sentence"], None, 16)
        assert torch.equal(arrays[f"{split}_tokens"], expected.to(torch.int32))
        assert torch.equal(arrays[f"{split}_lengths"], lengths)
    assert (arrays["train_tokens"] == wordpiece.UNK).sum() == 12  # the 12 rows that hold the unspellable word
    small, streamed = text_stream.open_cache(data.prepare(f"{fine}&stream=1"), f"{fine}&stream=1")
    assert torch.equal(small["tokenizer"], theirs["tokenizer"])
    assert all(torch.equal(torch.from_numpy(streamed[s][:]), arrays[f"{s}_tokens"]) for s in ("train", "test"))


def test_an_mlm_reading_takes_a_given_vocabulary_too(home):
    """vocab_from= on a pre-training task (its blocks encoded with that vocabulary, e.g. to pre-train more texts
    with a vocabulary already in use)."""
    from speccond import data
    from speccond.data import wordpiece

    _, task, _, _ = home
    other = data.prepare(task.replace("vocab=120", "vocab=100"))
    arrays = data.load(task.replace("vocab=120", f"vocab_from={other}"))
    tokenizer = wordpiece.from_bytes(data.load(task.replace("vocab=120", "vocab=100"))["tokenizer"])
    expected, _, _ = wordpiece.encode(tokenizer, corpus(96, 0)["text"], None, 16)
    assert torch.equal(arrays["train_tokens"], expected.to(torch.int32)) and "train_labels" not in arrays


def test_a_fine_tune_with_vocab_from_starts_from_the_pretrained_encoder(home, tmp_path):
    """init_from loads every encoder tensor of the run pre-trained on A into the classifier of B's texts, and
    the fine-tune trains; the streamed reading of B passes the same check."""
    from speccond import data
    from speccond.harness.models.bert import ENCODER, POOLER
    from speccond.harness.models.run_model import build_model
    from speccond.harness.tasks.datasets import task_shape
    from speccond.harness.training import checkpoint
    from speccond.harness.training.pretrained import load_pretrained, pretrained_config
    from speccond.harness.training.train import train

    _, task, b, run = home
    fine = f"text:{b}?text=sentence&label=label&width=16&vocab_from={data.prepare(task)}"
    config = fine_tune(fine, run)
    model = build_model(config, task_shape(fine))
    load_pretrained(model, config)
    pre = pretrained_config(config)
    source = build_model(pre, task_shape(task))
    checkpoint.load(checkpoint.latest(run), source)
    weights, theirs = model.state_dict(), source.state_dict()
    encoder = [k for k in weights if k.startswith(ENCODER) and not k.startswith(POOLER)]
    assert len(encoder) > 10 and all(torch.equal(weights[k], theirs[k]) for k in encoder)
    assert "bert.bert.embeddings.word_embeddings.weight" in encoder
    result = train(config, tmp_path / "ft", progress=False)
    assert result["kind"] == "eval" and result["step"] == 3  # 48 rows, batches of 16, 1 epoch
    assert pretrained_config(fine_tune(f"{fine}&stream=1", run)) == pre


def test_a_run_of_the_pretraining_dataset_itself_passes_as_before(home):
    """One dataset, one tokenizer (the rule the built-in mlm -> glue-* path passes by): more pre-training on the
    same texts starts from the run without a vocab_from."""
    from speccond.harness.training.pretrained import pretrained_config

    _, task, _, run = home
    assert pretrained_config(fine_tune(task, run)).data.task == task


def test_without_vocab_from_or_with_another_vocabulary_init_from_is_refused_in_one_line(home, tmp_path, capsys):
    from speccond import data
    from speccond.harness.training.pretrained import pretrained_config

    _, task, b, run = home
    cache = data.prepare(task)
    own = f"text:{b}?text=sentence&label=label&width=16&vocab=120"
    with pytest.raises(ValueError, match=rf"is not the one .* tokenises with .*add &vocab_from={cache} to the task"):
        pretrained_config(fine_tune(own, run))
    other = data.prepare(task.replace("vocab=120", "vocab=100"))  # A again, with a smaller vocabulary
    with pytest.raises(ValueError, match=r"whose vocabulary \(sha256 \w+\) is not the one"):
        pretrained_config(fine_tune(f"text:{b}?text=sentence&label=label&width=16&vocab_from={other}", run))
    out = tmp_path / "ft"
    assert main(["train", "--out", str(out), "--set", f"task={own}", "--set", f"init_from={run}",
                 *[f"--set={key}={value}" for key, value in BERT.items()], "--set", "epochs=1"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]  # after the spectral method's warnings
    assert error.startswith("speccond train: error: init_from: ") and error.endswith(
        f"add &vocab_from={cache} to the task"), error
    assert not out.exists()  # refused before the run directory is written


def test_a_pretraining_whose_texts_changed_since_is_compared_by_the_vocabulary_it_trained_with(home, tmp_path):
    """config.json records the vocabulary a run on your own texts tokenised with: after the corpus is edited, the
    edited corpus's cache is refused and the cache the run trained with (still on disk) passes."""
    import json

    from speccond import data
    from speccond.data import text_vocabulary
    from speccond.harness.config.train_config import TrainConfig
    from speccond.harness.training.pretrained import VOCABULARY_RECORD, pretrained_config
    from speccond.harness.training.train import train

    _, _, b, _ = home
    a = write(tmp_path / "a", "parquet", {"train": corpus(96, 0), "test": corpus(32, 1)})
    task = f"text:{a}?text=text&mlm=1&width=16&vocab=120"
    train(TrainConfig().replaced(task=task, epochs=1, **BERT), tmp_path / "mlm", progress=False)
    trained_with = data.prepare(task)
    recorded = json.loads((tmp_path / "mlm" / "config.json").read_text())[VOCABULARY_RECORD]
    assert recorded == text_vocabulary.sha256(trained_with)
    write(a, "parquet", {"train": {"text": [t + " quixotic" for t in corpus(96, 4)["text"]]}, "test": corpus(32, 1)})
    edited = data.prepare(task)
    assert edited != trained_with and text_vocabulary.sha256(edited) != recorded
    fine = f"text:{b}?text=sentence&label=label&width=16&vocab_from="
    with pytest.raises(ValueError, match=r"with a vocabulary \(sha256 \w+\) its texts no longer give .*they changed since"):
        pretrained_config(fine_tune(f"{fine}{edited}", tmp_path / "mlm"))
    assert pretrained_config(fine_tune(f"{fine}{trained_with}", tmp_path / "mlm")).data.task == task


def test_two_vocabularies_never_share_a_cache_and_a_bad_vocab_from_is_refused_in_one_line(home, tmp_path):
    """The key holds the vocabulary's bytes, not its path; vocab_from goes with neither vocab nor tokenizer."""
    from speccond import data
    from speccond.data import text_files, text_vocabulary

    _, task, b, _ = home
    first, second = data.prepare(task), data.prepare(task.replace("vocab=120", "vocab=100"))
    names = [f"text:{b}?text=sentence&label=label&vocab_from={cache}" for cache in (first, second, first.parent)]
    paths = [data.prepare(name) for name in names]
    assert paths[0] != paths[1] and paths[0] == paths[2]  # the cache file or its folder: one vocabulary, one key
    assert text_vocabulary.sha256(paths[0]) == text_vocabulary.sha256(first)
    assert text_vocabulary.sha256(paths[1]) == text_vocabulary.sha256(second) != \
        text_vocabulary.sha256(first)
    for options, message in (
        (f"vocab_from={tmp_path / 'nowhere'}", "is no prepared text cache (an arrays.safetensors holding a tokenizer); "
                                               "give vocab_from=PATH"),
        (f"vocab_from={first}&vocab=64", "vocab would be unused: leave vocab out"),
        (f"vocab_from={first}&tokenizer={tmp_path}", "tokenizer would be unused"),
    ):
        with pytest.raises(ValueError, match=None) as raised:
            text_files.parse(f"text:{b}?text=sentence&label=label&{options}")
        assert message in str(raised.value) and "\n" not in str(raised.value)


def test_without_vocab_from_the_caches_are_the_ones_made_before_it(tmp_path, monkeypatch):
    """A fixed tiny dataset prepared in memory, streamed and for mlm: the arrays' SHA-256 and metadata are the
    ones the code before vocab_from recorded (computed on that code), and the key's text is unchanged; a run of a
    built-in task records no vocabulary in its config.json."""
    from speccond.data import text_files, text_stream
    from speccond.harness.config.train_config import TrainConfig
    from speccond.harness.training.pretrained import run_vocabulary

    assert all(run_vocabulary(TrainConfig().replaced(task=name)) == "" for name in ("mlm", "glue-sst2", "digits"))

    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "data"))
    folder = write(tmp_path / "b", "csv", {"train": rows(64, 0), "test": rows(20, 1)})
    common = {"format": "1", "classes": '["0", "1"]', "width": "16", "vocab": "80", "test_split": "test"}
    for options, sha256, extra, pair in (
        ("text=sentence&label=label", "01192b0ec08a073e080e72460f842fba6d86ea52c31886a07994a65eebc573c0",
         {"pairs": "0"}, ""),
        ("text=sentence&text_pair=other&label=label&stream=1",
         "4732e10c0235d7c97a1ebbd969b251ef3eb91255e70c7c7ff8ef2f0453838841", {"pairs": "1", "stream": "1"}, "other"),
        ("text=sentence&mlm=1", "f62d054a7ddbed73a2e5a71e22b3f50f616f08ef0b958fa3d1b5483d402ca494",
         {"pairs": "0", "mlm": "1", "classes": "[]"}, ""),
    ):
        name = f"text:{folder}?{options}&width=16&vocab=80"
        found = (text_stream if "stream=1" in options else text_files).metadata(name)
        assert found == {**common, **extra, "sha256": sha256, "dataset": name, "folder": str(folder)}
        label = "" if "mlm=1" in options else "label"
        assert repr(text_files.parse(name)) == (f"TextSource(folder={folder!r}, text='sentence', label='{label}', "
                                                f"text_pair='{pair}', test='', width=16, vocab=80, tokenizer=None)")
