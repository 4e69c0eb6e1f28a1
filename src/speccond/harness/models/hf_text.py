"""Any transformers encoder for the language tasks, built from its config: ``--model hf:<model_type>``.

    speccond compare --task glue-sst2 --model hf:roberta --set model_args=hidden_size=128,num_hidden_layers=2
    speccond compare --task mlm --model hf:distilbert --set model_args=dim=128,n_layers=2,n_heads=2,hidden_dim=512

``AutoConfig.for_model(model_type, **model_args)`` with the task's vocabulary (the project's WordPiece),
its classes and 130 positions (128 tokens, and RoBERTa-style models count from pad + 1), then ``AutoModelForSequenceClassification`` (glue-*: tokens (B, L) ->
logits (B, classes)) or ``AutoModelForMaskedLM`` (mlm: inputs (B, 2, L) ids and prediction flags ->
logits (n, vocab) at the flagged positions), randomly initialised, never downloaded. PAD is masked out;
segment ids (1 after the first [SEP]) are passed where the config has two token types. Dropout is set to
0 wherever the config names it (unless model_args sets it): it draws from the global generator, which
checkpoints do not hold, so a resumed run would not match an uninterrupted one (models/bert.py).

``--model hf:<folder>`` (a path, models/named.py) fine-tunes a checkpoint of your own: the model is built
from the folder's config.json (model_args overriding it, the task's classes as num_labels) and its weights
are loaded from the folder only (``local_files_only``); weights the task's head needs that the folder lacks
(a classifier over a masked-LM checkpoint) start random and are named in a warning. Its vocabulary must be
the task's: the token ids are the project's WordPiece ones.
"""
from __future__ import annotations

import logging
import os

import torch
from torch import nn

from speccond.data.wordpiece import PAD
from speccond.harness.models.bert import MAX_POSITIONS, segment_ids

log = logging.getLogger(__name__)

HF_PREFIX = "hf:"
DROPOUTS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout", "dropout",
            "attention_dropout", "seq_classif_dropout", "hidden_dropout", "activation_dropout")


def hf_config(model_type: str, vocab: int, classes: int, overrides: dict):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import CONFIG_MAPPING, AutoConfig

    from speccond.harness.models.named import refuse_unknown

    refuse_unknown(model_type, list(CONFIG_MAPPING.keys()), "transformers model type")
    config = AutoConfig.for_model(model_type, vocab_size=vocab, num_labels=max(classes, 1),
                                  max_position_embeddings=MAX_POSITIONS + 2, pad_token_id=PAD, **overrides)
    for name in DROPOUTS:
        if hasattr(config, name) and name not in overrides:
            setattr(config, name, 0.0)
    return config


class HFTextClassifier(nn.Module):
    """tokens (B, L) -> logits (B, classes) through AutoModelForSequenceClassification."""

    def __init__(self, config, folder: str | None = None) -> None:
        super().__init__()
        from transformers import AutoModelForSequenceClassification

        self.model = (AutoModelForSequenceClassification.from_config(config) if folder is None
                      else _from_folder(AutoModelForSequenceClassification, folder, config))
        self.segments = getattr(config, "type_vocab_size", 1) > 1

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        extra = {"token_type_ids": segment_ids(tokens)} if self.segments else {}  # (B, L)
        return self.model(input_ids=tokens, attention_mask=(tokens != PAD).long(), **extra).logits  # (B, classes)


class HFMaskedLanguageModel(nn.Module):
    """inputs (B, 2, L): ids and prediction flags -> logits (n, vocab) at the n flagged positions."""

    def __init__(self, config, folder: str | None = None) -> None:
        super().__init__()
        from transformers import AutoModelForMaskedLM

        self.model = (AutoModelForMaskedLM.from_config(config) if folder is None
                      else _from_folder(AutoModelForMaskedLM, folder, config))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.dim() != 3 or inputs.shape[1] != 2:
            raise ValueError(f"HFMaskedLanguageModel: expected inputs (batch, 2, length), got {tuple(inputs.shape)}")
        ids, flags = inputs[:, 0], inputs[:, 1].bool()  # (B, L) each
        logits = self.model(input_ids=ids, attention_mask=(ids != PAD).long()).logits  # (B, L, vocab)
        return logits[flags]  # (n, vocab), row-major order of the flags


def folder_config(folder: str, vocab: int, classes: int, overrides: dict):
    """The config of the checkpoint in ``folder`` with ``overrides`` and the task's classes; ValueError when its
    vocabulary is not the task's or its positions are too few for the task's sequences."""
    from transformers import AutoConfig

    from speccond.harness.models.named import checkpoint_folder

    config = AutoConfig.from_pretrained(checkpoint_folder(folder), local_files_only=True, **overrides)
    if getattr(config, "vocab_size", vocab) != vocab:
        raise ValueError(f"hf:{folder} has vocab_size={config.vocab_size}, but the task's token ids come from the "
                         f"project's WordPiece of {vocab}; give a checkpoint trained on these ids")
    positions = getattr(config, "max_position_embeddings", MAX_POSITIONS)
    if positions < MAX_POSITIONS:
        raise ValueError(f"hf:{folder} has max_position_embeddings={positions}, fewer than the task's "
                         f"{MAX_POSITIONS} tokens")
    config.num_labels = max(classes, 1)
    for name in DROPOUTS:
        if hasattr(config, name) and name not in overrides:
            setattr(config, name, 0.0)
    return config


def _from_folder(auto_class, folder: str, config) -> nn.Module:
    """``auto_class.from_pretrained`` from ``folder`` alone; the weights it had to start afresh are logged."""
    from speccond.harness.models.named import checkpoint_folder

    model, info = auto_class.from_pretrained(checkpoint_folder(folder), config=config, local_files_only=True,
                                             ignore_mismatched_sizes=True, output_loading_info=True)
    fresh = sorted({*info.get("missing_keys", ()), *(key for key, *_ in info.get("mismatched_keys", ()))})
    if fresh:
        log.warning("hf:%s: %d weights are not in the checkpoint (or have another shape there) and start "
                    "random: %s", folder, len(fresh), ", ".join(fresh))
    return model


def build_hf_text_model(model: str, vocab: int, classes: int, masked_lm: bool, overrides: dict) -> nn.Module:
    """``model`` = "hf:<model_type>" (random weights) or "hf:<folder>" (its checkpoint); seed torch first.
    ValueError for an unknown type (nearest names), a folder that is no checkpoint for the task, or a config
    it cannot build with these arguments."""
    from speccond.harness.models.named import is_checkpoint_folder

    name = model[len(HF_PREFIX):]
    folder = name if is_checkpoint_folder(name) else None
    config = (folder_config(folder, vocab, classes, overrides) if folder
              else hf_config(name, vocab, classes, overrides))
    try:
        return HFMaskedLanguageModel(config, folder) if masked_lm else HFTextClassifier(config, folder)
    except (ValueError, KeyError) as error:
        raise ValueError(f"{model} has no {'masked-LM' if masked_lm else 'sequence-classification'} head in "
                         f"transformers, or cannot be built with {overrides or 'its defaults'} ({error})") from None
