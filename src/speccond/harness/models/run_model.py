"""The model a run trains: its family for the task's inputs, seeded, with its method applied.

One owner for "build the model of a run", which training (train.py), loading a run's checkpoint
(runs.py) and pre-trained encoders (pretrained.py) all need; it lived in train.py, which made
pretrained -> runs -> train -> pretrained an import cycle.
"""
from __future__ import annotations

import torch
from torch import nn

from speccond.harness.config.train_config import HF_PREFIX, TIMM_PREFIX, TrainConfig
from speccond.harness.models.bert import build_bert
from speccond.harness.models.families import (
    DETECTION_FAMILIES, FAMILIES, LANGUAGE_FAMILIES, SEQUENCE_FAMILIES, build_backbone,
)
from speccond.harness.methods import apply_method
from speccond.harness.models.hf_text import build_hf_text_model
from speccond.harness.models.named import build_timm_model
from speccond.harness.models.sequence import build_nystromformer, padded_length
from speccond.harness.tasks.datasets import TaskShape, task, task_shape
from speccond.harness.tasks.plugins import hook


def build_model(config: TrainConfig, shape: TaskShape) -> nn.Module:
    """The config's model family for the task's inputs, seeded, with the config's method applied: a timm
    family (families.py) for images, a Nystromformer (models/sequence.py) for token sequences (a shared-encoder
    PairClassifier when each example is two texts), BERT (models/bert.py) for WordPiece text, Mask R-CNN
    (harness/tasks/detection/model.py) for scenes, its method applied to the timm trunk (the only attention it has)."""
    kinds = {"image": (FAMILIES, "an image task"), "sequence": (SEQUENCE_FAMILIES, "a token-sequence task (lra-...)"),
             "text": (LANGUAGE_FAMILIES, "a language task (mlm, glue-...)"),
             "scenes": (DETECTION_FAMILIES, "a detection task (fashion-scenes)")}
    kind = ("image" if config.model.startswith(TIMM_PREFIX) else "text" if config.model.startswith(HF_PREFIX)
            else next(k for k, (models, _) in kinds.items() if config.model in models))
    if kind != shape.kind:
        raise ValueError(f"model {config.model!r} takes {kinds[kind][1]}, but task {config.task!r} is {shape.kind}s; "
                         f"choose model from {kinds[shape.kind][0]}")
    torch.manual_seed(config.seed)
    conditioned = None  # the part of the model whose attention the method acts on (None: all of it)
    if kind == "scenes":  # a task with its own model: its plugin builds it (tasks/plugins.py)
        model, conditioned = hook(task(config.task).reading, "build_model")(config, shape)
    elif kind == "text" and config.model.startswith(HF_PREFIX):
        model = build_hf_text_model(config.model, shape.vocab, shape.classes, shape.mlm, config.model_kwargs())
    elif kind == "text":
        model = build_bert(shape.vocab, shape.classes, config.embed_dim, config.depth, config.num_heads,
                           masked_lm=shape.mlm, length=shape.length)
    elif kind == "sequence":
        model = build_nystromformer(
            padded_length(shape.length, config.landmarks), shape.vocab, shape.classes, embed_dim=config.embed_dim,
            depth=config.depth, num_heads=config.num_heads, landmarks=config.landmarks, pairs=shape.pairs,
        )
    else:
        model = (build_timm_model(config, shape) if config.model.startswith(TIMM_PREFIX) else build_backbone(
            config.model, shape.image_size, shape.channels, shape.classes, embed_dim=config.embed_dim,
            depth=config.depth, num_heads=config.num_heads, patch_size=config.patch_size, drop_path=config.drop_path,
        ))
    if config.attention_norm == "none":
        _drop_attention_norms(conditioned or model, config)
    apply_method(conditioned or model, config)
    return model


def _drop_attention_norms(model: nn.Module, config: TrainConfig) -> None:
    """Replace the LayerNorm before every attention (timm blocks' ``norm1``) by the identity (ablation)."""
    blocks = [module for module in model.modules() if isinstance(getattr(module, "norm1", None), nn.LayerNorm)]
    if not blocks:
        raise ValueError(f"attention_norm='none': model {config.model!r} has no blocks with a LayerNorm norm1 "
                         "before attention (the timm families have one; the Nystromformer does not)")
    for block in blocks:
        block.norm1 = nn.Identity()


def model_for(config: TrainConfig) -> nn.Module:
    """The model a run of ``config`` trains, with the input shape of its task (for loading checkpoints)."""
    return build_model(config, task_shape(config.task))
