"""COCO-style box and mask AP with pycocotools (the COCO evaluation itself, not a re-implementation).

    truth = coco_ground_truth(instances, labels, boxes)         # the stored scenes, as a COCO dataset
    metrics = coco_evaluate(truth, detections)                  # {"box_ap": ..., "mask_ap": ...}

Coordinates: a stored box (x0, y0, x1, y1) with exclusive x1, y1 is COCO's [x0, y0, x1 - x0, y1 - y0]
(pixel (r, c) covers [c, c + 1) x [r, r + 1)), and a torchvision box (x1, y1, x2, y2) is read the same
way, so a predicted box equal to the stored one has IoU 1. Masks are run-length encoded by
pycocotools.mask; an instance's area is its visible pixel count. Category ids are the Fashion-MNIST class
+ 1 (torchvision's labels; 0 is background). Reported: AP (IoU 0.50:0.95), AP50, AP75 for boxes and
masks, maxDets 100, COCO's areas (every object here is "small" or "medium" by COCO's 32^2 / 96^2 limits).
"""
from __future__ import annotations

import contextlib
import io
import logging

import numpy as np
import torch

log = logging.getLogger(__name__)

# COCOeval.stats indices -> names (box_ and mask_ prefixed)
STATS = {"ap": 0, "ap50": 1, "ap75": 2, "ap_small": 3, "ap_medium": 4, "ar100": 8}


def coco_ground_truth(instances: torch.Tensor, labels: torch.Tensor, boxes: torch.Tensor, classes: int = 10) -> dict:
    """A COCO dataset dict for N scenes: instances uint8 (N, H, W), labels int64 (N, K) (-1 empty), boxes
    int64 (N, K, 4) exclusive corners (fashion_scenes.py). Image ids are 0..N-1, in order."""
    from pycocotools import mask as mask_utils

    count, height, width = instances.shape
    images = [{"id": n, "height": height, "width": width} for n in range(count)]
    annotations = []
    for n in range(count):
        for k in torch.nonzero(labels[n] >= 0).flatten().tolist():
            x0, y0, x1, y1 = boxes[n, k].tolist()
            rle = _encode((instances[n] == k + 1).numpy(), mask_utils)
            annotations.append({
                "id": len(annotations) + 1, "image_id": n, "category_id": int(labels[n, k]) + 1, "iscrowd": 0,
                "bbox": [x0, y0, x1 - x0, y1 - y0], "area": float(mask_utils.area(rle)), "segmentation": rle,
            })
    categories = [{"id": c + 1, "name": str(c)} for c in range(classes)]
    return {"images": images, "annotations": annotations, "categories": categories}


def detections(image_ids: list[int], outputs: list[dict], mask_threshold: float = 0.5) -> list[dict]:
    """COCO result rows from torchvision Mask R-CNN outputs (boxes (n, 4), labels (n,), scores (n,),
    masks (n, 1, H, W) probabilities), one output per image id: a box and a mask (> threshold) per row."""
    from pycocotools import mask as mask_utils

    rows = []
    for image_id, output in zip(image_ids, outputs):
        masks = (output["masks"][:, 0] > mask_threshold).cpu().numpy()  # (n, H, W)
        for box, label, score, mask in zip(output["boxes"].tolist(), output["labels"].tolist(),
                                           output["scores"].tolist(), masks):
            x0, y0, x1, y1 = box
            rows.append({"image_id": image_id, "category_id": int(label), "score": float(score),
                         "bbox": [x0, y0, x1 - x0, y1 - y0], "segmentation": _encode(mask, mask_utils)})
    return rows


def coco_evaluate(truth: dict, results: list[dict]) -> dict:
    """box_{ap, ap50, ap75, ap_small, ap_medium, ar100} and mask_{...} (fractions in [0, 1]) of ``results``
    (rows with "bbox" and "segmentation") against ``truth`` (coco_ground_truth). No detections: all 0."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    metrics = {}
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress and tables
        gt = COCO()
        gt.dataset = truth
        gt.createIndex()
        for prefix, kind, key in (("box", "bbox", "bbox"), ("mask", "segm", "segmentation")):
            if not results:
                metrics.update({f"{prefix}_{name}": 0.0 for name in STATS})
                continue
            found = gt.loadRes([{k: v for k, v in row.items() if k in ("image_id", "category_id", "score", key)}
                                for row in results])
            evaluation = COCOeval(gt, found, iouType=kind)
            evaluation.params.imgIds = [image["id"] for image in truth["images"]]
            evaluation.evaluate()
            evaluation.accumulate()
            evaluation.summarize()
            # -1 means "no ground truth in that area range": report it as 0 (a JSON-friendly number)
            metrics.update({f"{prefix}_{name}": max(0.0, float(evaluation.stats[i])) for name, i in STATS.items()})
    return metrics


def _encode(mask: np.ndarray, mask_utils) -> dict:
    """RLE of a boolean (H, W) mask, with its counts as str so the dict is JSON-serialisable."""
    rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    rle["counts"] = rle["counts"].decode("ascii")
    return rle
