"""Detection and instance segmentation: the paper's Mask R-CNN experiment at a scale a CPU trains.

    speccond data prepare fashion-scenes
    speccond compare --task fashion-scenes --model xcit-maskrcnn --preset quick --out runs/detection-quick

- data: ``speccond.data.fashion_scenes`` (Fashion-MNIST items on a canvas, exact boxes and masks);
- model.py: torchvision Mask R-CNN on a timm XCiT / ViT trunk with a ViTDet simple pyramid, the method
  applied to the trunk's attention by ``harness.methods.apply_method``;
- metrics.py: COCO box and mask AP with pycocotools;
- task.py: the fashion-scenes task of the one training loop (harness/training/train.py): scenes, batches,
  Mask R-CNN's losses, COCO evaluation;
- report.py, plots.py: the detection table (box and mask AP) and its figure, which
  ``harness.reporting.report.write_report`` writes for runs of this task.

Nothing here is imported by ``import speccond``; torchvision, timm and pycocotools are imported where used.
"""
