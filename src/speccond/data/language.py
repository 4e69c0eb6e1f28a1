"""The language experiment's data (Crammed BERT -> GLUE, docs/THEORY.md section 4) at a scale a CPU can run.

One dataset, ``language``, read from the bigbench 1.0.0 source archive (the file and SHA-256 that
``cifar10.py`` pins, from the same sources) in one pass: an MLM pre-training corpus, a WordPiece
tokenizer trained on it, and four GLUE-like fine-tuning tasks encoded with that tokenizer.

    speccond data prepare language        # 2 to 3 minutes on one core (learning the vocabulary: about 1)
    arrays = speccond.data.load("language")

**Corpus** (unlabelled English). ``topical_chat``: 1,078 conversations; its task.json repeats each
conversation's history in every example (28 M characters), so a conversation is rebuilt as its first
turn plus every example's target, one turn a line (2.46 M characters, the whole unique text). That is
10x less than the 28 M suggest, so the English Wikipedia articles of ``paragraph_segmentation`` are
added: its 9,000 examples are 1,000 articles per language in the order de, en, es, fr, it, nl, pl, pt,
ru, and examples 1,000 to 1,999 are the English ones (one sentence a line, 8.98 M characters), the
same kind of text as Crammed BERT's Wikipedia. 2,078 documents, 11.43 M characters, pinned by
``CORPUS_SHA256``. (bigbench asks that its data never be used to train models evaluated on bigbench;
nothing here is.) Held out for MLM evaluation: 5 % of the documents of each source
(``stratified_split`` over the source, salt "language:mlm:0").

**Tokenizer** (wordpiece.py): lowercase WordPiece, ``VOCAB_SIZE`` = 8,192, learnt from the training
documents only; stored as the bytes of its tokenizer.json (``tokenizer`` uint8).

**MLM blocks**: each split's documents, in split order, as one token stream with [SEP] after every
document, cut into ``BLOCK`` = 128-token rows ``[CLS] + 127 tokens``: 21,039 train / 931 test blocks
(2.81 M tokens, 11 of them [UNK]). Masking is done at training time (harness/tasks/mlm.py).

**Tasks** (``SUBSETS``), labelled by the ``target_scores`` key with score 1, duplicates merged and
conflicting ones dropped (``byte_text.deduplicate``), split 80 / 10 / 10 % per class into train / val /
test (``byte_text.split_three``, salt "language:<task>:0"), cut to a width that holds most examples:

=========== ======================================= ======= ===== ==================================
task        source, input                           classes width examples (train/val/test), cut
=========== ======================================= ======= ===== ==================================
sentiment   multiemo all_sentence_en, one sentence  4       64    57,242 (45,794/5,724/5,724), 4.6 %
fact        vitaminc_fact_verification: [CLS] claim 3       128   54,668 (43,735/5,466/5,467), 2.9 %
            [SEP] evidence [SEP] (the evidence is
            cut first)
pairs       movie_dialog_same_or_different: [CLS]   2       64    49,784 (39,827/4,979/4,978), 0.7 %
            line a [SEP] line b [SEP], same speaker?
hyperbaton  hyperbaton: option a's phrase alone,    2       32    50,000 (40,000/5,000/5,000), none
            acceptable iff a has the right order
=========== ======================================= ======= ===== ==================================

They stand in for SST-2 (sentiment), an NLI task such as QNLI or MNLI (fact), MRPC / QQP (pairs) and
CoLA (acceptability: hyperbaton's phrases in the wrong adjective order are unacceptable English).

Stored, for each task T and split S in train, val, test: ``T_S_tokens`` int16 (N, width), PAD 0,
``T_S_lengths`` int64 (N,) tokens before padding, ``T_S_labels`` int64 (N,); and ``mlm_train_tokens``,
``mlm_test_tokens`` int16 (M, 128). The arrays' SHA-256 is pinned (``ARRAYS_SHA256``, checked by
``prepare``): a ``tokenizers`` version that normalises, splits or encodes text differently is refused,
not silently cached.
"""
from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from speccond.data import byte_text, wordpiece
from speccond.data import bigbench_archive as cifar10
from speccond.data.split import stratified_split
from speccond.data.store import DatasetSpec

log = logging.getLogger(__name__)

ROOT = byte_text.ROOT
MEMBERS = {
    "chat": ROOT + "topical_chat/task.json",
    "wiki": ROOT + "paragraph_segmentation/task.json",
    "sentiment": ROOT + "multiemo/all_sentence_en/task.json",
    "fact": ROOT + "vitaminc_fact_verification/task.json",
    "pairs": byte_text.PAIRS_MEMBER,
    "hyperbaton": ROOT + "hyperbaton/task.json",
}
WIKI_ENGLISH = slice(1000, 2000)  # paragraph_segmentation: 1,000 articles per language; English is the second
VOCAB_SIZE = 8192
BLOCK = 128  # tokens per MLM block, [CLS] included
MLM_TEST_FRACTION = 0.05
CORPUS_SHA256 = "88588aaea52b404d016695a65a5845d10bd8bb9df721f124660450f7c803245c"
ARRAYS_SHA256 = "afc5b0cbb474dbf83d24e5f0f0917ae379c144e6b30c38fcc7171b8327c62b73"  # store.arrays_sha256
HYPERBATON = re.compile(r'^Which sentence has the correct adjective order: a " (.+) " b " (.+) " \?$')
CLAIM = "\nClaim: "  # vitaminc inputs are "<page>: <evidence>\nClaim: <claim>"


@dataclass(frozen=True)
class Subset:
    """One fine-tuning task of the dataset."""

    classes: tuple[str, ...]  # in label order
    width: int  # tokens per example, [CLS] and [SEP] included
    pairs: bool  # [CLS] a [SEP] b [SEP] rather than [CLS] a [SEP]
    counts: tuple[int, ...]  # examples per class of the whole source, after de-duplication


SUBSETS = {
    "sentiment": Subset(byte_text.TEXT_CLASSES, 64, False, (21077, 14066, 15229, 6870)),
    "fact": Subset(("True", "False", "Neither"), 128, True, (27242, 20169, 7257)),
    "pairs": Subset(byte_text.PAIR_CLASSES, 64, True, byte_text.PAIR_COUNTS),
    "hyperbaton": Subset(("unacceptable", "acceptable"), 32, False, (25000, 25000)),
}


@dataclass(frozen=True)
class LanguageConfig:
    """How much of the sources to read: all of it for the dataset, a prefix for fast tests."""

    vocab_size: int = VOCAB_SIZE
    documents: int = 0  # the first N conversations and N English articles (0 = all)
    examples: int = 0  # the first N source examples of each task (0 = all)


FULL = LanguageConfig()


def documents(sources: dict[str, dict], config: LanguageConfig = FULL) -> tuple[list[str], torch.Tensor]:
    """The corpus: (texts, source int64 (D,): 0 topical_chat conversation, 1 English Wikipedia article)."""
    conversations: dict[str, list[dict]] = {}
    for example in sources["chat"]["examples"]:
        conversations.setdefault(example["comment"], []).append(example)
    chats = []
    for name, turns in conversations.items():
        first = turns[0]["input"]
        if not (first.startswith('agent_A: "') and first.endswith('"') and first.count("agent_") == 1):
            raise ValueError(f"topical_chat conversation {name}: expected a first input 'agent_A: \"<turn>\"', "
                             f"got {first[:80]!r}")
        chats.append("\n".join([first[len('agent_A: "') : -1]] + [_unquoted(t["target"], name) for t in turns]))
    articles = [example["input"] for example in sources["wiki"]["examples"][WIKI_ENGLISH]]
    if config.documents:
        chats, articles = chats[: config.documents], articles[: config.documents]
    return chats + articles, torch.tensor([0] * len(chats) + [1] * len(articles), dtype=torch.long)


def _unquoted(turn: str, name: str) -> str:
    if len(turn) < 2 or turn[0] != '"' or turn[-1] != '"':
        raise ValueError(f"topical_chat conversation {name}: expected a quoted target turn, got {turn[:80]!r}")
    return turn[1:-1]


def task_texts(name: str, task: dict) -> tuple[list[str], list[str] | None, list[int]]:
    """(first texts, second texts or None, labels) of task ``name``, de-duplicated, in source order."""
    examples = task["examples"]
    subset = SUBSETS[name]
    if name == "hyperbaton":  # option a alone; acceptable (1) when a is the correct order
        keys = [_hyperbaton(example["input"], i)[0] for i, example in enumerate(examples)]
        labels = [1 - byte_text.label_of(example, ("a", "b"), i) for i, example in enumerate(examples)]
    else:
        labels = [byte_text.label_of(example, subset.classes, i) for i, example in enumerate(examples)]
        if name == "sentiment":
            keys = [example["input"] for example in examples]
        elif name == "fact":
            keys = [_claim_and_evidence(example["input"], i) for i, example in enumerate(examples)]
        else:
            keys = [byte_text.pair_of(example["input"], i) for i, example in enumerate(examples)]
    kept = byte_text.deduplicate(keys, labels)
    if subset.pairs:
        return [keys[i][0] for i in kept], [keys[i][1] for i in kept], [labels[i] for i in kept]
    return [keys[i] for i in kept], None, [labels[i] for i in kept]


def _hyperbaton(text: str, position: int) -> tuple[str, str]:
    match = HYPERBATON.match(text)
    if match is None:
        raise ValueError(f"hyperbaton example {position}: expected 'Which sentence has the correct adjective order: "
                         f"a \" <a> \" b \" <b> \" ?', got {text[:120]!r}")
    return match.group(1), match.group(2)


def _claim_and_evidence(text: str, position: int) -> tuple[str, str]:
    evidence, found, claim = text.partition(CLAIM)
    if not found or CLAIM in claim:
        raise ValueError(f"vitaminc example {position}: expected '<evidence>{CLAIM!r}<claim>' once, got {text[:120]!r}")
    return claim, evidence


def build_arrays(sources: dict[str, dict], config: LanguageConfig = FULL) -> dict[str, torch.Tensor]:
    """Every stored array (module docstring) from the six task.json objects, keyed as in ``MEMBERS``."""
    texts, source = documents(sources, config)
    digest = hashlib.sha256("\n\n".join(texts).encode("utf-8")).hexdigest()
    if config == FULL and digest != CORPUS_SHA256:
        raise ValueError(f"the corpus text has SHA-256 {digest}, expected {CORPUS_SHA256}; the archive or this "
                         "parser changed")
    train_docs, test_docs = stratified_split(source, MLM_TEST_FRACTION, "language:mlm:0")
    tokenizer = wordpiece.train_tokenizer([texts[i] for i in train_docs.tolist()], config.vocab_size)
    arrays = {"tokenizer": wordpiece.to_bytes(tokenizer)}
    for split, index in (("train", train_docs), ("test", test_docs)):
        arrays[f"mlm_{split}_tokens"] = wordpiece.pack_blocks(tokenizer, [texts[i] for i in index.tolist()], BLOCK)
    for name, subset in SUBSETS.items():
        task = dict(sources[name], examples=sources[name]["examples"][: config.examples or None])
        first, second, label_list = task_texts(name, task)
        labels = torch.tensor(label_list, dtype=torch.long)
        counts = tuple(torch.bincount(labels, minlength=len(subset.classes)).tolist())
        if not config.examples and counts != subset.counts:
            raise ValueError(f"language task {name}: expected {dict(zip(subset.classes, subset.counts))} examples per "
                             f"class, found {dict(zip(subset.classes, counts))}; the archive or this parser changed")
        tokens, lengths, cut = wordpiece.encode(tokenizer, first, second, subset.width)
        log.info("language: %s, %d examples, %d cut to %d tokens", name, len(first), cut, subset.width)
        for split, index in byte_text.split_three(labels, f"language:{name}:0").items():
            arrays.update({f"{name}_{split}_tokens": tokens[index], f"{name}_{split}_lengths": lengths[index],
                           f"{name}_{split}_labels": labels[index]})
    return arrays


def read_sources(archive: Path) -> dict[str, dict]:
    """The six task.json objects, keyed as in ``MEMBERS``, in one pass over the archive."""
    found = cifar10.read_members(archive, tuple(MEMBERS.values()))
    return {key: found[member] for key, member in MEMBERS.items()}


def parse(files: dict[str, Path]) -> dict[str, torch.Tensor]:
    return build_arrays(read_sources(files["archive"]), FULL)


SPEC = DatasetSpec(
    name="language",
    files={"archive": (cifar10.ARCHIVE, cifar10.SHA256)},
    sources=cifar10.SPEC.sources,
    parse=parse,
    hint=cifar10.SPEC.hint,
    sequence_shape=(BLOCK, VOCAB_SIZE),  # the MLM blocks; each task has its own width (SUBSETS)
    generated_sha256=ARRAYS_SHA256,
)
