"""The model a run trains: its family for the task's inputs, seeded, with its method applied.

One owner for "build the model of a run", which training (train.py), loading a run's checkpoint
(runs.py) and pre-trained encoders (pretrained.py) all need; it lived in train.py, which made
pretrained -> runs -> train -> pretrained an import cycle.
"""
from __future__ import annotations

import torch
from torch import nn

from speccond.harness.config.train_config import HF_PREFIX, TIMM_PREFIX, TrainConfig
from speccond.harness.methods import apply_method
from speccond.harness.models import timm_family
from speccond.harness.models.hf_text import build_hf_text_model
from speccond.harness.models.named import build_timm_model
from speccond.harness.models.registry import FAMILIES, KINDS, families_of, family_module
from speccond.harness.tasks.datasets import TaskShape, task_shape


def build_model(config: TrainConfig, shape: TaskShape) -> nn.Module:
    """The config's model for the task's inputs, seeded, with the config's method applied: a family of
    models/registry.py (a timm vision family for images, a Nystromformer for token sequences, BERT for
    WordPiece text, Mask R-CNN for scenes, its method applied to the timm trunk, the only attention it has),
    or any timm:<name> (images) or hf:<type> (text) model."""
    kind = ("image" if config.model.name.startswith(TIMM_PREFIX) else "text" if config.model.name.startswith(HF_PREFIX)
            else FAMILIES[config.model.name].kind)
    if kind != shape.kind:
        raise ValueError(f"model {config.model.name!r} takes {KINDS[kind]}, but task {config.data.task!r} is {shape.kind}s; "
                         f"choose model from {families_of(shape.kind)}")
    torch.manual_seed(config.run.seed)
    if config.model.name.startswith(TIMM_PREFIX):
        model = conditioned = build_timm_model(config, shape)
    elif config.model.name.startswith(HF_PREFIX):
        model = conditioned = build_hf_text_model(config.model.name, shape.vocab, shape.classes, shape.mlm,
                                                  config.model.model_kwargs())
    else:
        module = family_module(config.model.name)
        model = timm_family.build(config, shape) if kind == "image" else module.build(config, shape)
        conditioned = module.conditioned(model) if hasattr(module, "conditioned") else model
    if config.model.attention_norm == "none":
        _drop_attention_norms(conditioned, config)
    apply_method(conditioned, config.method)
    return model


def _drop_attention_norms(model: nn.Module, config: TrainConfig) -> None:
    """Replace the LayerNorm before every attention (timm blocks' ``norm1``) by the identity (ablation)."""
    blocks = [module for module in model.modules() if isinstance(getattr(module, "norm1", None), nn.LayerNorm)]
    if not blocks:
        raise ValueError(f"attention_norm='none': model {config.model.name!r} has no blocks with a LayerNorm norm1 "
                         "before attention (the timm families have one; the Nystromformer does not)")
    for block in blocks:
        block.norm1 = nn.Identity()


def model_for(config: TrainConfig) -> nn.Module:
    """The model a run of ``config`` trains, with the input shape of its task (for loading checkpoints)."""
    return build_model(config, task_shape(config.data.task))
