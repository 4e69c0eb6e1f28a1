"""A lowercase WordPiece tokenizer trained offline, and the BERT encodings built with it.

    tokenizer = train_tokenizer(texts, vocab_size=8192)      # the ``tokenizers`` package, no download
    tokens, lengths, cut = encode(tokenizer, claims, evidence, width=128)   # [CLS] a [SEP] b [SEP], PAD
    blocks = pack_blocks(tokenizer, documents, block=128)    # [CLS] + 127 tokens of the running text

The tokenizer is BERT's uncased one in miniature, a ``tokenizers.Tokenizer``: ``BertNormalizer(lowercase=True)``
(which also strips accents and control characters and spaces out CJK characters), ``BertPreTokenizer``
(whitespace and punctuation), a WordPiece model with the ``##`` continuation prefix (greedy longest
match, a word of more than 100 characters or with an unseen character is [UNK]), and BERT's templates
``[CLS] a [SEP]`` and ``[CLS] a [SEP] b [SEP]`` (segment 1 for b). The special tokens take the first ids,
so PAD stays 0 as in every other token dataset here::

    0 [PAD]   1 [UNK]   2 [CLS]   3 [SEP]   4 [MASK]

The vocabulary is learnt here (:func:`learn_vocabulary`), not by ``tokenizers.trainers.WordPieceTrainer``,
which numbers the ``##`` characters in hash-map order and breaks ties between equally frequent pairs
by those numbers, so two processes can learn different vocabularies from the same text (measured: the
``##`` ids differ from run to run). Here the same texts give the same tokenizer.json, byte for byte, in
any process (the tests check it across two). The tokenizer is stored with the arrays it encoded, as
the bytes of its tokenizer.json (:func:`to_bytes`, :func:`from_bytes`), so a model is always read with
the vocabulary it was trained with.
"""
from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Optional, Sequence

if TYPE_CHECKING:  # torch is imported where tensors are made, so learning a vocabulary needs only tokenizers
    import torch

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD, UNK, CLS, SEP, MASK = range(len(SPECIALS))
SPECIAL_COUNT = len(SPECIALS)  # ids below this are special: never masked, never drawn as random tokens
PREFIX = "##"  # marks a piece that continues a word
MAX_WORD = 100  # longer words are [UNK] (BERT's max_input_chars_per_word) and are not learnt from


def train_tokenizer(texts: Sequence[str], vocab_size: int, exact: bool = True):
    """A WordPiece tokenizer of exactly ``vocab_size`` tokens learnt from ``texts`` (module docstring); with
    ``exact=False``, of at most ``vocab_size``: fewer when the texts allow no more merges."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    normalizer, pre_tokenizer = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    words: Counter[str] = Counter()
    for text in texts:
        words.update(word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)))
    vocabulary = learn_vocabulary({w: n for w, n in words.items() if len(w) <= MAX_WORD}, vocab_size, exact)
    model = models.WordPiece({token: i for i, token in enumerate(vocabulary)}, unk_token=SPECIALS[UNK],
                             continuing_subword_prefix=PREFIX, max_input_chars_per_word=MAX_WORD)
    tokenizer = Tokenizer(model)
    tokenizer.add_special_tokens(list(SPECIALS))  # already ids 0..4; marks them special (kept whole, skipped by decode)
    tokenizer.normalizer, tokenizer.pre_tokenizer, tokenizer.decoder = normalizer, pre_tokenizer, decoders.WordPiece()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", CLS), ("[SEP]", SEP)],
    )
    return tokenizer


def learn_vocabulary(word_counts: dict[str, int], vocab_size: int, exact: bool = True) -> list[str]:
    """WordPiece's vocabulary, learnt as BERT's is: the specials, every character (word-initial ``c`` and
    inner ``##c``), then merges of the most frequent adjacent pair of pieces, counted over the words
    weighted by their counts, until ``vocab_size`` tokens. Ties go to the pair whose pieces sort first,
    so the result depends on the word counts alone. ``exact=False``: stop early, without an error, when no
    pair is left to merge. (tokenizers' WordPieceTrainer numbers the ``##c``
    pieces in hash-map order and breaks ties by those numbers, so it can differ between processes.)"""
    words = sorted(word_counts)
    weights = [word_counts[w] for w in words]
    pieces = [[w[0]] + [PREFIX + c for c in w[1:]] for w in words]
    vocabulary = list(SPECIALS) + sorted({p for word in pieces for p in word} - set(SPECIALS))
    known = set(vocabulary)
    if len(vocabulary) > vocab_size:
        raise ValueError(f"the texts hold {len(vocabulary) - SPECIAL_COUNT} distinct characters and pieces, more than "
                         f"a vocabulary of {vocab_size} has room for; give a larger vocab_size")
    counts: defaultdict[tuple[str, str], int] = defaultdict(int)
    where: defaultdict[tuple[str, str], set[int]] = defaultdict(set)  # words that may hold the pair
    for i, word in enumerate(pieces):
        for pair in zip(word, word[1:]):
            counts[pair] += weights[i]
            where[pair].add(i)
    heap = [(-n, a, b) for (a, b), n in counts.items()]  # entries go stale when a count changes; see below
    heapq.heapify(heap)
    while len(vocabulary) < vocab_size and heap:
        negative, a, b = heapq.heappop(heap)
        if counts.get((a, b), 0) != -negative or negative == 0:
            continue  # stale: the pair's current count was pushed when it changed
        merged = a + b[len(PREFIX):]  # b is never word-initial, so it carries the prefix
        if merged not in known:
            vocabulary.append(merged)
            known.add(merged)
        changed = set()
        for i in sorted(where.pop((a, b))):
            old = pieces[i]
            new = _merge(old, a, b, merged)
            if len(new) == len(old):
                continue
            for pair in zip(old, old[1:]):
                counts[pair] -= weights[i]
                changed.add(pair)
            for pair in zip(new, new[1:]):
                counts[pair] += weights[i]
                where[pair].add(i)
                changed.add(pair)
            pieces[i] = new
        counts.pop((a, b), None)
        for pair in sorted(changed - {(a, b)}):
            if counts[pair] > 0:
                heapq.heappush(heap, (-counts[pair], *pair))
    if len(vocabulary) < vocab_size and exact:
        raise ValueError(f"the texts allow only {len(vocabulary)} WordPiece tokens, fewer than vocab_size={vocab_size}")
    return vocabulary


def _merge(word: list[str], a: str, b: str, merged: str) -> list[str]:
    """``word`` with every (a, b) replaced by ``merged``, left to right."""
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
            out.append(merged)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


def to_bytes(tokenizer) -> torch.Tensor:
    """The tokenizer's tokenizer.json as uint8 (n,), to be stored beside the arrays it encoded."""
    import torch

    return torch.frombuffer(bytearray(tokenizer.to_str().encode("utf-8")), dtype=torch.uint8).clone()


def from_bytes(stored: torch.Tensor):
    """The tokenizer stored by :func:`to_bytes`."""
    from tokenizers import Tokenizer

    return Tokenizer.from_str(stored.numpy().tobytes().decode("utf-8"))


def encode(
    tokenizer, first: Sequence[str], second: Optional[Sequence[str]], width: int,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``[CLS] a [SEP]`` (or ``[CLS] a [SEP] b [SEP]`` for pairs), cut to ``width`` tokens, then PAD.

    A pair too long is cut longest first (a token at a time from the end of the longer text), so a
    short claim keeps all its tokens while a long evidence is cut. Returns (tokens int16 (N, width),
    lengths int64 (N,) before padding, the number of examples that were cut).
    """
    import torch

    if second is not None and len(second) != len(first):
        raise ValueError(f"encode: {len(first)} first texts but {len(second)} second texts")
    tokenizer.enable_truncation(max_length=width, strategy="longest_first")
    tokenizer.enable_padding(length=width, pad_id=PAD, pad_token=SPECIALS[PAD])
    try:
        batch = list(zip(first, second)) if second is not None else list(first)
        encodings = tokenizer.encode_batch(batch)
    finally:
        tokenizer.no_truncation()
        tokenizer.no_padding()
    tokens = torch.tensor([e.ids for e in encodings], dtype=torch.int16).reshape(len(batch), width)  # (N, width)
    lengths = torch.tensor([sum(e.attention_mask) for e in encodings], dtype=torch.long)  # (N,)
    return tokens, lengths, sum(1 for e in encodings if e.overflowing)


def pack_blocks(tokenizer, documents: Sequence[str], block: int) -> torch.Tensor:
    """The documents' tokens as one stream, each document followed by [SEP], cut into rows of
    ``block - 1`` tokens, each row led by [CLS]: int16 (M, block). The last partial row is dropped."""
    import torch

    stream: list[int] = []
    for encoding in tokenizer.encode_batch(list(documents), add_special_tokens=False):
        stream += encoding.ids
        stream.append(SEP)
    chunk = block - 1
    rows = len(stream) // chunk
    body = torch.tensor(stream[: rows * chunk], dtype=torch.int16).reshape(rows, chunk)  # (M, block - 1)
    return torch.cat([torch.full((rows, 1), CLS, dtype=torch.int16), body], dim=1)  # (M, block)


def decode(tokenizer, tokens: torch.Tensor) -> str:
    """The text of one row of tokens, special tokens dropped (lowercased; WordPiece joins ``##`` pieces)."""
    return tokenizer.decode([int(t) for t in tokens.tolist()], skip_special_tokens=True)
