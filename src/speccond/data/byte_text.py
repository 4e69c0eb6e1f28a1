"""Byte-level analogues of Long Range Arena's Text and Retrieval tasks (Tay et al. 2021), from the bigbench archive.

Both read the PyPI source archive of ``bigbench==1.0.0``, the same file and SHA-256 that ``cifar10.py``
pins, from the same sources (``$SPECCOND_BIGBENCH``, then PyPI's file host). ``prepare`` keeps a copy of
the archive per dataset (``<data dir>/<name>/raw``, 358 MB each, as for cifar10); delete the raw folder
after preparing if the space matters (a format bump would then fetch it again). The member is streamed
out of the archive; nothing is unpacked.

**text-bytes, an analogue of LRA's Text** (IMDb reviews as bytes, 2 classes, cut to 4K bytes, 25k / 25k).
Member ``bigbench-1.0.0/bigbench/benchmark_tasks/multiemo/all_text_en/task.json``: MultiEmo (Kocon et
al. 2021), whole consumer reviews translated into English, 8,215 of them (the union of the subtasks
hotels_, medicine_, products_ and reviews_text_en: 3,955 + 3,272 + 484 + 504), each labelled with its
overall sentiment by the ``target_scores`` key with score 1::

    classes: 0 negative (3,112), 1 neutral (1,217), 2 positive (2,286), 3 ambivalent (1,600)

Whole reviews, not the sentence-level subtask (``all_sentence_en``, 57k sentences of 102 bytes on
average): a long-range task needs long inputs. Reviews are 768 bytes on average (median 691, 99th
percentile 2,330, longest 5,028). Width ``TEXT_WIDTH`` = 2,048 (half of LRA's 4K, a power of two so
every power-of-two landmark count divides it): 8,054 reviews (98.0 %) fit whole; the other 161 keep their
first 2,048 bytes, as LRA keeps the first 4K (a cut can fall inside a multi-byte character).

**pairs-bytes, an analogue of LRA's Retrieval** (ACL Anthology Network: do two papers cite one another,
2 classes, each paper cut to 4K bytes and encoded separately by one shared encoder, the two embeddings
then combined). Member ``bigbench-1.0.0/bigbench/benchmark_tasks/movie_dialog_same_or_different/task.json``:
50,000 pairs of adjacent lines of film dialogue; were the two spoken by the same person? Each input is
``<conversation> ----- In the preceding conversation, were the sentences "<a>" and "<b>" `` and the
two texts are ``a`` and ``b``, in that order (where a line itself contains ``" and "``, the split is the
one for which ``a + " " + b`` occurs in the conversation; exactly one does for every example). The
conversation around the lines is dropped, so each example is cleanly two texts::

    classes: 0 different, 1 same

How it differs from LRA's Retrieval: the relation is "same speaker" between two lines, not a citation
between two documents; the texts are short (31 bytes on average, 99th percentile 130, longest 488), so
it keeps LRA Retrieval's two-tower structure but not its length. Width ``PAIR_WIDTH`` = 256 per text:
37 of the 99,568 stored lines (0.04 %) are cut. 103 pairs occur more than once (308 examples): each is
kept once, and the 11 of them whose copies disagree on the label are dropped, so no pair is in two
splits and none has two labels: 49,784 examples (26,344 different, 23,440 same). A line can still
recur in other pairs, in any split (mostly short ones such as "Yes."; as a paper recurs across AAN pairs).

**Encoding.** UTF-8 bytes, token = byte + 1, so 0 stays PAD and the vocabulary is ``VOCAB_SIZE`` = 257
(the pixel tasks use the same ids). :func:`decode` inverts it.

**Split.** Fixed and stratified with ``speccond.data.split`` (hashed keys, no random generator), on the
examples in source order after de-duplication: ``stratified_split(labels, 0.2, "<name>:0")`` holds out
20 % of each class, and ``stratified_split`` with test fraction 0.5 and salt ``"<name>:0:held-out"``
divides that into val and test. Sizes: text-bytes 6,573 / 821 / 821, pairs-bytes 39,827 / 4,979 /
4,978 (train / val / test).

Stored, for split in train, val, test: ``{split}_tokens`` int16, (N, 2048) for text-bytes and
(N, 2, 256) for pairs-bytes (text a, then text b), the tokens then PAD; ``{split}_lengths`` int64, (N,)
or (N, 2), the tokens before the padding; ``{split}_labels`` int64 (N,). ``sequence_shape`` is
(tokens per text, 257) for both.

    speccond data prepare text-bytes
    arrays = speccond.data.load("text-bytes")   # train_tokens (6573, 2048) int16, val_..., test_...
"""
from __future__ import annotations

import logging
from pathlib import Path

import torch

from speccond.data import bigbench_archive as cifar10
from speccond.data.split import stratified_split
from speccond.data.store import DatasetSpec

log = logging.getLogger(__name__)

ROOT = "bigbench-1.0.0/bigbench/benchmark_tasks/"
TEXT_MEMBER = ROOT + "multiemo/all_text_en/task.json"
PAIRS_MEMBER = ROOT + "movie_dialog_same_or_different/task.json"
PAD = 0
VOCAB_SIZE = 257  # PAD and the 256 byte values
TEXT_WIDTH = 2048
PAIR_WIDTH = 256  # per text
TEXT_CLASSES = ("negative", "neutral", "positive", "ambivalent")
PAIR_CLASSES = ("different", "same")
# Per class, after de-duplication (the archive's checksum fixes them; a mismatch means a parsing change).
TEXT_COUNTS = (3112, 1217, 2286, 1600)
PAIR_COUNTS = (26344, 23440)
HELD_OUT_FRACTION = 0.2  # then halved into val and test
SPLITS = ("train", "val", "test")
QUESTION = ' ----- In the preceding conversation, were the sentences "'
SEPARATOR = '" and "'


def read_member(archive: Path, member: str) -> dict:
    """The JSON file ``member``, streamed out of the archive (cifar10.read_member)."""
    return cifar10.read_member(archive, member)


def label_of(example: dict, classes: tuple[str, ...], position: int) -> int:
    """The index in ``classes`` of the one class whose target score is 1."""
    scores = example["target_scores"]
    if set(scores) != set(classes) or sorted(scores.values()) != [0] * (len(classes) - 1) + [1]:
        raise ValueError(f"example {position}: expected one score of 1 over the classes {classes}, found {scores}")
    return classes.index(max(scores, key=scores.get))


def pair_of(text: str, position: int) -> tuple[str, str]:
    """The two quoted lines (a, b) of a movie_dialog_same_or_different input, in order."""
    conversation, found, question = text.partition(QUESTION)
    if not found or not question.endswith('" '):
        raise ValueError(f"example {position}: expected '<conversation>{QUESTION}<a>{SEPARATOR}<b>\" ', "
                         f"got {text[-200:]!r}")
    parts = question[:-2].split(SEPARATOR)
    candidates = [(SEPARATOR.join(parts[:k]), SEPARATOR.join(parts[k:])) for k in range(1, len(parts))]
    adjacent = [(a, b) for a, b in candidates if f"{a} {b}" in conversation]
    if len(adjacent) != 1:
        raise ValueError(f"example {position}: expected one way to read two adjacent lines of the conversation "
                         f"from {question!r}, found {len(adjacent)}")
    return adjacent[0]


def deduplicate(keys: list, labels: list[int]) -> list[int]:
    """Positions to keep: the first of each key, none of a key whose copies carry different labels."""
    first: dict = {}
    conflicting = set()
    for position, (key, label) in enumerate(zip(keys, labels)):
        if key not in first:
            first[key] = position
        elif labels[first[key]] != label:
            conflicting.add(key)
    return sorted(position for key, position in first.items() if key not in conflicting)


def encode(texts: list[str], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens int16 (N, width): UTF-8 bytes + 1, cut to ``width``, then PAD; lengths int64 (N,))."""
    data = [text.encode("utf-8")[:width] for text in texts]
    lengths = torch.tensor([len(d) for d in data], dtype=torch.long)
    joined = bytearray(b"".join(data))
    flat = torch.frombuffer(joined, dtype=torch.uint8) if joined else torch.empty(0, dtype=torch.uint8)
    tokens = torch.full((len(data), width), PAD, dtype=torch.int16)
    tokens[torch.arange(width) < lengths[:, None]] = flat.to(torch.int16) + 1  # row-major: each row's bytes in order
    return tokens, lengths


def decode(tokens: torch.Tensor) -> bytes:
    """The bytes of one row of tokens, padding dropped (``.decode("utf-8", "replace")`` for text: a cut
    at the width can fall inside a character)."""
    return bytes(t - 1 for t in tokens.tolist() if t != PAD)


def split_three(labels: torch.Tensor, salt: str) -> dict[str, torch.Tensor]:
    """Indices of train / val / test into ``labels``: 80 / 10 / 10 % of each class, disjoint, covering."""
    train, held = stratified_split(labels, HELD_OUT_FRACTION, salt)
    val, test = stratified_split(labels[held], 0.5, f"{salt}:held-out")
    return {"train": train, "val": held[val], "test": held[test]}


def _checked(name: str, labels: list[int], classes: tuple[str, ...], expected: tuple[int, ...]) -> torch.Tensor:
    tensor = torch.tensor(labels, dtype=torch.long)
    counts = tuple(torch.bincount(tensor, minlength=len(classes)).tolist())
    if counts != expected:
        raise ValueError(f"{name}: expected {dict(zip(classes, expected))} examples per class, "
                         f"found {dict(zip(classes, counts))}; the archive or this parser changed")
    return tensor


def parse_text(files: dict[str, Path]) -> dict[str, torch.Tensor]:
    """text-bytes: tokens int16 (N, 2048), lengths, labels; 6,573 / 821 / 821."""
    examples = read_member(files["archive"], TEXT_MEMBER)["examples"]
    texts = [example["input"] for example in examples]
    labels = [label_of(example, TEXT_CLASSES, i) for i, example in enumerate(examples)]
    kept = deduplicate(texts, labels)
    labels_kept = _checked("text-bytes", [labels[i] for i in kept], TEXT_CLASSES, TEXT_COUNTS)
    tokens, lengths = encode([texts[i] for i in kept], TEXT_WIDTH)
    arrays = {}
    for split, index in split_three(labels_kept, "text-bytes:0").items():
        arrays.update({f"{split}_tokens": tokens[index], f"{split}_lengths": lengths[index],
                       f"{split}_labels": labels_kept[index]})
    log.info("text-bytes: %d reviews, %d cut to %d bytes", len(kept), int((lengths == TEXT_WIDTH).sum()), TEXT_WIDTH)
    return arrays


def parse_pairs(files: dict[str, Path]) -> dict[str, torch.Tensor]:
    """pairs-bytes: tokens int16 (N, 2, 256), lengths (N, 2), labels; 39,827 / 4,979 / 4,978."""
    examples = read_member(files["archive"], PAIRS_MEMBER)["examples"]
    pairs = [pair_of(example["input"], i) for i, example in enumerate(examples)]
    labels = [label_of(example, PAIR_CLASSES, i) for i, example in enumerate(examples)]
    kept = deduplicate(pairs, labels)
    labels_kept = _checked("pairs-bytes", [labels[i] for i in kept], PAIR_CLASSES, PAIR_COUNTS)
    tokens_a, lengths_a = encode([pairs[i][0] for i in kept], PAIR_WIDTH)
    tokens_b, lengths_b = encode([pairs[i][1] for i in kept], PAIR_WIDTH)
    tokens = torch.stack([tokens_a, tokens_b], dim=1)  # (N, 2, PAIR_WIDTH)
    lengths = torch.stack([lengths_a, lengths_b], dim=1)  # (N, 2)
    arrays = {}
    for split, index in split_three(labels_kept, "pairs-bytes:0").items():
        arrays.update({f"{split}_tokens": tokens[index], f"{split}_lengths": lengths[index],
                       f"{split}_labels": labels_kept[index]})
    log.info("pairs-bytes: %d of %d pairs kept (duplicates merged, conflicting dropped)", len(kept), len(pairs))
    return arrays


TEXT_SPEC = DatasetSpec(
    name="text-bytes",
    files={"archive": (cifar10.ARCHIVE, cifar10.SHA256)},
    sources=cifar10.SPEC.sources,
    parse=parse_text,
    hint=cifar10.SPEC.hint,
    classes=TEXT_CLASSES,
    sequence_shape=(TEXT_WIDTH, VOCAB_SIZE),
)
PAIRS_SPEC = DatasetSpec(
    name="pairs-bytes",
    files={"archive": (cifar10.ARCHIVE, cifar10.SHA256)},
    sources=cifar10.SPEC.sources,
    parse=parse_pairs,
    hint=cifar10.SPEC.hint,
    classes=PAIR_CLASSES,
    sequence_shape=(PAIR_WIDTH, VOCAB_SIZE),  # per text; each example is two texts
)
SPECS = (TEXT_SPEC, PAIRS_SPEC)
