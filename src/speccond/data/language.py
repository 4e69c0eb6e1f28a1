"""The language experiment's data (Crammed BERT -> GLUE, docs/THEORY.md section 4) at a scale a CPU can run.

One dataset, ``language``: an MLM pre-training corpus, a WordPiece tokenizer learnt from it, and four GLUE
tasks (data/glue.py: SST-2, CoLA, MRPC, RTE) encoded with that tokenizer.

    speccond data prepare language        # about a minute on one core (learning the vocabulary)
    arrays = speccond.data.load("language")

**Corpus** (unlabelled English, 7.67 M characters): the King James Bible as Debian's ``bible-kjv`` prints it
(``bible -f "Genesis 1:1-Revelation 22:21"``, 4.40 M characters, pinned by ``KJV_SHA256``), one document per
chapter (1,189, 4.14 M characters) without the verse references; and the 67,349 SST-2 training sentences, one
document each (their text only; no label is read). Held out for MLM evaluation: 5 % of the documents of each source
(``stratified_split`` over the source, salt "language:mlm:0"). The Bible's files come from the Debian
package (``apt-get install bible-kjv``, which ``./run`` does), checked against ``BIBLE_FILES``' SHA-256.

**Tokenizer** (wordpiece.py): lowercase WordPiece, ``VOCAB_SIZE`` = 8,192, learnt from the training
documents only; stored as the bytes of its tokenizer.json (``tokenizer`` uint8).

**MLM blocks**: each split's documents, in split order, as one token stream with [SEP] after every
document, cut into ``BLOCK`` = 128-token rows ``[CLS] + 127 tokens``. Masking is done at training time
(harness/tasks/mlm.py).

**Tasks** (``SUBSETS``): each GLUE task's train and dev as published (data/glue.py), ``[CLS] a [SEP]`` or
``[CLS] a [SEP] b [SEP]`` cut to the task's width (a pair longest first). Stored per task T: ``T_train_*``
(GLUE train; tuning holds out a split of it, ``TrainConfig.val_size``) and ``T_test_*`` (GLUE dev, scored
once), and where the shared copy has GLUE's labelled test (SST-2, MRPC) ``T_labelled_test_*`` too; each as
``*_tokens`` int16 (N, width), PAD 0, ``*_lengths`` int64 (N,) tokens before padding, ``*_labels`` int64 (N,).
And ``mlm_train_tokens``, ``mlm_test_tokens`` int16 (M, 128). The arrays' SHA-256 is pinned
(``ARRAYS_SHA256``, checked by ``prepare``): a ``tokenizers`` version that normalises, splits or encodes text
differently is refused, not silently cached.

Without the shared data folder the GLUE tasks come through ``datasets.load_dataset("glue", ...)`` (train and
dev; ``online``), and the arrays are not checked against ``ARRAYS_SHA256``.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import torch

from speccond.data import glue, wordpiece
from speccond.data.split import stratified_split
from speccond.data.store import DatasetSpec, Source, sha256

log = logging.getLogger(__name__)

VOCAB_SIZE = 8192
BLOCK = 128  # tokens per MLM block, [CLS] included
MLM_TEST_FRACTION = 0.05
BIBLE_FOLDER = "/usr/lib"  # where Debian's bible-kjv-text installs its data
BIBLE_FILES = {"bible": ("bible.data", "6c746c2acc8a34bfded980883ff1701a5d68934a1c853ebf88a07b978fe0ae0e"),
               "bible_index": ("bible.data.conc", "56349cd5a86be64d91eee62ac050114b89485f13b439ad4f34da99dde3b4dff3")}
WHOLE_BIBLE = "Genesis 1:1-Revelation 22:21"
KJV_SHA256 = "cd45f0c9cedab8e4439bd6486c8952c77cc8b0ecc5d1f6ae3513f2039f47229d"  # of what `bible -f` prints
ARRAYS_SHA256 = "cee9e59f4669331b7b2d8debca6729a2d3fbd37317a75b3d76675ec1be1211e9"  # store.arrays_sha256
DEBIAN_BIBLE = Source("the Debian package bible-kjv-text (apt-get install bible-kjv)", BIBLE_FOLDER)
HINT = f"{glue.HINT}; and `apt-get install bible-kjv` (as root) for the MLM corpus, as ./run does"


@dataclass(frozen=True)
class Subset:
    """One fine-tuning task of the dataset: a GLUE task and the width it is cut to."""

    task: glue.GlueTask
    width: int  # tokens per example, [CLS] and [SEP] included

    @property
    def classes(self) -> tuple[str, ...]:
        return self.task.classes

    @property
    def pairs(self) -> bool:
        return self.task.pairs


SUBSETS = {"sst2": Subset(glue.TASKS["sst2"], 64), "cola": Subset(glue.TASKS["cola"], 64),
           "mrpc": Subset(glue.TASKS["mrpc"], 128), "rte": Subset(glue.TASKS["rte"], 128)}
STORED_SPLITS = {"train": "train", "dev": "test", "test": "labelled_test"}  # GLUE's split -> the stored name


@dataclass(frozen=True)
class LanguageConfig:
    """How much of the sources to read: all of it for the dataset, a prefix for fast tests."""

    vocab_size: int = VOCAB_SIZE
    documents: int = 0  # the first N Bible chapters and N SST-2 sentences of the corpus (0 = all)
    examples: int = 0  # the first N examples of each split of each task (0 = all)


FULL = LanguageConfig()


def bible_text(folder: Path) -> str:
    """What ``bible -f`` prints of the whole Bible from the data files in ``folder`` (checked: KJV_SHA256)."""
    program = shutil.which("bible")
    if program is None:
        raise FileNotFoundError("the program `bible` is not installed; `apt-get install bible-kjv` (as root) "
                                "installs it with the text, as ./run does")
    printed = subprocess.run([program, "-f", "-p", str(folder), WHOLE_BIBLE], capture_output=True, check=True,
                             env={"PATH": os.environ.get("PATH", ""), "HOME": str(folder)}).stdout
    digest = hashlib.sha256(printed).hexdigest()
    if digest != KJV_SHA256:
        raise ValueError(f"`bible -f` printed text with SHA-256 {digest}, expected {KJV_SHA256}: another version "
                         "of the program bible; nothing was cached")
    return printed.decode("utf-8")


def chapters(text: str) -> list[str]:
    """The Bible as one document per chapter, verses one a line without their references ("Ge1:1 ")."""
    found: dict[str, list[str]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        reference, _, verse = line.partition(" ")
        book_chapter, colon, _ = reference.partition(":")
        if not colon or not verse:
            raise ValueError(f"`bible -f` line {number}: expected '<book><chapter>:<verse> <text>', got {line[:80]!r}")
        found.setdefault(book_chapter, []).append(verse)
    return ["\n".join(verses) for verses in found.values()]


def documents(bible: str, sst2_train: list[str], config: LanguageConfig = FULL) -> tuple[list[str], torch.Tensor]:
    """The corpus: (texts, source int64 (D,): 0 a Bible chapter, 1 an SST-2 training sentence)."""
    books, sentences = chapters(bible), [s.strip() for s in sst2_train]
    if config.documents:
        books, sentences = books[: config.documents], sentences[: config.documents]
    return books + sentences, torch.tensor([0] * len(books) + [1] * len(sentences), dtype=torch.long)


def build_arrays(bible: str, tasks: dict[str, dict[str, glue.Examples]],
                 config: LanguageConfig = FULL) -> dict[str, torch.Tensor]:
    """Every stored array (module docstring) from the Bible's text and each task's splits (glue.read_task)."""
    texts, source = documents(bible, tasks["sst2"]["train"].first, config)
    train_docs, test_docs = stratified_split(source, MLM_TEST_FRACTION, "language:mlm:0")
    tokenizer = wordpiece.train_tokenizer([texts[i] for i in train_docs.tolist()], config.vocab_size)
    arrays = {"tokenizer": wordpiece.to_bytes(tokenizer)}
    for split, index in (("train", train_docs), ("test", test_docs)):
        arrays[f"mlm_{split}_tokens"] = wordpiece.pack_blocks(tokenizer, [texts[i] for i in index.tolist()], BLOCK)
    for name, subset in SUBSETS.items():
        for split, examples in tasks[name].items():
            count = config.examples or None
            first, labels = examples.first[:count], torch.tensor(examples.labels[:count], dtype=torch.long)
            second = examples.second[:count] if examples.second is not None else None
            tokens, lengths, cut = wordpiece.encode(tokenizer, first, second, subset.width)
            log.info("language: %s %s, %d examples, %d cut to %d tokens", name, split, len(first), cut, subset.width)
            stored = f"{name}_{STORED_SPLITS[split]}"
            arrays.update({f"{stored}_tokens": tokens, f"{stored}_lengths": lengths, f"{stored}_labels": labels})
    return arrays


def parse(files: dict[str, Path]) -> dict[str, torch.Tensor]:
    folder = files["bible"].parent
    assert files["bible_index"].parent == folder, files  # `bible -p` reads both from one folder
    return build_arrays(bible_text(folder), {name: glue.read_task(s.task, files) for name, s in SUBSETS.items()})


def online() -> dict[str, torch.Tensor]:
    """The dataset with GLUE's train and dev from ``datasets`` (no labelled test) and the Bible from Debian."""
    for name, digest in BIBLE_FILES.values():
        if not (Path(BIBLE_FOLDER) / name).is_file() or sha256(Path(BIBLE_FOLDER) / name) != digest:
            raise FileNotFoundError(f"{Path(BIBLE_FOLDER) / name} is missing or not the one pinned ({digest[:12]}...); "
                                    "`apt-get install bible-kjv` (as root)")
    return build_arrays(bible_text(Path(BIBLE_FOLDER)), {name: glue.from_hub(s.task) for name, s in SUBSETS.items()})


SPEC = DatasetSpec(
    name="language",
    files={**BIBLE_FILES, **{key: entry for s in SUBSETS.values() for key, entry in glue.file_keys(s.task).items()}},
    sources=(glue.SHARED_TEXT, DEBIAN_BIBLE),
    parse=parse,
    hint=HINT,
    format_version=2,  # 1: the withdrawn archive's corpus and tasks
    sequence_shape=(BLOCK, VOCAB_SIZE),  # the MLM blocks; each task has its own width (SUBSETS)
    generated_sha256=ARRAYS_SHA256,
    online=online,
    online_description='datasets.load_dataset("glue", TASK) for sst2, cola, mrpc, rte (train, dev) and Debian bible-kjv',
)
