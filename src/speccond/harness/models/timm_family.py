"""The paper's five timm vision families, sized for 28 px (Fashion-MNIST) and 32 px (CIFAR-10) images.

    model = build_backbone("swin", image_size=28, channels=1, classes=10, embed_dim=64, depth=4,
                           num_heads=4, patch_size=4)   # plain timm model; the caller seeds and conditions

Each family is a file of this folder (vit.py, deit.py, swin.py, xcit.py, xcit_noca.py, davit.py) with its
class and size arguments, and a line in registry.py; this file checks what they share and builds them.
Every model is constructed directly from its timm class (not timm's model registry, no pretrained
weights, no hub), with stochastic depth off (timm's Swin defaults to 0.1, the others to 0) so that the
families differ in their attention and stage layout only. ``backbone_spec`` gives the class and keyword arguments without
importing timm, so sizes are checked (and can be recorded) before anything is built.

The four size arguments keep their ViT meaning where a family allows it; ``g = image_size // patch_size``
is the ViT token grid. With embed_dim 64, depth 4, num_heads 4, patch_size 4, 10 classes (1 channel at
28 px, 3 at 32 px):

======  ===================================================================  ===============  ===========
family  28 px / 32 px configuration                                          params 28 / 32   / ViT's
======  ===================================================================  ===============  ===========
vit     VisionTransformer, patch 4: 7x7 / 8x8 tokens + class token,          205.1k / 208.1k  1
        4 blocks of width 64, 4 heads
deit    VisionTransformerDistilled: the ViT plus a distillation token and    205.8k / 208.9k  1.00
        its head (see below)
swin    SwinTransformer, stem patch 2 = patch_size / 2: stage 1 14x14 /      535.8k / 537.7k  2.6
        16x16 tokens, width 64, 2 blocks, 4 heads, window 7 / 8 (2x2
        windows, the second block shifted by 3 / 4); patch merging to
        stage 2 7x7 / 8x8, width 128, 2 blocks, 8 heads, one window
xcit    Xcit, timm's conv stem with patch 8 (it offers 8 and 16 only):       335.5k / 335.8k  1.6
        4x4 tokens at both sizes; 4 XCA blocks (width 64, 4 heads) and
        2 class-attention blocks (timm's default for every XCiT)
davit   DaVit, timm's stride-4 stem (fixed): 7x7 / 8x8 tokens. 28 px:        209.2k / 548.4k  1.02 / 2.6
        one stage, 2 (spatial, channel) pairs, width 64, 4 heads,
        window 7 (global). 32 px: two stages, widths 64 / 128, heads
        4 / 8, 1 pair each, window 4 (2x2 windows on 8x8, one on 4x4)
======  ===================================================================  ===============  ===========

Forward + backward of a batch of 32 in train mode, float32, one CPU thread (best of 7, on a shared
2-core machine), 28 / 32 px: vit 0.09 / 0.12 s, deit 0.09 / 0.12 s, swin 0.25 / 0.32 s,
xcit 0.06 / 0.06 s, davit 0.07 / 0.10 s. At TrainConfig's default width 128 the counts are about 4x
(vit 0.80M, swin 2.1M) and Swin takes 1.1 / 1.6 s, the others 0.14 to 0.35 s.

Why these choices (each family's own are in its file):

- depth counts attention blocks, as in the ViT, except XCiT, where it is the XCA depth (timm's
  ``depth``) and 2 class-attention blocks come on top. Swin spreads depth over two stages
  ``(depth - depth // 2, depth // 2)``; a DaViT block is a (spatial, channel) pair, so depth is even and
  gives ``depth // 2`` pairs. The hierarchical families double width and heads in stage 2 (head width
  ``embed_dim // num_heads`` throughout), as Swin and DaViT do at full size; that is what makes them
  about 2.6 times the ViT's parameters.
"""
from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING

from speccond.harness.models.registry import IMAGE_FAMILIES, family_module

if TYPE_CHECKING:  # importing this file (or a family's) needs neither torch nor timm
    from torch import nn

    from speccond.harness.config.train_config import TrainConfig
    from speccond.harness.tasks.datasets import TaskShape

log = logging.getLogger(__name__)


def build(config: TrainConfig, shape: TaskShape) -> nn.Module:
    """The run's image family (``config.model.name``) sized by its config, for the task's images."""
    return build_backbone(config.model.name, shape.image_size, shape.channels, shape.classes, embed_dim=config.model.embed_dim,
                          depth=config.model.depth, num_heads=config.model.num_heads, patch_size=config.model.patch_size,
                          drop_path=config.model.drop_path)


def build_backbone(
    family: str, image_size: int, channels: int, classes: int, embed_dim: int, depth: int, num_heads: int,
    patch_size: int, drop_path: float = 0.0,
) -> nn.Module:
    """A plain (unconditioned) timm model of ``family`` for (B, channels, image_size, image_size) inputs
    returning logits (B, classes) in train and eval mode. Seed torch before calling: this does not.

    Raises ValueError for an unknown family or sizes the family cannot take (the message says what fits).
    """
    path, kwargs = backbone_spec(family, image_size, channels, classes, embed_dim, depth, num_heads, patch_size,
                                 drop_path)
    module_name, class_name = path.rsplit(".", 1)
    model = getattr(importlib.import_module(module_name), class_name)(**kwargs)
    finish = getattr(family_module(family), "finish", None)
    if finish is not None:
        finish(model)
    return model


def backbone_spec(
    family: str, image_size: int, channels: int, classes: int, embed_dim: int, depth: int, num_heads: int,
    patch_size: int, drop_path: float = 0.0,
) -> tuple[str, dict]:
    """The timm class path and constructor keyword arguments ``build_backbone`` uses (imports no timm)."""
    if family not in IMAGE_FAMILIES:
        raise ValueError(f"unknown model family {family!r}; known families: {IMAGE_FAMILIES}")
    sizes = dict(image_size=image_size, channels=channels, classes=classes, embed_dim=embed_dim, depth=depth,
                 num_heads=num_heads, patch_size=patch_size)
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{family}: {name} must be an int >= 1, got {value!r}")
    if embed_dim % num_heads:
        raise ValueError(f"{family}: num_heads ({num_heads}) must divide embed_dim ({embed_dim})")
    module = family_module(family)
    common = dict(in_chans=channels, num_classes=classes, drop_path_rate=drop_path)  # timm's stochastic depth
    kwargs = {**common, **module.timm_kwargs(family, image_size, embed_dim, depth, num_heads, patch_size)}
    log.info("%s backbone %s(%s)", family, module.CLASS.rsplit(".", 1)[1],
             ", ".join(f"{k}={v}" for k, v in kwargs.items()))
    return module.CLASS, kwargs


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
