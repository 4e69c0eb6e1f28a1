"""Associative recall, generated (no download): a list of key-value pairs, then a query key; the label is
the value that key was paired with. A token-sequence task for the Nystromformer, in the LRA style, whose
answer stands wherever the queried key was drawn, so a model must find it by content, not by position
(Ba et al. 2016's recall task; "multi-query associative recall" in Arora et al. 2023, one query here).

    speccond data prepare associative-recall
    speccond compare --task associative-recall --preset quick

An example with n pairs (4 to 31, uniform) is ``k_1 v_1 k_2 v_2 ... k_n v_n ? k_q`` then PAD up to 64
tokens: n distinct keys drawn from 32, each value uniform over 10, and the query one of the n keys,
uniform; the label is v_q (10 classes, uniform, chance 10 %). Token ids, fixed::

    0 <pad>   1 ?   2..11 the values 0..9   12..43 the keys 0..31   (vocabulary 44)

Splits come from their own streams, ``random.Random("associative-recall:<split>")`` (a string seed is
hashed with SHA-512: the same on every platform), test first, then val, then train, each skipping a
sequence already drawn, so no test example is trained on. Stored, for split in train (8,000), val (1,000),
test (1,000): ``{split}_tokens`` int16 (N, 64), ``{split}_lengths`` int64, ``{split}_labels`` int64, the
layout of ListOps (speccond/data/listops.py); the arrays are pinned by SHA-256 (generated in about a second).
"""
from __future__ import annotations

import random
from pathlib import Path

import torch

from speccond.data.store import DatasetSpec
from speccond.harness.tasks.registry import Task

PAD, QUERY, FIRST_VALUE, VALUES, KEYS = 0, 1, 2, 10, 32
FIRST_KEY = FIRST_VALUE + VALUES  # 12
VOCAB = FIRST_KEY + KEYS  # 44
WIDTH = 64  # tokens per example after padding: 2 * MAX_PAIRS + 2
MIN_PAIRS, MAX_PAIRS = 4, 31
SIZES = {"test": 1_000, "val": 1_000, "train": 8_000}  # drawn in this order


def example(rng: random.Random) -> tuple[list[int], int]:
    """One example's tokens (``k_1 v_1 ... k_n v_n ? k_q``, unpadded) and its label v_q."""
    pairs = rng.randint(MIN_PAIRS, MAX_PAIRS)
    keys = rng.sample(range(KEYS), pairs)
    values = [rng.randrange(VALUES) for _ in keys]
    asked = rng.randrange(pairs)
    tokens = [token for key, value in zip(keys, values) for token in (FIRST_KEY + key, FIRST_VALUE + value)]
    return [*tokens, QUERY, FIRST_KEY + keys[asked]], values[asked]


def recalled(tokens: list[int]) -> int:
    """The label of an example read back from its tokens (PAD dropped): the value after the queried key."""
    tokens = [token for token in tokens if token != PAD]
    if len(tokens) % 2 or tokens[-2] != QUERY:
        raise ValueError(f"an associative-recall example is k v ... k v ? k, got tokens {tokens}")
    pairs = dict(zip(tokens[0:-2:2], tokens[1:-2:2]))
    return pairs[tokens[-1]] - FIRST_VALUE


def generate(files: dict[str, Path] | None = None) -> dict[str, torch.Tensor]:
    """Every split's arrays (the ``parse`` of a generated DatasetSpec: ``files`` is unused)."""
    seen: set[tuple[int, ...]] = set()
    arrays = {}
    for split, size in SIZES.items():
        rng = random.Random(f"associative-recall:{split}")
        rows, labels = [], []
        while len(rows) < size:
            tokens, label = example(rng)
            if tuple(tokens) not in seen:
                seen.add(tuple(tokens))
                rows.append(tokens)
                labels.append(label)
        lengths = torch.tensor([len(row) for row in rows], dtype=torch.long)  # (N,)
        padded = torch.tensor([row + [PAD] * (WIDTH - len(row)) for row in rows], dtype=torch.int16)  # (N, WIDTH)
        arrays.update({f"{split}_tokens": padded, f"{split}_lengths": lengths,
                       f"{split}_labels": torch.tensor(labels, dtype=torch.long)})
    return arrays


SPEC = DatasetSpec(
    name="associative-recall",
    files={},
    sources=(),
    parse=generate,
    hint="nothing to download: it is generated (about a second)",
    classes=tuple(str(value) for value in range(VALUES)),
    sequence_shape=(WIDTH, VOCAB),
    generated_sha256="e9907698fcd2b46485920a6bc983e57c91afa011b5b8454d4f2559a17ee93188",
)


def presets(full: bool) -> list[str]:
    """A 2-layer Nystromformer of width 64 with 16 landmarks (Nystrom attention over the 64 tokens, not the
    full-attention fallback of 64 landmarks), batch 32, AdamW lr 3e-4 (at 1e-3 with 100 warm-up steps a
    baseline stayed at chance for 1,000 steps), all 8,000 training and 1,000 test examples.

    Run times, one thread, while other training jobs shared this 2-core machine (their load varied):
    quick (``speccond compare --task associative-recall --preset quick``): 2 epochs (500 steps), 60 s to 4
    minutes per baseline run, a spectral (lam = 10) run about twice as long; a look at the pipeline, not a
    ranking of methods. full (``--preset full``): 20 epochs (5,000 steps), 18 minutes per baseline run.
    """
    model = ["model=nystromformer", "embed_dim=64", "depth=2", "num_heads=2", "landmarks=16", "batch_size=32",
             "lr=3e-4"]
    if full:
        return [*model, "epochs=20", "warmup_steps=100", "track_every=250"]
    return [*model, "epochs=2", "warmup_steps=20", "track_every=50"]


TASKS = (Task("associative-recall", SPEC.name, "tokens", "recall the value paired with a queried key, 10 classes",
              presets=presets, model="nystromformer", data=SPEC),)
