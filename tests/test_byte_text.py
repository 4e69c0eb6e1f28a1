"""Analogues of LRA's Text and Retrieval: byte tokens of GLUE SST-2 and MRPC, the pair model, training."""
from __future__ import annotations

import dataclasses
import shutil

import pytest
import torch

from speccond import data
import speccond
from speccond.data import byte_text, glue
from speccond.data.shared import shared_data_dir
from speccond.data.store import prepare
from speccond.harness.config.presets import preset
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.models.run_model import build_model
from speccond.harness.models.sequence import PAD, PairClassifier, build_nystromformer, pooled
from speccond.harness.tasks.datasets import load_task, task_shape
from speccond.harness.training.train import train

SIZES = {"text-bytes": (67349, 872), "pairs-bytes": (3667, 408)}  # (train, test): GLUE's train and dev


@pytest.fixture(scope="session")
def byte_home(tmp_path_factory):
    """A data dir with text-bytes and pairs-bytes prepared once from the shared data folder (seconds)."""
    folder = shared_data_dir()
    if folder is None or not (folder / "text").is_dir():
        pytest.skip("no shared data folder with text/ (put shared/data beside the checkout or set SPECCOND_SHARED_DATA)")
    home = tmp_path_factory.mktemp("byte_text") / "data"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECCOND_DATA", str(home))
        for spec in byte_text.SPECS:
            prepare(spec)
    return home, folder / "text"


@pytest.fixture
def prepared(byte_home, monkeypatch):
    monkeypatch.setenv("SPECCOND_DATA", str(byte_home[0]))
    return byte_home


def _rows(tokens: torch.Tensor, lengths: torch.Tensor) -> list[bytes]:
    """Each row's bytes (token - 1 up to its length), fast."""
    values = (tokens.long() - 1).clamp_min(0).to(torch.uint8)
    return [values[i, :n].numpy().tobytes() for i, n in enumerate(lengths.tolist())]


# --- encoding, on small inputs -----------------------------------------------------------------------------


def test_bytes_plus_one_round_trip_and_are_cut_at_the_width():
    texts = ["Grand hôtel ✓", "", "abc" * 10]
    tokens, lengths = byte_text.encode(texts, 14)
    assert tokens.dtype == torch.int16 and tokens.shape == (3, 14) and lengths.tolist() == [14, 0, 14]
    assert [byte_text.decode(row) for row in tokens] == [t.encode()[:14] for t in texts]
    assert byte_text.decode(tokens[0]).decode("utf-8", "replace") == "Grand hôtel \ufffd"  # ✓ is cut after 1 of 3 bytes
    assert int(tokens[0, 0]) == ord("G") + 1 and (tokens[1] == PAD).all()
    row, _ = byte_text.encode(["\x00ÿ"], 4)  # NUL is a byte like any other; ÿ is 0xC3 0xBF in UTF-8
    assert row.tolist() == [[1, 0xC3 + 1, 0xBF + 1, PAD]]


def test_the_specs_read_glue_train_and_dev_from_the_shared_folder_with_an_online_path():
    for name, task, width in (("text-bytes", glue.TASKS["sst2"], 256), ("pairs-bytes", glue.TASKS["mrpc"], 256)):
        spec = data.spec(name)
        assert spec.sequence_shape == (width, 257) and spec.classes == task.classes and spec.format_version == 2
        assert spec.files == glue.file_keys(task, ("train", "dev")) and spec.sources == (glue.SHARED_TEXT,)
        assert spec.online is not None and f'"{task.name}"' in spec.online_description


# --- the prepared datasets ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["text-bytes", "pairs-bytes"])
def test_each_example_is_its_glue_row_as_bytes_in_order_with_its_label(prepared, name):
    _, text = prepared
    task = byte_text.TEXT_TASK if name == "text-bytes" else byte_text.PAIR_TASK
    arrays = data.load(name)
    width = 256
    for split, stored, count in (("train", "train", SIZES[name][0]), ("dev", "test", SIZES[name][1])):
        examples = glue.read_split(task, split, text / task.files[split][0])
        tokens, lengths, labels = (arrays[f"{stored}_{k}"] for k in ("tokens", "lengths", "labels"))
        assert tokens.dtype == torch.int16 and tokens.shape == ((count, width) if name == "text-bytes" else (count, 2, width))
        assert labels.tolist() == examples.labels and lengths.dtype == torch.int64
        texts = [examples.first] if examples.second is None else [examples.first, examples.second]
        for side, side_texts in enumerate(texts):
            rows = tokens if name == "text-bytes" else tokens[:, side]
            row_lengths = lengths if name == "text-bytes" else lengths[:, side]
            assert _rows(rows, row_lengths) == [t.encode()[:width] for t in side_texts]
            assert ((rows == PAD) == (torch.arange(width) >= row_lengths[:, None])).all()  # bytes then PAD
    assert set(arrays) == {f"{s}_{k}" for s in ("train", "test") for k in ("tokens", "lengths", "labels")}


def test_a_damaged_shared_file_is_refused_naming_it_and_nothing_is_cached(prepared, tmp_path, monkeypatch):
    _, text = prepared
    shared = tmp_path / "shared"
    (shared / "text" / "sst2").mkdir(parents=True)
    shutil.copy(text / "sst2" / "train.tsv", shared / "text" / "sst2" / "train.tsv")
    damaged = bytearray((text / "sst2" / "dev.tsv").read_bytes())
    damaged[100] ^= 1  # one bit of one sentence
    (shared / "text" / "sst2" / "dev.tsv").write_bytes(bytes(damaged))
    monkeypatch.setenv("SPECCOND_SHARED_DATA", str(shared))
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "data"))
    with pytest.raises(FileNotFoundError, match=r"(?s)text/sst2/dev.tsv has SHA-256 [0-9a-f]{64}, expected 54a9c12c.*"
                                                r"To fix: put the shared data folder"):
        prepare(byte_text.TEXT_SPEC)
    assert not (tmp_path / "data" / "text-bytes" / "arrays.safetensors").exists()
    assert not (tmp_path / "data" / "text-bytes" / "raw" / "sst2" / "dev.tsv").exists()  # the bad copy is not kept


def test_without_a_shared_folder_the_online_path_builds_the_same_arrays_and_reads_no_file(prepared, tmp_path,
                                                                                         monkeypatch):
    """The online path (datasets.load_dataset("glue", "sst2"), here a DatasetDict laid out as it returns one, made
    from the shared rows) is taken only when there is no shared folder, and stores what the files give."""
    from datasets import Dataset, DatasetDict
    from safetensors.torch import load_file

    from speccond.data import store

    home, text = prepared
    splits = {split: glue.read_split(byte_text.TEXT_TASK, split, text / "sst2" / f"{split}.tsv") for split in ("train", "dev")}
    asked = []

    def load(name, config):
        asked.append((name, config))
        return DatasetDict({hub: Dataset.from_dict({"sentence": splits[split].first, "label": splits[split].labels})
                            for split, hub in glue.HUB_SPLITS.items()})

    spec = dataclasses.replace(byte_text.TEXT_SPEC, online=lambda: byte_text.text_arrays(glue.from_hub(byte_text.TEXT_TASK, load)))
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "data"))
    prepare(spec)  # the shared folder is there: its files, not the online path
    assert asked == [] and (tmp_path / "data" / "text-bytes" / "raw" / "sst2" / "dev.tsv").is_file()
    monkeypatch.setattr(store, "shared_data_dir", lambda: None)
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "online"))
    online = load_file(str(prepare(spec)))
    assert asked == [("glue", "sst2")] and not (tmp_path / "online" / "text-bytes" / "raw").exists()
    shared = load_file(str(home / "text-bytes" / "arrays.safetensors"))
    assert online.keys() == shared.keys() and all(torch.equal(online[k], shared[k]) for k in shared)


# --- tasks, the pair model, training -----------------------------------------------------------------------


def test_load_task_reads_tokens_and_pairs_padded_to_the_landmarks(prepared):
    arrays = {name: data.load(name) for name in ("text-bytes", "pairs-bytes")}
    text = load_task(TrainConfig().replaced(task="lra-text", model="nystromformer", train_size=64, test_size=32))
    assert text["train_x"].shape == (64, 256) and text["train_x"].dtype == torch.int64
    assert torch.equal(text["test_x"], arrays["text-bytes"]["test_tokens"][:32].long())
    pairs = load_task(TrainConfig().replaced(task="lra-retrieval", model="nystromformer", train_size=64, test_size=32, landmarks=96))
    assert pairs["train_x"].shape == (64, 2, 288) and pairs["test_y"].shape == (32,)  # 256 -> 288, on the last dim
    assert torch.equal(pairs["test_x"][..., :256], arrays["pairs-bytes"]["test_tokens"][:32].long())
    assert (pairs["test_x"][..., 256:] == PAD).all()
    shapes = {name: task_shape(name) for name in ("lra-text", "lra-retrieval")}
    assert [(s.kind, s.length, s.vocab, s.classes, s.pairs) for s in shapes.values()] == [
        ("sequence", 256, 257, 2, False), ("sequence", 256, 257, 2, True)]


def test_the_pair_classifier_shares_one_encoder_and_keeps_the_order():
    torch.manual_seed(0)
    model = build_nystromformer(128, 257, 2, 32, 2, 2, 64, pairs=True).eval()
    assert isinstance(model, PairClassifier)
    tokens = torch.randint(1, 257, (3, 2, 128))
    tokens[:, 1, 100:] = PAD
    with torch.no_grad():
        logits = model(tokens)
        u, v = pooled(model.encoder, tokens[:, 0]), pooled(model.encoder, tokens[:, 1])  # each text on its own
        separately = model.head(torch.cat([u, v, u * v, u - v], -1))
        swapped = model(tokens.flip(1))
    assert logits.shape == (3, 2) and torch.isfinite(logits).all()
    torch.testing.assert_close(logits, separately, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(logits, swapped)  # text a and text b have distinct roles
    with pytest.raises(ValueError, match=r"expected tokens of shape \(batch, 2, length\).*got \(3, 128\)"):
        model(tokens[:, 0])
    report = speccond.apply(model, speccond.SpectralConfig(lam=10))
    assert sorted(r.role for r in report.rows) == sorted("qkv" * 2)  # the shared encoder's q, k, v, once
    with torch.no_grad():
        assert not torch.allclose(model(tokens), logits) and torch.isfinite(model(tokens)).all()


@pytest.mark.parametrize("task, method", [("lra-text", "spectral"), ("lra-retrieval", "spectral")])
def test_a_nystromformer_trains_on_the_byte_tasks(task, method, prepared, tmp_path):
    config = TrainConfig().replaced(task=task, model="nystromformer", embed_dim=16, depth=1, num_heads=2, landmarks=64,
                         train_size=64, test_size=32, batch_size=32, epochs=1, warmup_steps=1, method=method)
    result = train(config, tmp_path / "run", progress=False)
    assert result["kind"] == "eval" and result["step"] == 2 and 0 <= result["accuracy"] <= 1
    assert torch.isfinite(torch.tensor(result["loss"]))


@pytest.mark.parametrize("task", ["lra-text", "lra-retrieval"])
@pytest.mark.parametrize("name", ["quick", "full"])
def test_the_presets_build_a_model_for_the_byte_tasks(task, name):
    config = TrainConfig().replaced(task=task).with_overrides(preset(name, task))
    shape = task_shape(task)
    model = build_model(config, shape)
    inputs = torch.randint(1, shape.vocab, (2, 2, shape.length) if shape.pairs else (2, shape.length))
    with torch.no_grad():
        assert model(inputs).shape == (2, shape.classes)
