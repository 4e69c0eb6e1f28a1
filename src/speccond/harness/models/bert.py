"""BERT for the language tasks: transformers' BERT built from a config (no hub), with two heads.

    model = build_bert(vocab=8192, classes=4, embed_dim=128, depth=2, num_heads=2)
    logits = model(tokens)     # tokens (B, L) int64: [CLS] a [SEP] (b [SEP]) then PAD -> logits (B, 4)
    mlm = build_bert(vocab=8192, classes=0, embed_dim=128, depth=2, num_heads=2, masked_lm=True)
    logits = mlm(inputs)       # inputs (B, 2, L): ids, 0/1 prediction flags (mlm.py) -> (n, 8192)

:class:`MaskedLanguageModel` wraps ``BertForMaskedLM`` (decoder tied to the word embeddings) and
computes the decoder only at the flagged positions (harness/tasks/mlm.py). :class:`TextClassifier` wraps
``BertForSequenceClassification`` (pooler on [CLS], then a linear layer). Both keep the transformers
model as ``.bert``, so the encoder's weights have the same names, ``bert.bert.*`` (``ENCODER``), in
either, and a classifier starts from a pre-trained encoder by copying them (pretrained.py). The
attention mask hides PAD; segment ids are 0 up to and including the first [SEP] and 1 after it, as
BERT's pair template gives.

The size follows Crammed BERT's shape at a width a CPU can train: ``intermediate = 4 * embed_dim``,
learned positions for ``MAX_POSITIONS`` = 128 tokens (every language task fits), two segment types.
Dropout is off everywhere, as in the vision and LRA models here: it would draw from the global random
generator, which checkpoints do not hold, so a resumed run would no longer match an uninterrupted one
(Crammed BERT also pre-trains without dropout).
"""
from __future__ import annotations

import os

import torch
from torch import nn

from speccond.data.wordpiece import PAD, SEP

MAX_POSITIONS = 128
ENCODER = "bert.bert."  # prefix of the encoder's weights in both wrappers (the pooler is the classifier's own)
POOLER = ENCODER + "pooler."


def bert_config(vocab: int, classes: int, embed_dim: int, depth: int, num_heads: int):
    """The transformers BertConfig of a model of this size (dropout off; see the module docstring)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import BertConfig

    if embed_dim % num_heads:
        raise ValueError(f"bert: num_heads ({num_heads}) must divide embed_dim ({embed_dim})")
    return BertConfig(
        vocab_size=vocab, hidden_size=embed_dim, num_hidden_layers=depth, num_attention_heads=num_heads,
        intermediate_size=4 * embed_dim, max_position_embeddings=MAX_POSITIONS, type_vocab_size=2,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0, pad_token_id=PAD,
        num_labels=max(classes, 1),
    )


def segment_ids(tokens: torch.Tensor) -> torch.Tensor:
    """BERT's pair template: 0 up to and including the first [SEP], 1 after it, 0 on PAD; (B, L) -> (B, L)."""
    seps = (tokens == SEP).long()  # (B, L)
    return ((seps.cumsum(-1) - seps) > 0).long() * (tokens != PAD)


class MaskedLanguageModel(nn.Module):
    """BertForMaskedLM predicting only where asked: inputs (B, 2, L) -> logits (n, vocab), n flags set."""

    def __init__(self, config) -> None:
        super().__init__()
        from transformers import BertForMaskedLM

        self.bert = BertForMaskedLM(config)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.dim() != 3 or inputs.shape[1] != 2:
            raise ValueError(f"MaskedLanguageModel: expected inputs (batch, 2, length): token ids and prediction "
                             f"flags (harness/tasks/mlm.py mask_tokens), got {tuple(inputs.shape)}")
        ids, flags = inputs[:, 0], inputs[:, 1].bool()  # (B, L) each
        hidden = self.bert.bert(input_ids=ids, attention_mask=(ids != PAD).long()).last_hidden_state  # (B, L, D)
        return self.bert.cls(hidden[flags])  # (n, D) -> (n, vocab), row-major order of the flags


class TextClassifier(nn.Module):
    """BertForSequenceClassification on [CLS] a [SEP] (b [SEP]): tokens (B, L) -> logits (B, classes)."""

    def __init__(self, config) -> None:
        super().__init__()
        from transformers import BertForSequenceClassification

        self.bert = BertForSequenceClassification(config)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 2:
            raise ValueError(f"TextClassifier: expected tokens (batch, length), got {tuple(tokens.shape)}")
        output = self.bert(input_ids=tokens, attention_mask=(tokens != PAD).long(), token_type_ids=segment_ids(tokens))
        return output.logits  # (B, classes)


def build_bert(
    vocab: int, classes: int, embed_dim: int, depth: int, num_heads: int, masked_lm: bool = False, length: int = 0,
) -> MaskedLanguageModel | TextClassifier:
    """A plain BERT with an MLM head (``masked_lm``) or a ``classes``-way classifier; seed torch first.
    ``length``: the task's tokens per example, checked against ``MAX_POSITIONS``."""
    if length > MAX_POSITIONS:
        raise ValueError(f"bert: examples of {length} tokens exceed its {MAX_POSITIONS} positions; use a language "
                         "task (mlm, glue-*), whose examples are at most 128 tokens")
    config = bert_config(vocab, classes, embed_dim, depth, num_heads)
    return MaskedLanguageModel(config) if masked_lm else TextClassifier(config)


def build(config, shape) -> MaskedLanguageModel | TextClassifier:
    """The run's BERT (registry.py's ``bert``) sized by its config, for the language task's text."""
    return build_bert(shape.vocab, shape.classes, config.model.embed_dim, config.model.depth, config.model.num_heads,
                      masked_lm=shape.mlm, length=shape.length)
