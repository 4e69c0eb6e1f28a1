"""The one optimiser recipe (harness/training/optimizer.py) and what each harness exempts from weight decay."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from speccond.harness.training.optimizer import adamw

timm = pytest.importorskip("timm")


def decayed(optimizer: torch.optim.AdamW, model: nn.Module) -> set[str]:
    ids = {id(p) for p in optimizer.param_groups[0]["params"]}
    assert optimizer.param_groups[0]["weight_decay"] > 0 and optimizer.param_groups[1]["weight_decay"] == 0
    return {name for name, p in model.named_parameters() if id(p) in ids}


def test_only_matrices_decay_and_names_are_read_exactly():
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, embed_dim=32,
                            depth=1, num_heads=2, num_classes=3)
    names = decayed(adamw(vit, 1e-3, 0.05, exempt_names=vit.no_weight_decay()), vit)
    assert "pos_embed" not in names and "cls_token" not in names and "blocks.0.attn.qkv.weight" in names
    assert not any(name.endswith("bias") or "norm" in name for name in names)


def test_a_pattern_is_expanded_only_when_given_as_a_pattern():
    """timm's XCiT exempts "pos_embed.*": read as a name (the classification harness, as its published
    runs were made) it exempts nothing; as a pattern (the detection harness) it exempts the projection."""
    xcit = timm.create_model("xcit_nano_12_p16_224", pretrained=False, img_size=32, depth=1, num_classes=3)
    projection = "pos_embed.token_projection.weight"
    assert "pos_embed.*" in xcit.no_weight_decay()
    assert projection in decayed(adamw(xcit, 1e-3, 0.05, exempt_names=xcit.no_weight_decay()), xcit)
    assert projection not in decayed(adamw(xcit, 1e-3, 0.05, exempt_patterns=xcit.no_weight_decay()), xcit)


def test_a_parametrized_weight_counts_by_its_plain_name():
    import speccond

    layer = nn.Sequential(nn.MultiheadAttention(8, 2))
    speccond.apply(layer, speccond.SpectralConfig(lam="auto"))
    names = decayed(adamw(layer, 1e-3, 0.05, exempt_names={"0.in_proj_weight"}), layer)
    assert "0.parametrizations.in_proj_weight.original" not in names and "0.out_proj.weight" in names
