"""Analogues of LRA's Text and Retrieval: byte tokens read from the bigbench archive, the pair model, training."""
from __future__ import annotations

import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest
import torch

from speccond import data
import speccond
from speccond.data import byte_text
from speccond.data.store import Source, arrays_sha256, prepare
from speccond.harness.config.presets import preset
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.models.run_model import build_model
from speccond.harness.models.sequence import PAD, PairClassifier, build_nystromformer, pooled
from speccond.harness.tasks.datasets import load_task, task_shape
from speccond.harness.training.train import train

# SHA-256 of the arrays each dataset must produce (store.arrays_sha256): the split and the encoding are fixed.
TEXT_ARRAYS_SHA256 = "6f5a78f049c9d7737bd0e83af5b3813fac62bac0bcee290beffb401057f2be94"
PAIRS_ARRAYS_SHA256 = "d4b899e8d1471715e4005287827db0417d117d558222a7d62f956462ac7c9261"
SPLITS = ("train", "val", "test")


@pytest.fixture(scope="session")
def byte_home(tmp_path_factory):
    """A data dir with text-bytes and pairs-bytes prepared once, and the two source task.json files as
    parse read them (kept on the way, to spare a third pass over the archive; their names are checked)."""
    home = tmp_path_factory.mktemp("byte_text") / "data"
    folders = [Path(f) for f in (os.environ.get("SPECCOND_BIGBENCH"), "/work/cache/bigbench") if f]
    local = tuple(Source(f"archive in {f}", str(f)) for f in folders if (f / byte_text.cifar10.ARCHIVE).is_file())
    sources = {}

    def keeping(archive, member):
        sources[member] = read_member(archive, member)
        return sources[member]

    read_member = byte_text.read_member
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECCOND_DATA", str(home))
        patch.setattr(byte_text, "read_member", keeping)
        try:
            for spec in byte_text.SPECS:
                prepare(spec, local + spec.sources[1:])
        except FileNotFoundError as error:
            pytest.skip(f"the bigbench 1.0.0 archive could not be had (set SPECCOND_BIGBENCH to a folder "
                        f"holding it): {error}")
    assert {member: task["name"] for member, task in sources.items()} == {
        byte_text.TEXT_MEMBER: "all_text_en", byte_text.PAIRS_MEMBER: "movie_dialog_same_or_different"}
    yield home, sources
    for spec in byte_text.SPECS:
        shutil.rmtree(home / spec.name / "raw")  # 358 MB each


@pytest.fixture
def prepared(byte_home, monkeypatch):
    monkeypatch.setenv("SPECCOND_DATA", str(byte_home[0]))
    return byte_home


def _rows(tokens: torch.Tensor, lengths: torch.Tensor) -> list[bytes]:
    """Each row's bytes (token - 1 up to its length), fast."""
    values = (tokens.long() - 1).clamp_min(0).to(torch.uint8)
    return [values[i, :n].numpy().tobytes() for i, n in enumerate(lengths.tolist())]


# --- encoding and parsing, on small inputs -----------------------------------------------------------------


def test_bytes_plus_one_round_trip_and_are_cut_at_the_width():
    texts = ["Grand hôtel ✓", "", "abc" * 10]
    tokens, lengths = byte_text.encode(texts, 14)
    assert tokens.dtype == torch.int16 and tokens.shape == (3, 14) and lengths.tolist() == [14, 0, 14]
    assert [byte_text.decode(row) for row in tokens] == [t.encode()[:14] for t in texts]
    assert byte_text.decode(tokens[0]).decode("utf-8", "replace") == "Grand hôtel \ufffd"  # ✓ is cut after 1 of 3 bytes
    assert int(tokens[0, 0]) == ord("G") + 1 and (tokens[1] == PAD).all()
    row, _ = byte_text.encode(["\x00ÿ"], 4)  # NUL is a byte like any other; ÿ is 0xC3 0xBF in UTF-8
    assert row.tolist() == [[1, 0xC3 + 1, 0xBF + 1, PAD]]


def test_a_pair_is_split_where_the_two_lines_are_adjacent_in_the_conversation():
    tail = byte_text.QUESTION
    plain = f'Hi. You said "go" and "stay" there. Fine. {tail}Hi.{byte_text.SEPARATOR}You said "go" and "stay" there." '
    assert byte_text.pair_of(plain, 0) == ("Hi.", 'You said "go" and "stay" there.')
    inner = f'You said "go" and "stay" there. Fine. {tail}You said "go" and "stay" there.{byte_text.SEPARATOR}Fine." '
    assert byte_text.pair_of(inner, 1) == ('You said "go" and "stay" there.', "Fine.")
    with pytest.raises(ValueError, match=r"example 7: expected '<conversation> ----- In the preceding"):
        byte_text.pair_of("no question here", 7)
    with pytest.raises(ValueError, match="example 8: expected one way to read two adjacent lines .* found 0"):
        byte_text.pair_of(f"A. B. {tail}B.{byte_text.SEPARATOR}A.\" ", 8)  # not adjacent in this order


def test_duplicates_are_kept_once_and_conflicting_ones_dropped():
    keys = ["a", "b", "a", "c", "b", "a"]
    labels = [0, 1, 0, 1, 0, 0]
    assert byte_text.deduplicate(keys, labels) == [0, 3]  # "b" has labels 1 and 0: dropped
    with pytest.raises(ValueError, match=r"example 4: expected one score of 1 over the classes \('different', 'same'\)"):
        byte_text.label_of({"target_scores": {"same": 1, "different": 1}}, byte_text.PAIR_CLASSES, 4)


def test_an_archive_without_the_member_is_refused(tmp_path):
    archive = tmp_path / "other.tar.gz"
    (tmp_path / "task.json").write_text(json.dumps({"examples": []}))
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "task.json", arcname=byte_text.ROOT + "multiemo/all_sentence_en/task.json")
    with pytest.raises(ValueError, match="has no member .*multiemo/all_text_en/task.json; expected the bigbench 1.0.0"):
        byte_text.parse_text({"archive": archive})


def test_the_specs_describe_per_text_widths_and_share_cifar10s_pinned_archive():
    for name, width, classes in (("text-bytes", 2048, 4), ("pairs-bytes", 256, 2)):
        spec = data.spec(name)
        assert spec.sequence_shape == (width, 257) and len(spec.classes) == classes and spec.format_version == 1
        assert spec.files == data.spec("cifar10").files and spec.sources == data.spec("cifar10").sources


# --- the prepared datasets ---------------------------------------------------------------------------------


def test_text_bytes_round_trip_to_every_review_once_with_its_label(prepared):
    home, sources = prepared
    arrays = data.load("text-bytes")
    assert {k: (tuple(v.shape), v.dtype) for k, v in arrays.items()} == {
        **{f"{s}_tokens": ((n, 2048), torch.int16) for s, n in zip(SPLITS, (6573, 821, 821))},
        **{f"{s}_lengths": ((n,), torch.int64) for s, n in zip(SPLITS, (6573, 821, 821))},
        **{f"{s}_labels": ((n,), torch.int64) for s, n in zip(SPLITS, (6573, 821, 821))},
    }
    assert arrays_sha256(arrays) == TEXT_ARRAYS_SHA256  # the same split and bytes on every machine
    examples = sources[byte_text.TEXT_MEMBER]["examples"]
    scores = [e["target_scores"] for e in examples]
    expected = sorted((e["input"].encode()[:2048], byte_text.TEXT_CLASSES.index(max(s, key=s.get)))
                      for e, s in zip(examples, scores))
    stored = []
    for split in SPLITS:
        tokens, lengths = arrays[f"{split}_tokens"], arrays[f"{split}_lengths"]
        positions = torch.arange(2048)
        assert ((tokens == PAD) == (positions >= lengths[:, None])).all()  # bytes then PAD, no PAD inside
        stored += zip(_rows(tokens, lengths), arrays[f"{split}_labels"].tolist())
    assert sorted(stored) == expected and len(set(stored)) == 8215  # every review once: disjoint, covering
    assert byte_text.decode(arrays["test_tokens"][0]) == _rows(arrays["test_tokens"][:1], arrays["test_lengths"][:1])[0]
    assert int(sum((arrays[f"{s}_lengths"] == 2048).sum() for s in SPLITS)) == 161  # cut at the width


def test_splits_are_stratified_80_10_10_and_mixed(prepared):
    for name, counts in (("text-bytes", byte_text.TEXT_COUNTS), ("pairs-bytes", byte_text.PAIR_COUNTS)):
        arrays = data.load(name)
        per_split = {s: torch.bincount(arrays[f"{s}_labels"], minlength=len(counts)) for s in SPLITS}
        assert (per_split["train"] + per_split["val"] + per_split["test"]).tolist() == list(counts)
        for split in ("val", "test"):
            assert ((per_split[split] - torch.tensor(counts) * 0.1).abs() <= 1).all(), (name, split, per_split)
        labels = arrays["train_labels"]
        assert not torch.equal(labels, labels.sort().values)  # ordered by hash, not by class
    again = byte_text.split_three(torch.tensor([0, 1] * 50 + [2] * 30), "salt")
    once = byte_text.split_three(torch.tensor([0, 1] * 50 + [2] * 30), "salt")
    assert all(torch.equal(again[s], once[s]) for s in SPLITS)
    assert sorted(torch.cat(list(once.values())).tolist()) == list(range(130))


def test_pairs_keep_the_two_lines_apart_in_order_once_each(prepared):
    home, sources = prepared
    arrays = data.load("pairs-bytes")
    sizes = (39827, 4979, 4978)
    assert {k: tuple(v.shape) for k, v in arrays.items()} == {
        **{f"{s}_tokens": (n, 2, 256) for s, n in zip(SPLITS, sizes)},
        **{f"{s}_lengths": (n, 2) for s, n in zip(SPLITS, sizes)}, **{f"{s}_labels": (n,) for s, n in zip(SPLITS, sizes)},
    }
    assert arrays_sha256(arrays) == PAIRS_ARRAYS_SHA256
    by_question: dict[str, list[tuple[str, int]]] = {}  # '<a>" and "<b>' -> (conversation, label) of each example
    for e in sources[byte_text.PAIRS_MEMBER]["examples"]:
        conversation, question = e["input"].split(byte_text.QUESTION)
        by_question.setdefault(question[:-2], []).append((conversation, int(e["target_scores"]["same"])))
    stored = set()
    for split in SPLITS:
        tokens, lengths, labels = arrays[f"{split}_tokens"], arrays[f"{split}_lengths"], arrays[f"{split}_labels"]
        a_rows, b_rows = _rows(tokens[:, 0], lengths[:, 0]), _rows(tokens[:, 1], lengths[:, 1])
        for a, b, n, label in zip(a_rows, b_rows, lengths.tolist(), labels.tolist()):
            stored.add((a, b))
            if max(n) == 256:
                continue  # a line cut at the width
            a, b = a.decode(), b.decode()
            copies = by_question[f"{a}{byte_text.SEPARATOR}{b}"]
            assert all(copy_label == label for _, copy_label in copies)  # conflicting copies were dropped
            assert any(f"{a} {b}" in conversation for conversation, _ in copies)  # a then b, adjacent
    assert len(stored) == sum(sizes) == 49784  # no pair twice, within or across splits


def test_a_corrupt_bigbench_archive_is_refused_for_the_byte_datasets(prepared, tmp_path, monkeypatch):
    home, _ = prepared
    data_home = tmp_path / "data"
    monkeypatch.setenv("SPECCOND_DATA", str(data_home))
    folder = tmp_path / "bigbench"
    folder.mkdir()
    with (home / "text-bytes" / "raw" / byte_text.cifar10.ARCHIVE).open("rb") as handle:
        head = bytearray(handle.read(1 << 20))  # truncated to 1 MB, and one byte altered
    head[1000] ^= 0xFF
    (folder / byte_text.cifar10.ARCHIVE).write_bytes(bytes(head))
    monkeypatch.setenv("SPECCOND_BIGBENCH", str(folder))
    for spec in byte_text.SPECS:
        refused = r"(?s)bigbench-1.0.0.tar.gz has SHA-256 [0-9a-f]{64}, expected 1bb398a5.*SPECCOND_BIGBENCH"
        with pytest.raises(FileNotFoundError, match=refused):
            prepare(spec, spec.sources[:1])  # not the PyPI fallback
        assert not (data_home / spec.name / "arrays.safetensors").exists()
        assert not list((data_home / spec.name / "raw").iterdir())  # the bad copy is not kept


# --- tasks, the pair model, training -----------------------------------------------------------------------


def test_load_task_reads_tokens_and_pairs_padded_to_the_landmarks(prepared):
    arrays = {name: data.load(name) for name in ("text-bytes", "pairs-bytes")}
    text = load_task(TrainConfig().replaced(task="lra-text", model="nystromformer", train_size=64, test_size=32))
    assert text["train_x"].shape == (64, 2048) and text["train_x"].dtype == torch.int64
    assert torch.equal(text["test_x"], arrays["text-bytes"]["test_tokens"][:32].long())
    pairs = load_task(TrainConfig().replaced(task="lra-retrieval", model="nystromformer", train_size=64, test_size=32, landmarks=96))
    assert pairs["train_x"].shape == (64, 2, 288) and pairs["test_y"].shape == (32,)  # 256 -> 288, on the last dim
    assert torch.equal(pairs["test_x"][..., :256], arrays["pairs-bytes"]["test_tokens"][:32].long())
    assert (pairs["test_x"][..., 256:] == PAD).all()
    shapes = {name: task_shape(name) for name in ("lra-text", "lra-retrieval")}
    assert [(s.kind, s.length, s.vocab, s.classes, s.pairs) for s in shapes.values()] == [
        ("sequence", 2048, 257, 4, False), ("sequence", 256, 257, 2, True)]


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
