"""The detection task's hooks for the harness (tasks/plugins.py): its training task, its model and its report.
Each imports its module when called, so torchvision and pycocotools load only for a detection run."""
from __future__ import annotations


def training_task() -> type:
    from speccond.harness.tasks.detection.task import Detection  # torchvision's detection models, pycocotools

    return Detection


def build_model(config, shape):
    """Mask R-CNN on the config's timm trunk for the task's scenes, and the trunk: the only attention it has."""
    from speccond.harness.tasks.detection.model import build_maskrcnn

    model = build_maskrcnn(config.model, shape.image_size, shape.classes, config.embed_dim, config.depth,
                           config.num_heads, config.patch_size, config.fpn_channels)
    return model, model.backbone.trunk


def write_report(folders, out):
    from speccond.harness.tasks.detection.report import write_detection_report

    return write_detection_report(folders, out)
