"""The paper's five timm vision families, sized for 28 px (Fashion-MNIST) and 32 px (CIFAR-10) images.

    model = build_backbone("swin", image_size=28, channels=1, classes=10, embed_dim=64, depth=4,
                           num_heads=4, patch_size=4)   # plain timm model; the caller seeds and conditions

Every model is constructed directly from its timm class (no registry, no pretrained weights, no hub),
with stochastic depth off (timm's Swin defaults to 0.1, the others to 0) so that the families differ in
their attention and stage layout only. ``backbone_spec`` gives the class and keyword arguments without
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

Why these choices:

- depth counts attention blocks, as in the ViT, except XCiT, where it is the XCA depth (timm's
  ``depth``) and 2 class-attention blocks come on top. Swin spreads depth over two stages
  ``(depth - depth // 2, depth // 2)``; a DaViT block is a (spatial, channel) pair, so depth is even and
  gives ``depth // 2`` pairs. The hierarchical families double width and heads in stage 2 (head width
  ``embed_dim // num_heads`` throughout), as Swin and DaViT do at full size; that is what makes them
  about 2.6 times the ViT's parameters.
- ViT and DeiT take patch_size as given; it must divide image_size (timm would drop the border).
- Swin's stem patch is ``patch_size // 2``, so its last stage sees the ViT's grid g and its first stage
  2g; the window is g, which divides both, so stage 1 has 2x2 shifted windows and stage 2 one window.
  patch_size must be even and divide image_size.
- XCiT's ``ConvPatchEmbed`` is a stack of stride-2 3x3 convolutions for patch 8 or 16 only: patch_size
  <= 8 uses 8 and larger uses 16. The padded convolutions give ceil(image_size / patch) tokens a side
  (28 px -> 4x4, covering every pixel); timm's constructor asserts that the patch divides img_size,
  so it is given ``patch * ceil(image_size / patch)`` (32 at 28 px), whose patch grid is the one the
  stem produces. XCA L2-normalises q and k channels, so only V keeps the size of the correction
  (speccond's XCiT adapter reports this as a note).
- DaViT's stem asserts stride 4, so patch_size is not used (logged when it is not 4). Its window
  attention pads the grid to a multiple of the window with zero tokens that the real tokens then attend
  to, so the window must divide every stage's grid: two stages when the stem grid is even (32 px:
  8x8 and 4x4, window 4), one stage with a global window when it is odd (28 px: 7x7, window 7) or
  when depth gives a single pair.
- DeiT here is the DeiT architecture (class token and distillation token, each with its own linear
  head) trained without a teacher: distilled training is off, so in train and eval mode the model
  returns the mean of the two heads' logits, (B, classes). Without a teacher the distillation token is
  a second class token; the DeiT recipe's other half (the teacher's hard labels) is not used.
"""
from __future__ import annotations

import importlib
import logging
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importing this file (as TrainConfig does for FAMILIES) needs neither torch nor timm
    from torch import nn

log = logging.getLogger(__name__)

SEQUENCE_FAMILIES = ("nystromformer",)  # token-sequence models: models/sequence.py
LANGUAGE_FAMILIES = ("bert",)  # WordPiece text models (the language tasks, mlm and glue-*): models/bert.py
FAMILIES = ("vit", "deit", "swin", "xcit", "davit", "xcit-noca")
# xcit-noca: XCiT without timm's two class-attention blocks (a softmax over tokens), pooled by the mean of
# the patch tokens: only XCA's channel attention, as in the detection trunk. It tests whether the class
# attention is why lam = 10 collapses the classification XCiT but not the detection one (issue 17).
DETECTION_FAMILIES = ("xcit-maskrcnn", "vit-maskrcnn")  # Mask R-CNN on a timm trunk: harness/tasks/detection/model.py
MODELS = FAMILIES + SEQUENCE_FAMILIES + LANGUAGE_FAMILIES + DETECTION_FAMILIES

_CLASSES = {
    "vit": "timm.models.vision_transformer.VisionTransformer",
    "deit": "timm.models.deit.VisionTransformerDistilled",
    "swin": "timm.models.swin_transformer.SwinTransformer",
    "xcit": "timm.models.xcit.Xcit",
    "xcit-noca": "timm.models.xcit.Xcit",
    "davit": "timm.models.davit.DaVit",
}
XCIT_PATCHES = (8, 16)  # the patch sizes timm's XCiT ConvPatchEmbed implements
DAVIT_STEM_STRIDE = 4  # timm's DaViT Stem asserts stride 4


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
    if family == "deit":
        model.set_distilled_training(False)  # no teacher: both modes return the mean of the two heads
    return model


def backbone_spec(
    family: str, image_size: int, channels: int, classes: int, embed_dim: int, depth: int, num_heads: int,
    patch_size: int, drop_path: float = 0.0,
) -> tuple[str, dict]:
    """The timm class path and constructor keyword arguments ``build_backbone`` uses (imports no timm)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; known families: {FAMILIES}")
    sizes = dict(image_size=image_size, channels=channels, classes=classes, embed_dim=embed_dim, depth=depth,
                 num_heads=num_heads, patch_size=patch_size)
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{family}: {name} must be an int >= 1, got {value!r}")
    if embed_dim % num_heads:
        raise ValueError(f"{family}: num_heads ({num_heads}) must divide embed_dim ({embed_dim})")
    common = dict(in_chans=channels, num_classes=classes, drop_path_rate=drop_path)  # timm's stochastic depth
    builder = {"vit": _vit, "deit": _vit, "swin": _swin, "xcit": _xcit, "davit": _davit, "xcit-noca": _xcit}[family]
    kwargs = {**common, **builder(family, image_size, embed_dim, depth, num_heads, patch_size)}
    log.info("%s backbone %s(%s)", family, _CLASSES[family].rsplit(".", 1)[1],
             ", ".join(f"{k}={v}" for k, v in kwargs.items()))
    return _CLASSES[family], kwargs


def _vit(family: str, image: int, dim: int, depth: int, heads: int, patch: int) -> dict:
    if image % patch:
        raise ValueError(
            f"{family}: patch_size {patch} does not divide image_size {image} (the border would be dropped); "
            f"patch sizes that fit: {_divisors(image)}"
        )
    return dict(img_size=image, patch_size=patch, embed_dim=dim, depth=depth, num_heads=heads)


def _swin(family: str, image: int, dim: int, depth: int, heads: int, patch: int) -> dict:
    if patch % 2 or image % patch:
        fits = [p for p in _divisors(image) if p % 2 == 0]
        raise ValueError(
            f"swin: the stem patch is patch_size / 2 and the window the last stage's grid image_size / "
            f"patch_size, so patch_size must be even and divide image_size {image}; got {patch}, "
            f"patch sizes that fit: {fits}"
        )
    if depth < 2:
        raise ValueError(f"swin: two stages need depth >= 2 (one block each), got {depth}")
    grid = image // patch  # the ViT grid: stage 2's, and the window; stage 1 is 2 grid x 2 grid
    return dict(
        img_size=image, patch_size=patch // 2, embed_dim=dim, depths=(depth - depth // 2, depth // 2),
        num_heads=(heads, 2 * heads), window_size=grid,
    )


def _xcit(family: str, image: int, dim: int, depth: int, heads: int, patch: int) -> dict:
    stem = XCIT_PATCHES[0] if patch <= XCIT_PATCHES[0] else XCIT_PATCHES[1]
    if stem != patch:
        log.info("xcit: patch_size %d -> %d (timm's XCiT conv stem implements %s)", patch, stem, XCIT_PATCHES)
    if dim % (stem // 2):
        raise ValueError(
            f"{family}: the patch-{stem} conv stem narrows embed_dim by {stem // 2} in its first layer, so embed_dim "
            f"must be a multiple of {stem // 2}; got {dim}"
        )
    grid = math.ceil(image / stem)  # the padded stride-2 convolutions round up
    if family == "xcit-noca":
        return dict(img_size=grid * stem, patch_size=stem, embed_dim=dim, depth=depth, num_heads=heads,
                    cls_attn_layers=0, global_pool="avg")
    return dict(
        img_size=grid * stem, patch_size=stem, embed_dim=dim, depth=depth, num_heads=heads, cls_attn_layers=2,
    )


def _davit(family: str, image: int, dim: int, depth: int, heads: int, patch: int) -> dict:
    if patch != DAVIT_STEM_STRIDE:
        log.info("davit: patch_size %d not used; timm's DaViT stem has stride %d", patch, DAVIT_STEM_STRIDE)
    if image % DAVIT_STEM_STRIDE:
        raise ValueError(
            f"davit: the stride-{DAVIT_STEM_STRIDE} stem needs image_size a multiple of {DAVIT_STEM_STRIDE} "
            f"(else it pads the image), got {image}"
        )
    if depth % 2:
        raise ValueError(f"davit: a DaViT block is a (spatial, channel) pair, so depth must be even, got {depth}")
    grid, pairs = image // DAVIT_STEM_STRIDE, depth // 2
    if grid % 2 == 0 and pairs >= 2:  # window grid / 2 divides stage 1 (grid) and stage 2 (grid / 2)
        return dict(
            depths=(pairs - pairs // 2, pairs // 2), embed_dims=(dim, 2 * dim), num_heads=(heads, 2 * heads),
            window_size=grid // 2,
        )
    return dict(depths=(pairs,), embed_dims=(dim,), num_heads=(heads,), window_size=grid)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
