"""Four GLUE tasks (Wang et al. 2019) as published: SST-2, CoLA, MRPC and RTE, read from their TSV files.

    examples = read_split(TASKS["mrpc"], "dev", Path("text/mrpc/dev.tsv"))   # Examples(first, second, labels)
    examples = from_hub(TASKS["sst2"])["train"]     # the online path: datasets.load_dataset("glue", "sst2")

The files sit in the shared data folder (data/shared.py) under ``text/<task>/`` and are checked against their
SHA-256 (``GlueTask.files``; the folder's SHA256SUMS lists the same) before they are read. Each file's header
and columns are checked, every label too, and the row count against the one stated in ``GlueTask.rows``: a
file that differs is refused naming it. Labels follow GLUE's (and ``datasets``') order:

======= ============================== ========================================= ====================================
task    input                          classes (label order)                     rows (train / dev / labelled test)
======= ============================== ========================================= ====================================
sst2    one sentence                   negative, positive                        67,349 / 872 / 1,821
cola    one sentence                   unacceptable, acceptable                  8,551 / 1,043
mrpc    two sentences                  not_equivalent, equivalent                3,667 / 408 / 1,725
rte     two sentences (premise,        entailment, not_entailment                2,489 / 277
        hypothesis)
======= ============================== ========================================= ====================================

The shared copy differs from GLUE's published counts in three places, each checked here: CoLA's dev holds
1,043 rows (GLUE's own count; its last line has no newline, so ``wc -l`` says 1,042), MRPC's train 3,667
(GLUE: 3,668) and RTE's train 2,489 (GLUE: 2,490; the row of index 2 is missing). The online path gives
GLUE's counts (``GlueTask.published``). GLUE's test labels are not public: the labelled test sets here are
SST-2's and MRPC's, which only the shared copy has; scores are on dev (the ``test`` split of the datasets
built from these), tuning on a split of train.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from speccond.data.store import Source

SHARED_TEXT = Source("the shared data folder ($SPECCOND_SHARED_DATA, else ../shared/data beside the checkout)",
                     "shared:text")
HINT = ("put the shared data folder beside the checkout (../shared/data, holding text/<task>/*.tsv) or set "
        "SPECCOND_SHARED_DATA to it; with internet, `pip install datasets` reads GLUE from the Hugging Face hub")


@dataclass(frozen=True)
class Examples:
    """One split of a task: the first texts, the second texts (None for single-sentence tasks), the labels."""

    first: list[str]
    second: Optional[list[str]]
    labels: list[int]


@dataclass(frozen=True)
class GlueTask:
    name: str  # the folder under text/ and the task's suffix (glue-<name>)
    title: str  # as GLUE writes it
    classes: tuple[str, ...]  # in label order (GLUE's)
    header: Optional[tuple[str, ...]]  # the first line of every file; None: no header
    columns: tuple[int, ...]  # the columns of the first text, the second text (pairs) and the label
    label_names: tuple[str, ...]  # how the files write each class, in label order
    files: dict[str, tuple[str, str]]  # split (train, dev, test) -> (path under text/, SHA-256)
    rows: dict[str, int]  # rows per split in the shared copy
    published: dict[str, int] = field(default_factory=dict)  # GLUE's count where the shared copy differs
    metrics: tuple[str, ...] = ("accuracy",)  # what GLUE scores the task by, headline first (its score: their mean)

    @property
    def pairs(self) -> bool:
        return len(self.columns) == 3


TASKS = {
    "sst2": GlueTask(
        "sst2", "SST-2", ("negative", "positive"), ("sentence", "label"), (0, 1), ("0", "1"),
        {"train": ("sst2/train.tsv", "48eac26399f8456935f81dd9e3a745c1430adb6c62e233ccfe22db4a0d15d1d1"),
         "dev": ("sst2/dev.tsv", "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0"),
         "test": ("sst2/test.tsv", "c0efc56ade6e0598d0f8daca1976e232aee0bcabca8e599341cad290d9d10b3c")},
        {"train": 67349, "dev": 872, "test": 1821}),
    "cola": GlueTask(
        "cola", "CoLA", ("unacceptable", "acceptable"), None, (3, 1), ("0", "1"),
        {"train": ("cola/train.tsv", "5d5b12531cf75ffe24afa0b14019da6dad82fa7b5639eab3f5716e86402ab592"),
         "dev": ("cola/dev.tsv", "8c013e21dc39957cac37378d87bebe225b694a0d5fe13eded66c2856628833fd")},
        {"train": 8551, "dev": 1043}, metrics=("mcc",)),
    "mrpc": GlueTask(
        "mrpc", "MRPC", ("not_equivalent", "equivalent"), ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
        (3, 4, 0), ("0", "1"),
        {"train": ("mrpc/train.tsv", "f178bcc72ab4c2c1c778b480912e0c8e1dba3ead150dc1d490d70682ab888c1e"),
         "dev": ("mrpc/dev.tsv", "9e8f284788040f7c9ecde2e1b3c07237c756f926bd9ef8548ef5d34b56f69f17"),
         "test": ("mrpc/test.tsv", "a04e271090879aaba6423d65b94950c089298587d9c084bf9cd7439bd785f784")},
        {"train": 3667, "dev": 408, "test": 1725}, published={"train": 3668}, metrics=("accuracy", "f1")),
    "rte": GlueTask(
        "rte", "RTE", ("entailment", "not_entailment"), ("index", "sentence1", "sentence2", "label"), (1, 2, 3),
        ("entailment", "not_entailment"),
        {"train": ("rte/train.tsv", "8494e668f3e00c1f8a39c6b12b9c8229ac3f91a1413db417671a849cb0765f01"),
         "dev": ("rte/dev.tsv", "80230dfa1347282e7b532b06a1004a76a710087541189bf874223ddf0e3819fb")},
        {"train": 2489, "dev": 277}, published={"train": 2490}),
}
HUB_SPLITS = {"train": "train", "dev": "validation"}  # datasets' names; its test labels are hidden (-1)


def read_split(task: GlueTask, split: str, path: Path) -> Examples:
    """The examples of ``split`` of ``task`` from its file at ``path`` (checked as the module docstring says)."""
    shown = task.files[split][0]
    with path.open(encoding="utf-8-sig", newline="") as handle:  # MRPC's files start with a byte-order mark
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    if task.header is not None:
        if not rows or tuple(rows[0]) != task.header:
            raise ValueError(f"{shown}: expected the header {task.header}, found {tuple(rows[0]) if rows else 'nothing'}")
        rows = rows[1:]
    width = len(task.header) if task.header is not None else 4
    first, second, labels = [], [] if task.pairs else None, []
    for number, row in enumerate(rows, start=2 if task.header else 1):
        if len(row) != width:
            raise ValueError(f"{shown}, line {number}: expected {width} tab-separated columns, found {len(row)}")
        if row[task.columns[-1]] not in task.label_names:
            raise ValueError(f"{shown}, line {number}: label {row[task.columns[-1]]!r} is not one of {task.label_names}")
        labels.append(task.label_names.index(row[task.columns[-1]]))
        first.append(row[task.columns[0]])
        if second is not None:
            second.append(row[task.columns[1]])
    if len(labels) != task.rows[split]:
        raise ValueError(f"{shown}: expected {task.rows[split]} rows, found {len(labels)} (a different copy of "
                         f"{task.title} {split}); compare it with SHA256SUMS")
    return Examples(first, second, labels)


def read_task(task: GlueTask, files: dict[str, Path]) -> dict[str, Examples]:
    """Every split of ``task`` whose file is in ``files`` (keyed "<task>_<split>", as ``file_keys`` names them)."""
    return {split: read_split(task, split, files[f"{task.name}_{split}"]) for split in task.files
            if f"{task.name}_{split}" in files}


def file_keys(task: GlueTask, splits: tuple[str, ...] = ("train", "dev", "test")) -> dict[str, tuple[str, str]]:
    """``DatasetSpec.files`` entries for ``splits`` of ``task`` that it has: "<task>_<split>" -> (path, SHA-256)."""
    return {f"{task.name}_{split}": task.files[split] for split in splits if split in task.files}


def from_hub(task: GlueTask, load: Optional[Callable] = None) -> dict[str, Examples]:
    """Train and dev of ``task`` through ``datasets.load_dataset("glue", task.name)`` (the online path; ``load``
    stands in for load_dataset, taking the same arguments). Their counts are GLUE's published ones."""
    if load is None:
        from datasets import load_dataset as load
    found = load("glue", task.name)
    names = ("sentence1", "sentence2") if task.pairs else ("sentence",)
    out = {}
    for split, hub_split in HUB_SPLITS.items():
        table = found[hub_split]
        labels = [int(label) for label in table["label"]]
        expected = task.published.get(split, task.rows[split])
        if len(labels) != expected or not set(labels) <= set(range(len(task.classes))):
            raise ValueError(f"datasets' glue/{task.name} {hub_split}: expected {expected} rows labelled 0 to "
                             f"{len(task.classes) - 1}, found {len(labels)} labelled {sorted(set(labels))}")
        out[split] = Examples(list(table[names[0]]), list(table[names[1]]) if task.pairs else None, labels)
    return out
