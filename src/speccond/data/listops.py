"""ListOps (Nangia & Bowman 2018) with Long Range Arena's settings (Tay et al. 2021): generated, not downloaded.

An example is a nested expression over the digits 0-9; its label is the expression's value (10 classes)::

    [MAX 2 9 [MIN 4 7 ] 0 ]          ->  9

**The process** is LRA's ``generate_tree`` (google-research/long-range-arena,
``lra_benchmarks/data/listops.py``): a node at depth ``d`` (the root has depth 1) is an operator with
probability ``operator_p`` = 0.25 if ``d < max_depth`` = 10, else a digit; an operator has
``randint(2, max_args)`` arguments (2 to 10), each a node at depth ``d + 1``; operators and digits are
uniform. So brackets nest at most ``max_depth - 1`` = 9 deep. A tree is kept if its token count lies
within ``[min_length, max_length]``; LRA keeps ``500 < length < 2000``, i.e. [501, 1999] here. LRA counts
length as 2 per operator plus 1 per digit: exactly the tokens stored here.

**Operators** (LRA's ``to_value``): MIN, MAX; SM = sum modulo 10; MED = ``int(np.median(args))``, so for
an even count the two middle values are averaged and the mean truncated, ``(a + b) // 2`` (MED of
3 and 6 is 4: not the lower middle, 3).

**Surface form and vocabulary.** LRA's TSV writes the tree as nested binary pairs,
``( ( ( [MAX 2 ) 9 ) ] )``; the parentheses carry no information and are dropped here, as the common
PyTorch LRA loaders do (state-spaces/s4 ``src/dataloaders/lra.py``: ``]`` renamed to ``X``, parentheses
deleted). LRA's own pipeline (a tfds ``Tokenizer`` that keeps only alphanumerics) also drops ``]``, which
makes some expressions ambiguous; ``]`` is kept here. Token ids, fixed::

    0 <pad>   1 [MIN   2 [MAX   3 [MED   4 [SM   5 ]   6..15 the digits 0..9   (VOCAB_SIZE = 16)

**Generation.** LRA's process draws mostly tiny trees (the root is a digit with probability 0.75), so
trees are drawn by rejection, with savings that leave the kept distribution exactly LRA's: the root is
always an operator (a lone digit is never kept, as ``min_length >= 4``); a first pass draws only the
shape, one draw per operator, and abandons it as soon as it passes ``max_length`` (see ``draw``). Splits
come from their own streams, ``random.Random("listops:<seed>:<split>")`` (a string seed is hashed with
SHA-512: the same on every platform), test first, then val, then train, each skipping any sequence
already drawn (LRA deduplicates too), so the test set does not depend on the train size. ``random()``
becomes an integer as ``int(random() * k)`` (uniform up to 2**-53).

Speed (CPU time of one core of this machine, measured while two training jobs held both cores):
``listops`` about 1.0 ms per kept example (3 draws per kept one, mean 1,020 tokens), so its 100k take
about 2 minutes, plus ~10 s to encode; the arrays are 400 MB. ``listops-small`` about 0.5 ms per kept
example (13 draws per kept one): its 10k take about 5 s. Wall time doubles when the cores are busy.

Stored, for split in train, val, test: ``{split}_tokens`` int16 (N, max_length), the token ids then PAD
(0); ``{split}_lengths`` int64 (N,), the tokens before the padding; ``{split}_labels`` int64 (N,), the
values. Labels are skewed (the process is LRA's): 0 and 9 15-18 % each (MIN and MAX of many digits), 1-8 6-10 %.

    speccond data prepare listops-small
    arrays = speccond.data.load("listops-small")   # train_tokens (8000, 256) int16, val_..., test_...
"""
from __future__ import annotations

import bisect
import functools
import logging
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from speccond.data.store import DatasetSpec

log = logging.getLogger(__name__)

VOCAB = ("<pad>", "[MIN", "[MAX", "[MED", "[SM", "]") + tuple(str(d) for d in range(10))
PAD, MIN, MAX, MED, SM, CLOSE = range(6)
DIGIT0 = 6  # the id of "0"; digit v has id DIGIT0 + v
VOCAB_SIZE = len(VOCAB)
CLASSES = tuple(str(d) for d in range(10))
SPLITS = ("test", "val", "train")  # the order they are drawn in


@dataclass(frozen=True)
class ListOpsConfig:
    """What to generate; the defaults are LRA's."""

    train: int = 96_000  # examples per split
    val: int = 2_000
    test: int = 2_000
    min_length: int = 501  # tokens, inclusive (LRA: 500 < length < 2000)
    max_length: int = 1999  # tokens, inclusive; also the stored width
    max_depth: int = 10  # the root has depth 1; nodes at max_depth are digits
    max_args: int = 10  # arguments per operator: 2..max_args
    operator_p: float = 0.25  # probability that a node above max_depth is an operator
    seed: int = 0

    def __post_init__(self) -> None:
        problems = []
        if min(self.train, self.val, self.test) < 1:
            problems.append(f"split sizes must be >= 1, got train={self.train} val={self.val} test={self.test}")
        if not 4 <= self.min_length <= self.max_length:
            problems.append(f"need 4 <= min_length <= max_length (an expression has >= 4 tokens), "
                            f"got {self.min_length}, {self.max_length}")
        if self.max_depth < 2 or self.max_args < 2:
            problems.append(f"need max_depth >= 2 and max_args >= 2, got {self.max_depth}, {self.max_args}")
        if not 0 < self.operator_p < 1:
            problems.append(f"operator_p must be in (0, 1), got {self.operator_p}")
        if not problems and self.min_length > longest(self.max_depth, self.max_args):
            problems.append(f"min_length={self.min_length} exceeds the longest possible expression "
                            f"({longest(self.max_depth, self.max_args)} tokens at max_depth={self.max_depth}, "
                            f"max_args={self.max_args})")
        if problems:
            raise ValueError("invalid ListOpsConfig: " + "; ".join(problems) + "; change those fields")


def longest(max_depth: int, max_args: int) -> int:
    """Tokens of the longest expression: every node above max_depth an operator with max_args arguments."""
    length = 1  # a digit at max_depth
    for _ in range(max_depth - 1):
        length = 2 + max_args * length
    return length


def apply(operator: int, values: list[int]) -> int:
    """The value of operator id ``operator`` (MIN, MAX, MED or SM) on ``values`` (digits), as LRA computes it."""
    if operator == MIN:
        return min(values)
    if operator == MAX:
        return max(values)
    if operator == SM:
        return sum(values) % 10
    if operator == MED:
        ordered = sorted(values)
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) // 2
    raise ValueError(f"expected an operator id {MIN}..{SM} ([MIN [MAX [MED [SM), got {operator}")


def evaluate(tokens: list[int]) -> int:
    """The value of one expression given as token ids (no padding); ValueError if it is not well formed."""
    stack: list[list[int]] = []  # per open operator: [operator, argument values...]
    result = None
    for position, token in enumerate(tokens):
        if not MIN <= token < VOCAB_SIZE:
            raise ValueError(f"expected token ids 1..{VOCAB_SIZE - 1} ({' '.join(VOCAB[1:])}), got {token} "
                             f"at position {position} (strip the padding first)")
        if result is not None:
            raise ValueError(f"expected one expression, got more tokens after it closes, at position {position}")
        if MIN <= token <= SM:
            stack.append([token])
            continue
        if token == CLOSE:
            if not stack or len(stack[-1]) < 2:
                raise ValueError(f"expected ']' to close an operator with arguments, at position {position}")
            frame = stack.pop()
            value = apply(frame[0], frame[1:])
        else:  # a digit
            if not stack:
                raise ValueError(f"expected an operator first, got the digit {token - DIGIT0} at position {position}")
            value = token - DIGIT0
        if stack:
            stack[-1].append(value)
        else:
            result = value
    if result is None:
        raise ValueError(f"expected a closed expression, got {len(stack)} operator(s) still open after "
                         f"{len(tokens)} tokens")
    return result


class _TooLong(Exception):
    pass


def shape_table(config: ListOpsConfig) -> tuple[list[float], list[tuple[int, int]]]:
    """The joint law of an operator's (argument count n, operator arguments k) away from max_depth:
    n uniform on 2..max_args, k ~ Binomial(n, operator_p); as (cumulative weights, outcomes (n, k))."""
    cumulative, outcomes, total = [], [], 0.0
    for n in range(2, config.max_args + 1):
        for k in range(n + 1):
            weight = float(math.comb(n, k)) / (config.max_args - 1)
            for _ in range(k):  # products, not pow: the same bits on every platform
                weight *= config.operator_p
            for _ in range(n - k):
                weight *= 1 - config.operator_p
            total += weight
            cumulative.append(total)
            outcomes.append((n, k))
    return cumulative, outcomes


def draw(rng: random.Random, config: ListOpsConfig,
         table: tuple[list[float], list[tuple[int, int]]] | None = None) -> tuple[list[int], int] | None:
    """One tree from LRA's process with an operator at the root: (token ids, value); None when its length
    falls outside [min_length, max_length].

    Two passes over one stream. The first draws only the shape, abandoning the tree as soon as it passes
    max_length: per operator the pair (n, k) from ``shape_table`` (an operator at depth max_depth - 1 has
    only digit arguments: k = 0, n uniform). Only a kept shape gets the second pass: its operators, which
    k of its n arguments are operators (a uniform subset, by sequential selection) and its digits. The
    same law as drawing each argument's kind independently with probability operator_p, at a cost per
    operator instead of per token in the first pass, where most of the draws are rejected.
    """
    cumulative, outcomes = table or shape_table(config)
    uniform, total, bisect_right = rng.random, cumulative[-1], bisect.bisect_right
    last, span, limit = config.max_depth - 1, config.max_args - 1, config.max_length
    shapes: list[tuple[int, int]] = []  # (n, k) of each operator, in token order
    record = shapes.append

    def shape(depth: int, length: int) -> int:
        """``length`` plus the tokens of an operator at ``depth``."""
        if depth < last:
            n, k = outcomes[bisect_right(cumulative, uniform() * total)]
            record((n, k))
            length += 2 + n - k
            for _ in range(k):
                if length > limit:
                    raise _TooLong
                length = shape(depth + 1, length)
            return length
        n = 2 + int(uniform() * span)
        record((n, 0))
        return length + 2 + n

    try:
        length = shape(1, 0)
    except _TooLong:
        return None
    if not config.min_length <= length <= limit:
        return None
    out: list[int] = []
    append = out.append
    pending = iter(shapes)

    def fill() -> int:
        n, k = next(pending)
        op = MIN + int(uniform() * 4)
        append(op)
        values = []
        for remaining in range(n, 0, -1):
            if k and uniform() * remaining < k:  # operator with probability k / remaining
                k -= 1
                values.append(fill())
            else:
                digit = int(uniform() * 10)
                append(DIGIT0 + digit)
                values.append(digit)
        append(CLOSE)
        return apply(op, values)

    value = fill()
    assert len(out) == length
    return out, value


def generate(config: ListOpsConfig, split: str, seen: set[bytes]) -> tuple[list[bytes], list[int]]:
    """``config.<split>`` examples (token ids as bytes, values) from the split's own stream; a sequence
    already in ``seen`` is skipped, each kept one is added to it."""
    count = getattr(config, split)
    rng = random.Random(f"listops:{config.seed}:{split}")
    table = shape_table(config)
    sequences: list[bytes] = []
    labels: list[int] = []
    draws, start = 0, time.perf_counter()
    while len(sequences) < count:
        draws += 1
        example = draw(rng, config, table)
        if example is None:
            if draws == 200_000 and not sequences:
                raise ValueError(f"no expression with {config.min_length}..{config.max_length} tokens in 200,000 "
                                 f"draws with {config}: widen the length range or raise max_depth / operator_p")
            continue
        key = bytes(example[0])  # ids < 16: one byte each
        if key in seen:
            continue
        seen.add(key)
        sequences.append(key)
        labels.append(example[1])
        if len(sequences) % 10_000 == 0:
            log.info("listops %s: %d / %d (%.0f s)", split, len(sequences), count, time.perf_counter() - start)
    log.info("listops %s: %d examples from %d draws in %.1f s", split, count, draws, time.perf_counter() - start)
    return sequences, labels


def encode(sequences: list[bytes], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens int16 (N, width) padded with PAD after each sequence, lengths int64 (N,))."""
    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.long)
    assert int(lengths.max()) <= width
    flat = torch.frombuffer(bytearray(b"".join(sequences)), dtype=torch.uint8)  # (sum of lengths,)
    tokens = torch.full((len(sequences), width), PAD, dtype=torch.int16)
    tokens[torch.arange(width) < lengths[:, None]] = flat.to(torch.int16)  # row-major: each row's tokens in order
    return tokens, lengths


def generate_arrays(config: ListOpsConfig, files: dict[str, Path] | None = None) -> dict[str, torch.Tensor]:
    """All three splits as tensors (the ``parse`` of a generated DatasetSpec: ``files`` is unused)."""
    seen: set[bytes] = set()
    arrays = {}
    for split in SPLITS:
        sequences, labels = generate(config, split, seen)
        arrays[f"{split}_tokens"], arrays[f"{split}_lengths"] = encode(sequences, config.max_length)
        arrays[f"{split}_labels"] = torch.tensor(labels, dtype=torch.long)
    return arrays


def decode(tokens: torch.Tensor) -> str:
    """Text of one row of token ids (padding dropped), e.g. ``[MAX 2 9 ]``."""
    return " ".join(VOCAB[t] for t in tokens.tolist() if t != PAD)


LRA = ListOpsConfig()
# Sized for a 2-layer Nystromformer on two CPU cores: LRA's process kept at 100-256 tokens (mean ~180;
# the width 256 is a multiple of the usual landmark counts, 32 and 64), 8k / 1k / 1k.
SMALL = ListOpsConfig(train=8_000, val=1_000, test=1_000, min_length=100, max_length=256)

SPEC = DatasetSpec(
    name="listops",
    files={},
    sources=(),
    parse=functools.partial(generate_arrays, LRA),
    hint="nothing to download: it is generated (about 2 minutes on one core)",
    classes=CLASSES,
    sequence_shape=(LRA.max_length, VOCAB_SIZE),
    generated_sha256="50de37cbd12194972a01cb5ce02a7c2d5cef91475185d3476ed15e8f36f2769d",  # generated 2026-11-29
)
SMALL_SPEC = DatasetSpec(
    name="listops-small",
    files={},
    sources=(),
    parse=functools.partial(generate_arrays, SMALL),
    hint="nothing to download: it is generated (about 5 seconds)",
    classes=CLASSES,
    sequence_shape=(SMALL.max_length, VOCAB_SIZE),
    generated_sha256="23edcdab1fc3aa1f66e4527e40a3d1696beab4e5f2afcdd675f7d1941bfb5bc2",
)
SPECS = (SPEC, SMALL_SPEC)
