"""Mask R-CNN (torchvision) on a timm XCiT or ViT trunk with a ViTDet-style simple feature pyramid.

    model = build_maskrcnn("xcit-maskrcnn", 96, 10, embed_dim=96, depth=4, num_heads=4, patch_size=8, fpn_channels=64)

The harness builds it for the fashion-scenes task (harness/models/run_model.py), seeded, with the run's
method applied to ``model.backbone.trunk``.

The paper's detection experiment is Mask R-CNN with an XCiT-S backbone on COCO. Here, at a size a CPU
trains (module defaults: width 96, depth 4, 4 heads, patch 8 on 96 px scenes):

- trunk: timm ``Xcit`` (XCA blocks, its conv patch stem and Fourier position encoding; no class-attention
  blocks, which only serve classification) or ``VisionTransformer`` (no class token), built from config,
  ``pretrained=False``. Its last block's patch tokens, through its final LayerNorm, are read as a
  (B, D, H/p, W/p) feature map (timm ``forward_intermediates``).
- simple pyramid (Li et al. 2022, ViTDet): from that single stride-p map, stride p/2 by a 2x2
  transposed convolution (D -> D/2), stride p as is, stride 2p by 2x2 max pooling; each level then
  1x1 conv -> LayerNorm2d -> 3x3 conv -> LayerNorm2d to ``fpn_channels``. Levels "0", "1", "2".
- RPN anchors: one size per level, 4 p / 2, 4 p, 8 p (16, 32, 64 px at p = 8: the scenes' items are 20 to 44
  px squares, their boxes smaller), aspect ratios 0.5, 1, 2.
- RoIAlign: ``MultiScaleRoIAlign`` over the three levels with the level rule re-centred on this scale
  (canonical box side 4 p on level log2(p), so a 16 px box reads stride 4, a 32 px box stride 8, a 64 px
  box stride 16); torchvision's default (224 px on level 4) would send every box here to the finest level.
- heads: torchvision's TwoMLPHead (``fpn_channels * 49 -> 256 -> 256``), a 2-conv mask head of
  ``fpn_channels`` channels (torchvision's has 4 of 256), sampling and proposal counts scaled down
  (module constants), ``min_size = max_size = canvas`` so torchvision never resizes the scenes.

Spectral conditioning goes through ``speccond.harness.methods.apply_method`` on the trunk (run_model.py),
exactly as for classification: every XCA (or ViT Attention) qkv projection is conditioned; the pyramid and the heads
have no attention. XCA L2-normalises q and k over tokens, so only the V correction keeps its size
(speccond's XCiT adapter notes this; the paper's XCiT experiments share it).
"""
from __future__ import annotations

import logging
import math
from collections import OrderedDict

import torch
from torch import nn

log = logging.getLogger(__name__)

TRUNKS = {"xcit-maskrcnn": "xcit", "vit-maskrcnn": "vit"}  # model name -> timm family of its trunk
XCIT_PATCHES = (8, 16)  # timm's XCiT conv stem implements these only
# Mask R-CNN sizes scaled to 96 px scenes with at most 5 objects (torchvision defaults in brackets).
RPN_PRE_NMS = {"training": 600, "testing": 300}  # proposals kept per level before NMS [2000, 1000]
RPN_POST_NMS = {"training": 300, "testing": 100}  # proposals kept after NMS [2000, 1000]
RPN_BATCH_PER_IMAGE = 128  # anchors sampled per image for the RPN loss [256]
BOX_BATCH_PER_IMAGE = 64  # proposals sampled per image for the box and mask losses [512]
DETECTIONS_PER_IMAGE = 20  # [100]; scenes hold at most 5 objects
BOX_REPRESENTATION = 256  # TwoMLPHead width [1024]
# Pixel statistics of the stored training scenes (uint8 / 255), for torchvision's normalisation.
IMAGE_MEAN, IMAGE_STD = 0.164, 0.218


class SimplePyramid(nn.Module):
    """A timm trunk and the ViTDet simple pyramid: (B, C, H, W) images -> OrderedDict of 3 feature maps
    {"0": (B, F, 2H/p, 2W/p), "1": (B, F, H/p, W/p), "2": (B, F, H/2p, W/2p)} (the ``backbone``
    torchvision's GeneralizedRCNN expects, with ``out_channels = F``)."""

    def __init__(self, trunk: nn.Module, embed_dim: int, patch_size: int, channels: int):
        super().__init__()
        from timm.layers import LayerNorm2d

        self.trunk = trunk
        self.patch_size = patch_size
        self.out_channels = channels
        half = embed_dim // 2
        self.rescale = nn.ModuleList([
            nn.ConvTranspose2d(embed_dim, half, kernel_size=2, stride=2),  # stride p -> p / 2
            nn.Identity(),
            nn.MaxPool2d(kernel_size=2, stride=2),  # stride p -> 2 p
        ])
        self.project = nn.ModuleList([
            nn.Sequential(
                nn.Conv2d(width, channels, kernel_size=1, bias=False), LayerNorm2d(channels),
                nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False), LayerNorm2d(channels),
            )
            for width in (half, embed_dim, embed_dim)
        ])

    @property
    def strides(self) -> tuple[int, int, int]:
        return self.patch_size // 2, self.patch_size, 2 * self.patch_size

    def forward(self, images: torch.Tensor) -> OrderedDict[str, torch.Tensor]:
        grid = self.trunk.forward_intermediates(  # the last block, final norm applied: [(B, D, H/p, W/p)]
            images, indices=1, norm=True, output_fmt="NCHW", intermediates_only=True)[-1]
        return OrderedDict(
            (str(level), project(rescale(grid))) for level, (rescale, project) in enumerate(zip(self.rescale, self.project))
        )


def build_trunk(model: str, canvas: int, channels: int, embed_dim: int, depth: int, num_heads: int,
                patch_size: int) -> nn.Module:
    """The timm trunk of ``model`` (TRUNKS), without classification parts; seed torch before calling."""
    if model not in TRUNKS:
        raise ValueError(f"unknown detection model {model!r}; known: {', '.join(TRUNKS)}")
    if embed_dim % num_heads:
        raise ValueError(f"{model}: num_heads ({num_heads}) must divide embed_dim ({embed_dim})")
    if canvas % patch_size or patch_size % 2:
        raise ValueError(f"{model}: patch_size must be even and divide the canvas ({canvas}), got {patch_size}")
    common = dict(img_size=canvas, patch_size=patch_size, in_chans=channels, num_classes=0, embed_dim=embed_dim,
                  depth=depth, num_heads=num_heads, drop_path_rate=0.0)
    if TRUNKS[model] == "xcit":
        if patch_size not in XCIT_PATCHES:
            raise ValueError(f"{model}: timm's XCiT conv stem implements patch sizes {XCIT_PATCHES}, got {patch_size}")
        if embed_dim % (patch_size // 2):
            raise ValueError(f"{model}: the XCiT stem needs embed_dim a multiple of {patch_size // 2}, got {embed_dim}")
        from timm.models.xcit import Xcit

        trunk = Xcit(**common, cls_attn_layers=0)
    else:
        from timm.models.vision_transformer import VisionTransformer

        trunk = VisionTransformer(**common, class_token=False, global_pool="avg")
    trunk.prune_intermediate_layers(indices=1, prune_head=True)  # drops the head (and XCiT's class token)
    return trunk


def build_maskrcnn(trunk_model: str, canvas: int, classes: int, embed_dim: int, depth: int, num_heads: int,
                   patch_size: int, fpn_channels: int) -> nn.Module:
    """An unconditioned torchvision MaskRCNN for (1, canvas, canvas) images and ``classes`` object classes
    (labels 1..classes; 0 is background). Seed torch before calling: this does not."""
    from torchvision.models.detection import MaskRCNN
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
    from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
    from torchvision.ops import MultiScaleRoIAlign

    trunk = build_trunk(trunk_model, canvas, 1, embed_dim, depth, num_heads, patch_size)
    backbone = SimplePyramid(trunk, embed_dim, patch_size, fpn_channels)
    levels = ["0", "1", "2"]
    sizes = tuple((4 * stride,) for stride in backbone.strides)  # 16, 32, 64 px at p = 8
    anchors = AnchorGenerator(sizes=sizes, aspect_ratios=((0.5, 1.0, 2.0),) * len(levels))
    level_rule = dict(canonical_scale=4 * patch_size, canonical_level=int(math.log2(patch_size)))

    def pool(size: int) -> MultiScaleRoIAlign:
        return MultiScaleRoIAlign(featmap_names=levels, output_size=size, sampling_ratio=2, **level_rule)

    return MaskRCNN(
        backbone, num_classes=None, min_size=canvas, max_size=canvas, image_mean=[IMAGE_MEAN], image_std=[IMAGE_STD],
        rpn_anchor_generator=anchors,
        rpn_pre_nms_top_n_train=RPN_PRE_NMS["training"], rpn_pre_nms_top_n_test=RPN_PRE_NMS["testing"],
        rpn_post_nms_top_n_train=RPN_POST_NMS["training"], rpn_post_nms_top_n_test=RPN_POST_NMS["testing"],
        rpn_batch_size_per_image=RPN_BATCH_PER_IMAGE,
        box_roi_pool=pool(7), box_head=TwoMLPHead(fpn_channels * 7 * 7, BOX_REPRESENTATION),
        box_predictor=FastRCNNPredictor(BOX_REPRESENTATION, classes + 1),
        box_batch_size_per_image=BOX_BATCH_PER_IMAGE, box_detections_per_img=DETECTIONS_PER_IMAGE,
        mask_roi_pool=pool(14), mask_head=MaskRCNNHeads(fpn_channels, [fpn_channels, fpn_channels], 1),
        mask_predictor=MaskRCNNPredictor(fpn_channels, fpn_channels, classes + 1),
    )
