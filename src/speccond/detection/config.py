"""DetectionConfig: one detection training run, every field typed and commented, validated once.

The method fields (method, lam, correction, target_kappa, corrected, granularity, refresh_every) mean
exactly what they mean in the classification harness's TrainConfig and are read by the same
``apply_method``; the rest follows TrainConfig's names where the meaning is the same.
``with_overrides(["lr=3e-4", "epochs=2"])`` (experiments/config_fields.py) parses ``key=value`` strings to
each field's type and rejects unknown keys.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from speccond.experiments.config_fields import ConfigFields
from speccond.experiments.methods import METHODS

TASKS = {"fashion-scenes": "fashion-scenes"}  # detection task -> the prepared dataset it reads
MODELS = ("xcit-maskrcnn", "vit-maskrcnn")  # detection/model.py TRUNKS


@dataclass(frozen=True)
class DetectionConfig(ConfigFields):  # to_dict, from_dict, with_overrides
    task: str = "fashion-scenes"  # one of TASKS
    model: str = "xcit-maskrcnn"  # one of MODELS: Mask R-CNN on a timm XCiT or ViT trunk
    method: str = "spectral"  # one of experiments.methods.METHODS, applied to the trunk's attention
    lam: float = 10.0  # identity correction scale (method "spectral")
    correction: str = "identity"  # "identity" or "svd" (method "spectral")
    target_kappa: float = 0.0  # > 1: lam="auto" (lam per block so the Weyl bound meets it; lam is ignored)
    corrected: str = "qkv"  # which projections the spectral methods correct: any of q, k, v
    granularity: str = "head"  # svd correction per "head" or per "projection" block
    refresh_every: int = 0  # steps between speccond.refresh (recomputes svd corrections; 0 = never)
    embed_dim: int = 96  # trunk width D
    depth: int = 4  # trunk blocks (XCA blocks for XCiT)
    num_heads: int = 4  # heads per block
    patch_size: int = 8  # pixels per patch side (XCiT: 8 or 16); the pyramid has strides p/2, p, 2p
    fpn_channels: int = 64  # channels of every pyramid level and of the mask head's convolutions
    epochs: int = 1  # passes over the training scenes
    train_size: int = 0  # use the first N training scenes (0 = all), after a seeded shuffle
    val_size: int = 200  # validation scenes evaluated after each epoch (0 = none)
    test_size: int = 0  # evaluate the final model on the first N test scenes (0 = all)
    batch_size: int = 8  # scenes per step
    lr: float = 3e-4  # peak AdamW learning rate
    weight_decay: float = 0.05  # decoupled weight decay (AdamW) on matrices
    warmup_steps: int = 100  # linear warm-up, then cosine decay to 0
    grad_clip: float = 1.0  # global gradient-norm clip (0 = off)
    seed: int = 0  # model init, data order, flips and Mask R-CNN's sampling
    checkpoint_every: int = 100  # steps between checkpoints (and at the end of each epoch)
    eval_batch_size: int = 25  # scenes per forward pass at evaluation
    device: str = "auto"  # "auto" (CUDA when available, else CPU), "cpu" or "cuda"

    def __post_init__(self) -> None:
        choices = {"task": tuple(TASKS), "model": MODELS, "method": METHODS, "correction": ("identity", "svd"),
                   "granularity": ("head", "projection"), "device": ("auto", "cpu", "cuda")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"DetectionConfig.{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if not self.corrected or set(self.corrected) - set("qkv") or len(set(self.corrected)) != len(self.corrected):
            raise ValueError(f"DetectionConfig.corrected names projections from 'qkv' (e.g. 'qk', 'v'), got {self.corrected!r}")
        if self.target_kappa != 0 and not (math.isfinite(self.target_kappa) and self.target_kappa > 1):
            raise ValueError(f"DetectionConfig.target_kappa must be 0 (off) or a number > 1, got {self.target_kappa}")
        for name in ("embed_dim", "depth", "num_heads", "patch_size", "fpn_channels", "epochs", "batch_size",
                     "checkpoint_every", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"DetectionConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("train_size", "val_size", "test_size", "warmup_steps", "refresh_every", "seed"):
            if getattr(self, name) < 0:
                raise ValueError(f"DetectionConfig.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("lam", "lr", "weight_decay", "grad_clip"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"DetectionConfig.{name} must be finite and >= 0, got {value}")
        if self.embed_dim % self.num_heads:
            raise ValueError(f"DetectionConfig.num_heads ({self.num_heads}) must divide embed_dim ({self.embed_dim})")
