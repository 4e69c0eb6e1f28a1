"""Masked-language modelling: BERT's masking with exact counts, drawn from a generator seeded per step.

    inputs, labels = mask_tokens(blocks, torch.Generator().manual_seed(seed * 10**6 + step), vocab=8192)
    logits = model(inputs)                                   # (n, vocab) at the n selected positions
    loss = F.cross_entropy(logits, targets(labels))          # mean over the selected positions

In each row, of the ``e`` eligible tokens (not [PAD], [UNK], [CLS], [SEP], [MASK]), exactly
``k = round(0.15 e)`` are selected, uniformly; of those, ``round(0.8 k)`` become [MASK], ``round(0.1 k)``
a token drawn uniformly from the non-special ids, and the rest are left as they are (Devlin et al. 2019's
80 / 10 / 10; rounding is half up). Exact counts rather than a coin per token keep the number of
predictions per batch fixed, so every step's loss averages the same number of terms.

The model reads ``inputs`` (B, 2, L): row 0 the token ids after masking, row 1 a 1 at each selected
position (where a prediction is asked for), 0 elsewhere. It predicts only there (Crammed BERT's sparse
prediction): the decoder to the 8,192-token vocabulary is the costliest layer of a small BERT, and
15 % of the positions are all the loss reads. ``labels`` (B, L) hold the original token at the
selected positions and ``IGNORE`` elsewhere; :func:`targets` lists them in the order the model's
logits come in (row-major), and is the identity on a classification task's (B,) labels.

A step's masks are a function of (seed, step) only, drawn for the whole global batch before it is split
over processes, so a resumed run, or one on more processes, sees the same masks. The held-out blocks
are masked once, with ``EVAL_MASK_SEED``, the same for every run.
"""
from __future__ import annotations

import torch

from speccond.data.wordpiece import MASK, SPECIAL_COUNT

IGNORE = -100  # label of a position the loss does not read (F.cross_entropy's default ignore_index)
EVAL_MASK_SEED = 1_000_003  # masks of the held-out MLM blocks, the same for every run


def selected_counts(eligible: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row: (selected k, of which [MASK], of which random), from the eligible counts (B,), rounded half up."""
    k = (15 * eligible + 50) // 100
    return k, (8 * k + 5) // 10, (k + 5) // 10


def mask_tokens(tokens: torch.Tensor, generator: torch.Generator, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """tokens (B, L) int -> (inputs int64 (B, 2, L), labels int64 (B, L)) as in the module docstring."""
    tokens = tokens.long()
    batch, length = tokens.shape
    eligible = tokens >= SPECIAL_COUNT  # (B, L)
    scores = torch.rand(batch, length, generator=generator).masked_fill(~eligible, 2.0)  # ineligible sort last
    order = scores.argsort(dim=1, stable=True)  # (B, L): positions by score
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(length).expand(batch, length))  # (B, L)
    k, masked, randomised = (count[:, None] for count in selected_counts(eligible.sum(1)))  # (B, 1) each
    selected = rank < k  # (B, L); eligible positions only, as they rank first
    random_ids = torch.randint(SPECIAL_COUNT, vocab, (batch, length), generator=generator)  # (B, L)
    ids = torch.where(rank < masked, MASK, tokens)
    ids = torch.where((rank >= masked) & (rank < masked + randomised), random_ids, ids)
    inputs = torch.stack([torch.where(selected, ids, tokens), selected.long()], dim=1)  # (B, 2, L)
    return inputs, torch.where(selected, tokens, IGNORE)


def targets(labels: torch.Tensor) -> torch.Tensor:
    """The targets of a model's logits: (B,) class labels as they are; (B, L) MLM labels -> (n,), the
    non-IGNORE ones in row-major order (the order of the selected positions' logits)."""
    return labels if labels.dim() == 1 else labels[labels != IGNORE]
