"""Byte-level analogues of Long Range Arena's Text and Retrieval tasks (Tay et al. 2021), from two GLUE tasks.

Both read GLUE's train and dev as published (data/glue.py: the shared data folder's TSV files, checked against
their SHA-256, or ``datasets.load_dataset("glue", ...)`` online when there is no shared folder) and store each
text as its UTF-8 bytes. Train is GLUE's train (tuning holds out a split of it, ``TrainConfig.val_size``),
test is GLUE's dev, scored once.

**text-bytes, an analogue of LRA's Text** (IMDb reviews as bytes, 2 classes, cut to 4K bytes, 25k / 25k):
SST-2's sentences, one text each, positive or negative, 67,349 / 872. The texts are short (SST-2's
training phrases: 39 bytes at the median, 268 the longest; dev sentences: 103, 244), so it keeps LRA Text's
byte-level reading and its two classes, not its length. Width ``TEXT_WIDTH`` = 256: no dev text and 20 training
texts are cut.

**pairs-bytes, an analogue of LRA's Retrieval** (ACL Anthology Network: do two papers cite one another,
2 classes, each paper cut to 4K bytes and encoded separately by one shared encoder, the two embeddings then
combined): MRPC's sentence pairs, is the second a paraphrase of the first, 3,667 / 408. Each example is
two texts, read through one shared encoder as LRA Retrieval's are; the relation is paraphrase, not citation,
and the texts are sentences (127 bytes at the median, 226 the longest): width ``PAIR_WIDTH`` = 256 per text,
none cut.

**Encoding.** UTF-8 bytes, token = byte + 1, so 0 stays PAD and the vocabulary is ``VOCAB_SIZE`` = 257
(the pixel tasks use the same ids). :func:`decode` inverts it.

Stored, for split in train, test: ``{split}_tokens`` int16, (N, 256) for text-bytes and (N, 2, 256) for
pairs-bytes (text a, then text b), the tokens then PAD; ``{split}_lengths`` int64, (N,) or (N, 2), the tokens
before the padding; ``{split}_labels`` int64 (N,). ``sequence_shape`` is (tokens per text, 257) for both.

    speccond data prepare text-bytes
    arrays = speccond.data.load("text-bytes")   # train_tokens (67349, 256) int16, test_...
"""
from __future__ import annotations

import logging
from pathlib import Path

import torch

from speccond.data import glue
from speccond.data.store import DatasetSpec

log = logging.getLogger(__name__)

PAD = 0
VOCAB_SIZE = 257  # PAD and the 256 byte values
TEXT_WIDTH = 256
PAIR_WIDTH = 256  # per text
TEXT_TASK, PAIR_TASK = glue.TASKS["sst2"], glue.TASKS["mrpc"]
STORED_SPLITS = {"train": "train", "dev": "test"}  # GLUE's split -> the stored name


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


def text_arrays(splits: dict[str, glue.Examples]) -> dict[str, torch.Tensor]:
    """text-bytes' arrays from SST-2's train and dev: tokens int16 (N, 256), lengths, labels."""
    arrays = {}
    for split, stored in STORED_SPLITS.items():
        tokens, lengths = encode(splits[split].first, TEXT_WIDTH)
        arrays.update({f"{stored}_tokens": tokens, f"{stored}_lengths": lengths,
                       f"{stored}_labels": torch.tensor(splits[split].labels, dtype=torch.long)})
        log.info("text-bytes %s: %d sentences, %d cut to %d bytes", stored, len(lengths),
                 int((lengths == TEXT_WIDTH).sum()), TEXT_WIDTH)
    return arrays


def pair_arrays(splits: dict[str, glue.Examples]) -> dict[str, torch.Tensor]:
    """pairs-bytes' arrays from MRPC's train and dev: tokens int16 (N, 2, 256), lengths (N, 2), labels."""
    arrays = {}
    for split, stored in STORED_SPLITS.items():
        tokens_a, lengths_a = encode(splits[split].first, PAIR_WIDTH)
        tokens_b, lengths_b = encode(splits[split].second, PAIR_WIDTH)
        arrays.update({f"{stored}_tokens": torch.stack([tokens_a, tokens_b], dim=1),  # (N, 2, PAIR_WIDTH)
                       f"{stored}_lengths": torch.stack([lengths_a, lengths_b], dim=1),  # (N, 2)
                       f"{stored}_labels": torch.tensor(splits[split].labels, dtype=torch.long)})
    return arrays


def parse_text(files: dict[str, Path]) -> dict[str, torch.Tensor]:
    return text_arrays(glue.read_task(TEXT_TASK, files))


def parse_pairs(files: dict[str, Path]) -> dict[str, torch.Tensor]:
    return pair_arrays(glue.read_task(PAIR_TASK, files))


TEXT_SPEC = DatasetSpec(
    name="text-bytes",
    files=glue.file_keys(TEXT_TASK, ("train", "dev")),
    sources=(glue.SHARED_TEXT,),
    parse=parse_text,
    hint=glue.HINT,
    format_version=2,  # 1: reviews from the withdrawn archive
    classes=TEXT_TASK.classes,
    sequence_shape=(TEXT_WIDTH, VOCAB_SIZE),
    online=lambda: text_arrays(glue.from_hub(TEXT_TASK)),
    online_description='datasets.load_dataset("glue", "sst2") (train, validation)',
)
PAIRS_SPEC = DatasetSpec(
    name="pairs-bytes",
    files=glue.file_keys(PAIR_TASK, ("train", "dev")),
    sources=(glue.SHARED_TEXT,),
    parse=parse_pairs,
    hint=glue.HINT,
    format_version=2,  # 1: film-dialogue lines from the withdrawn archive
    classes=PAIR_TASK.classes,
    sequence_shape=(PAIR_WIDTH, VOCAB_SIZE),  # per text; each example is two texts
    online=lambda: pair_arrays(glue.from_hub(PAIR_TASK)),
    online_description='datasets.load_dataset("glue", "mrpc") (train, validation)',
)
SPECS = (TEXT_SPEC, PAIRS_SPEC)
