"""The detection task's hooks for the harness: its training task and its report (tasks/plugins.py), and its
two model families, xcit-maskrcnn and vit-maskrcnn (models/registry.py). Each imports its module when
called, so torchvision and pycocotools load only for a detection run."""
from __future__ import annotations


def training_task() -> type:
    from speccond.harness.tasks.detection.task import Detection  # torchvision's detection models, pycocotools

    return Detection


def build(config, shape):
    """Mask R-CNN on the config's timm trunk (``config.model.name``) for the task's scenes."""
    from speccond.harness.tasks.detection.model import build_maskrcnn

    return build_maskrcnn(config.model.name, shape.image_size, shape.classes, config.model.embed_dim, config.model.depth,
                          config.model.num_heads, config.model.patch_size, config.model.fpn_channels)


def conditioned(model):
    """The timm trunk, the only attention a Mask R-CNN has: the part its method conditions."""
    return model.backbone.trunk


def write_report(folders, out):
    from speccond.harness.tasks.detection.report import write_detection_report

    return write_detection_report(folders, out)
