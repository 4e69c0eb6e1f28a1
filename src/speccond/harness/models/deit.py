"""DeiT: timm's VisionTransformerDistilled, the ViT's sizes (vit.py) plus a distillation token and its head.

DeiT here is the DeiT architecture (class token and distillation token, each with its own linear head) trained
without a teacher: distilled training is off, so in train and eval mode the model returns the mean of the two
heads' logits, (B, classes). Without a teacher the distillation token is a second class token; the DeiT
recipe's other half (the teacher's hard labels) is not used.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from speccond.harness.models.vit import timm_kwargs  # noqa: F401  (the ViT's sizes, patch_size as given)

if TYPE_CHECKING:
    from torch import nn

CLASS = "timm.models.deit.VisionTransformerDistilled"


def finish(model: nn.Module) -> None:
    model.set_distilled_training(False)  # no teacher: both modes return the mean of the two heads
