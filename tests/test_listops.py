"""ListOps (LRA's settings), generated: the operators as LRA computes them, every example re-evaluated
by an independent evaluator, LRA's process reproduced in law, bounds, determinism and the pinned checksum."""
from __future__ import annotations

import dataclasses
import functools
import random
import statistics

import numpy as np
import pytest
import torch

from speccond import data
from speccond.data import listops
from speccond.data.listops import MAX, MED, MIN, SM, VOCAB, ListOpsConfig, apply, evaluate
from speccond.data.store import ARRAYS, arrays_sha256

TINY = ListOpsConfig(train=300, val=40, test=40, min_length=20, max_length=80, max_depth=6, max_args=6)
SPLITS = ("train", "val", "test")

# --- an independent evaluator over the text, with LRA's to_value semantics ---------------------------------

LRA_OPERATORS = {
    "[MIN": min,
    "[MAX": max,
    "[MED": lambda args: int(statistics.median(args)),  # LRA: int(np.median(args))
    "[SM": lambda args: sum(args) % 10,
}


def read(words: list[str], at: int = 0, depth: int = 1, counts: list[int] | None = None):
    """(value, next position, deepest bracket nesting, argument count of each operator, the root's last)
    of the expression starting at ``words[at]``, an operator at ``depth`` (the root's is 1)."""
    counts = [] if counts is None else counts
    if words[at].isdigit():
        return int(words[at]), at + 1, depth - 1, counts
    operator, args, deepest, at = words[at], [], depth, at + 1
    while words[at] != "]":
        value, at, inner, _ = read(words, at, depth + 1, counts)
        args.append(value)
        deepest = max(deepest, inner)
    counts.append(len(args))
    return LRA_OPERATORS[operator](args), at + 1, deepest, counts


def text_of(expression: str) -> list[int]:
    return [VOCAB.index(word) for word in expression.split()]


# --- the operators and the evaluator ----------------------------------------------------------------------


@pytest.mark.parametrize("operator, values, expected", [
    (MIN, [3, 1, 4], 1), (MAX, [3, 1, 4], 4), (SM, [7, 8, 9], 4), (SM, [0, 0], 0),
    (MED, [5, 1, 3], 3), (MED, [3, 6], 4), (MED, [1, 2, 8, 9], 5), (MED, [0, 1], 0), (MED, [9, 9, 0, 0], 4),
])
def test_operators_compute_what_lra_computes(operator, values, expected):
    assert apply(operator, values) == expected


def test_median_is_lras_int_of_numpy_median_for_even_and_odd_counts():
    """LRA's to_value: int(np.median(args)); for an even count, the mean of the middle two, truncated."""
    rng = random.Random(0)
    for _ in range(2000):
        values = [rng.randrange(10) for _ in range(rng.randint(2, 10))]
        assert apply(MED, values) == int(np.median(values)), values


@pytest.mark.parametrize("expression, expected", [
    ("[MAX 2 9 [MIN 4 7 ] 0 ]", 9),
    ("[SM 5 6 [MAX 1 8 ] ]", 9),
    ("[MED 3 [SM 4 5 ] 1 6 ]", 4),  # MED 1 3 6 9 = (3 + 6) // 2
    ("[MIN [MAX 1 [MED 2 7 ] ] 6 ]", 4),  # MED 2 7 = 4, MAX 1 4 = 4, MIN 4 6 = 4
    ("[SM [SM [SM [SM 9 9 ] 9 ] 9 ] 9 ]", 5),
])
def test_hand_written_expressions_evaluate_to_their_value(expression, expected):
    assert evaluate(text_of(expression)) == expected == read(expression.split())[0]


@pytest.mark.parametrize("tokens, message", [
    (text_of("[MIN 1 2"), "1 operator\\(s\\) still open"),
    (text_of("3"), "expected an operator first, got the digit 3"),
    (text_of("[MIN 1 ] 2"), "more tokens after it closes, at position 3"),
    (text_of("[MIN ]"), "expected '\\]' to close an operator with arguments, at position 1"),
    (text_of("[MIN 1 ]") + [0], "got 0 at position 3 \\(strip the padding first\\)"),
])
def test_malformed_expressions_are_refused(tokens, message):
    with pytest.raises(ValueError, match=message):
        evaluate(tokens)


def test_invalid_configs_are_refused_with_the_fields_to_change():
    with pytest.raises(ValueError, match="need 4 <= min_length <= max_length.*got 300, 100; change those fields"):
        ListOpsConfig(min_length=300, max_length=100)
    with pytest.raises(ValueError, match="min_length=2000 exceeds the longest possible expression \\(122 tokens"):
        ListOpsConfig(min_length=2000, max_length=3000, max_depth=3, max_args=10)  # 2 + 10 * (2 + 10 * 1)
    with pytest.raises(ValueError, match="operator_p must be in \\(0, 1\\), got 1.5"):
        ListOpsConfig(operator_p=1.5)


# --- the generator: LRA's process, bounds, determinism ----------------------------------------------------


def lra_tree(rng: random.Random, depth: int, config: ListOpsConfig) -> list[str]:
    """LRA's generate_tree (lra_benchmarks/data/listops.py), transcribed: an argument at a time."""
    if depth < config.max_depth and rng.random() <= config.operator_p:
        args = [lra_tree(rng, depth + 1, config) for _ in range(rng.randint(2, config.max_args))]
        return [rng.choice(list(LRA_OPERATORS))] + [word for arg in args for word in arg] + ["]"]
    return [str(rng.randrange(10))]


def features(words: list[str]) -> list[float]:
    value, _, deepest, counts = read(words)
    return [len(words), deepest, len(counts), counts[-1], statistics.mean(counts), value, value in (0, 9)]


def test_kept_examples_follow_lras_process_in_law():
    """Means of length, nesting, operator count, root and mean argument counts and label agree within 4
    standard errors with LRA's process run directly (2000 kept each; other seeds give at most 2.1);
    operator_p 0.3 instead is caught (6 to 8 standard errors)."""
    def direct(count):
        rng, kept = random.Random(1), []
        while len(kept) < count:
            tree = lra_tree(rng, 1, TINY)
            if TINY.min_length <= len(tree) <= TINY.max_length:
                kept.append(tree)
        return np.array([features(tree) for tree in kept])

    def ours(config, count):
        rng, table, kept = random.Random(2), listops.shape_table(config), []
        while len(kept) < count:
            if (example := listops.draw(rng, config, table)) is not None:
                kept.append([VOCAB[t] for t in example[0]])
        return np.array([features(tree) for tree in kept])

    def z(a, b):
        return np.abs(a.mean(0) - b.mean(0)) / np.sqrt(a.var(0) / len(a) + b.var(0) / len(b))

    reference = direct(2000)
    assert z(reference, ours(TINY, 2000)).max() < 4
    assert z(reference, ours(dataclasses.replace(TINY, operator_p=0.3), 2000)).max() > 4


def test_every_example_has_its_label_and_respects_the_length_and_depth_bounds():
    config = dataclasses.replace(TINY, max_depth=4, max_args=10, min_length=8, max_length=60)
    arrays = listops.generate_arrays(config)
    deepest = []
    for split in SPLITS:
        tokens, lengths, labels = (arrays[f"{split}_{key}"] for key in ("tokens", "lengths", "labels"))
        for row, length, label in zip(tokens, lengths.tolist(), labels.tolist()):
            assert config.min_length <= length <= config.max_length
            assert (row[:length] != 0).all() and (row[length:] == 0).all()
            value, end, depth, counts = read(listops.decode(row).split())
            assert value == label and end == length and 2 <= min(counts) and max(counts) <= config.max_args
            deepest.append(depth)
    assert max(deepest) == config.max_depth - 1  # brackets nest up to max_depth - 1 (LRA's root has depth 1)


def test_generation_is_deterministic_and_the_seed_matters():
    first, again = listops.generate_arrays(TINY), listops.generate_arrays(TINY)
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)
    other = listops.generate_arrays(dataclasses.replace(TINY, seed=1))
    assert all(not torch.equal(first[f"{split}_tokens"], other[f"{split}_tokens"]) for split in SPLITS)
    fewer = listops.generate_arrays(dataclasses.replace(TINY, train=100))
    assert all(torch.equal(first[f"{s}_{k}"], fewer[f"{s}_{k}"]) for s in ("val", "test") for k in ("tokens", "labels"))
    rows = [bytes(row.to(torch.uint8).tolist()) for split in SPLITS for row in first[f"{split}_tokens"]]
    assert len(set(rows)) == len(rows) == 380  # no example twice, within or across splits


def test_the_lra_configuration_is_lras_and_its_test_split_is_pinned():
    config = data.spec("listops").parse.args[0]
    assert config == ListOpsConfig(train=96_000, val=2_000, test=2_000, min_length=501, max_length=1999,
                                   max_depth=10, max_args=10, operator_p=0.25, seed=0)
    # the first 200 of its test split (the test split is drawn first, from its own stream): a drift of the
    # generator at LRA's lengths is caught without generating the 100k
    prefix = dataclasses.replace(config, test=200)
    sequences, labels = listops.generate(prefix, "test", set())
    tokens, lengths = listops.encode(sequences, prefix.max_length)
    assert arrays_sha256({"tokens": tokens, "lengths": lengths, "labels": torch.tensor(labels)}) == (
        "7927fbed5cf21cb8bb45e88cec5bc7eaa1d39a04e28f3f846fbbdad74bee5e0c")
    assert all(evaluate(list(s)) == label for s, label in zip(sequences, labels))
    assert 501 <= int(lengths.min()) and int(lengths.max()) <= 1999 and 800 < float(lengths.float().mean()) < 1300


# --- listops-small through speccond.data ------------------------------------------------------------------


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """listops-small prepared once in a fresh data dir: (data dir, arrays)."""
    home = tmp_path_factory.mktemp("listops") / "data"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECCOND_DATA", str(home))
        path = data.prepare("listops-small")
        assert path == home / "listops-small" / ARRAYS and data.prepare("listops-small") == path  # then cached
        yield home, data.load("listops-small")


def test_listops_small_has_the_documented_shapes_and_the_pinned_checksum(small):
    _, arrays = small
    sizes = {"train": 8000, "val": 1000, "test": 1000}
    assert {k: (tuple(v.shape), v.dtype) for k, v in arrays.items()} == {
        **{f"{s}_tokens": ((n, 256), torch.int16) for s, n in sizes.items()},
        **{f"{s}_lengths": ((n,), torch.int64) for s, n in sizes.items()},
        **{f"{s}_labels": ((n,), torch.int64) for s, n in sizes.items()},
    }
    assert arrays_sha256(arrays) == data.spec("listops-small").generated_sha256 is not None
    assert data.spec("listops-small").classes == tuple("0123456789") and listops.VOCAB_SIZE == 16
    shares = torch.bincount(arrays["train_labels"], minlength=10).double() / 8000
    assert 0.05 < float(shares.min()) and float(shares.max()) < 0.2  # skewed to 0 and 9 as in LRA, never degenerate


def test_every_listops_small_example_evaluates_to_its_label(small):
    _, arrays = small
    for split in SPLITS:
        for row, length, label in zip(arrays[f"{split}_tokens"].tolist(), arrays[f"{split}_lengths"].tolist(),
                                      arrays[f"{split}_labels"].tolist()):
            assert 100 <= length <= 256 and not any(row[length:])
            value, end, depth, counts = read([VOCAB[t] for t in row[:length]])
            assert value == label and end == length and depth <= 9 and 2 <= min(counts) and max(counts) <= 10


def test_a_generator_that_drifts_from_the_pinned_checksum_is_refused_and_nothing_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCOND_DATA", str(tmp_path / "data"))
    pinned = data.spec("listops-small")
    drifted = dataclasses.replace(pinned, parse=functools.partial(listops.generate_arrays, TINY))  # other output
    monkeypatch.setitem(data.DATASETS, "listops-small", drifted)
    with pytest.raises(ValueError, match=rf"produced arrays with SHA-256 [0-9a-f]{{64}}, expected "
                                         rf"{pinned.generated_sha256}: .*nothing was cached"):
        data.prepare("listops-small")
    assert not list((tmp_path / "data" / "listops-small").glob("arrays*"))
    with pytest.raises(FileNotFoundError, match="speccond data prepare listops-small"):
        data.load("listops-small")
