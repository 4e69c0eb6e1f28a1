"""Attention at initialisation of the two detection trunks, lam = 0, 1, 10: why lam = 10 stalls a ViT but
not an XCiT.

    .venv/bin/python scripts/detection_attention_at_init.py     # seconds; needs `speccond data prepare fashion-scenes`

For every attention block of the trunk (built as `speccond compare --task fashion-scenes` builds it, seed 0)
it recomputes the softmax from the block's own (conditioned) qkv projection on 8 test scenes and prints
the mean entropy against log n (uniform attention) and the largest |logit|. XCiT's XCA attends over
channels with cosine logits times a learnt temperature (1 at initialisation, timm.models.xcit.XCA), so
its logits stay within [-1, 1] whatever lam is; a ViT's token logits grow like lam^2.
"""
from __future__ import annotations

import math

import timm.models.vision_transformer as vit
import timm.models.xcit as xcit
import torch
from torch.nn.functional import normalize

from speccond import data
from speccond.diagnostics.entropy import row_entropy
from speccond.harness import IMAGE_MEAN, IMAGE_STD, TrainConfig, model_for, preset


def attention_logits(module, tokens: torch.Tensor) -> torch.Tensor:
    """The pre-softmax logits of an XCA block (B, H, d, d) or a ViT Attention block (B, H, N, N)."""
    batch, count, width = tokens.shape
    q, k, _ = module.qkv(tokens).reshape(batch, count, 3, module.num_heads, width // module.num_heads).unbind(2)
    if isinstance(module, xcit.XCA):  # channels attend to channels: l2-normalised over the tokens
        q, k = (normalize(t.permute(0, 2, 3, 1), dim=-1) for t in (q, k))  # (B, H, d, N)
        return (q @ k.transpose(-2, -1)) * module.temperature
    q, k = q.transpose(1, 2), k.transpose(1, 2)  # (B, H, N, d)
    return (q @ k.transpose(-2, -1)) * module.scale


def main() -> None:
    scenes = torch.as_tensor(data.load("fashion-scenes")["test_images"][:8]).float() / 255  # (8, 1, 96, 96)
    for model_name in ("xcit-maskrcnn", "vit-maskrcnn"):
        for method, lam in (("baseline", 0.0), ("spectral", 1.0), ("spectral", 10.0)):
            base = TrainConfig().replaced(task="fashion-scenes").with_overrides(preset("full", "fashion-scenes"))
            model = model_for(base.replaced(model=model_name, method=method, lam=lam)).eval()
            found = []

            def record(module, inputs, _output):
                logits = attention_logits(module, inputs[0])
                p = logits.softmax(-1)
                found.append((float(row_entropy(p).mean()), math.log(p.shape[-1]), float(logits.abs().max())))

            for module in model.modules():
                if isinstance(module, (xcit.XCA, vit.Attention)):
                    module.register_forward_hook(record)
            with torch.no_grad():
                model.backbone((scenes - IMAGE_MEAN) / IMAGE_STD)  # as the detector's transform normalises
            entropy = sum(f[0] for f in found) / len(found)
            print(f"{model_name:14s} lam = {lam:<3g} entropy {entropy:.2f} nats of log n = {found[0][1]:.2f}, "
                  f"largest |logit| {max(f[2] for f in found):.3g} ({len(found)} blocks)")


if __name__ == "__main__":
    main()
