"""The timm vision families of harness/models/ (a file each, over timm_family.py), table-driven over
FAMILIES x {28 px 1 channel, 32 px 3 channels} at the sizes the experiments use (embed_dim 64, depth 4,
4 heads, patch 4).

Each model must give finite logits (B, 10) in train and eval mode, give every parameter a finite
gradient (timm's test sweep), be a function of the seed, and take ``speccond.apply`` on every attention
module, found here by class name, independently of the adapters, with ``speccond.verify`` passing.
"""
from __future__ import annotations

import warnings
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import speccond
from speccond.harness.config.train_config import TrainConfig
from speccond.harness.models.registry import IMAGE_FAMILIES as FAMILIES
from speccond.harness.models.timm_family import backbone_spec, build_backbone

SIZES = {"28px-1ch": (28, 1), "32px-3ch": (32, 3)}
DIMS = dict(classes=10, embed_dim=64, depth=4, num_heads=4, patch_size=4)
BATCH = 4
CASES = [(family, size) for family in FAMILIES for size in SIZES]
IDS = [f"{family}-{size}" for family, size in CASES]

# The attention modules each family must have at DIMS, by class name: depth 4 means four attention
# layers, plus XCiT's and CaiT's two class-attention layers.
ATTENTION = {
    "vit": {"Attention": 4},
    "deit": {"Attention": 4},
    "swin": {"WindowAttention": 4},
    "xcit": {"XCA": 4, "ClassAttn": 2},
    "xcit-noca": {"XCA": 4},  # no class attention: no softmax over tokens anywhere
    "davit": {"WindowAttention": 2, "ChannelAttention": 2},
    "cait": {"TalkingHeadAttn": 4, "ClassAttn": 2},  # talking heads over the patches, then class attention
}
ATTENTION_CLASSES = {name for counts in ATTENTION.values() for name in counts}

# The configurations the module docstring documents (the parts that differ between 28 and 32 px).
SPEC = {
    ("swin", 28): dict(patch_size=2, depths=(2, 2), num_heads=(4, 8), window_size=7),
    ("swin", 32): dict(patch_size=2, depths=(2, 2), num_heads=(4, 8), window_size=8),
    ("xcit", 28): dict(img_size=32, patch_size=8, depth=4, cls_attn_layers=2),
    ("xcit", 32): dict(img_size=32, patch_size=8, depth=4, cls_attn_layers=2),
    ("xcit-noca", 28): dict(img_size=32, patch_size=8, depth=4, cls_attn_layers=0, global_pool="avg"),
    ("xcit-noca", 32): dict(img_size=32, patch_size=8, depth=4, cls_attn_layers=0, global_pool="avg"),
    ("davit", 28): dict(depths=(2,), embed_dims=(64,), num_heads=(4,), window_size=7),
    ("davit", 32): dict(depths=(1, 1), embed_dims=(64, 128), num_heads=(4, 8), window_size=4),
}


@pytest.fixture(autouse=True)
def _quiet():
    """XCiT's XCA normalisation is reported as a UserWarning on apply; that note is the adapters' concern."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


def _build(family: str, size: str, seed: int = 0) -> nn.Module:
    image, channels = SIZES[size]
    torch.manual_seed(seed)
    return build_backbone(family, image, channels, **DIMS)


def _images(size: str, batch: int = BATCH) -> torch.Tensor:
    image, channels = SIZES[size]
    return torch.randn(batch, channels, image, image, generator=torch.Generator().manual_seed(1))


def _attention_names(model: nn.Module) -> dict[str, str]:
    """Attention module path -> class name, found by class name only."""
    return {name: type(m).__name__ for name, m in model.named_modules() if type(m).__name__ in ATTENTION_CLASSES}


@pytest.mark.parametrize("family,size", CASES, ids=IDS)
def test_logits_in_train_and_eval(family, size):
    model, x = _build(family, size), _images(size)
    for train in (True, False):
        model.train(train)
        with torch.no_grad():
            logits = model(x)
        assert isinstance(logits, torch.Tensor), f"{family} returned {type(logits).__name__} in train={train}"
        assert logits.shape == (BATCH, DIMS["classes"])
        assert torch.isfinite(logits).all()


@pytest.mark.parametrize("family,size", CASES, ids=IDS)
def test_apply_conditions_every_attention_module_and_verifies(family, size):
    model, x = _build(family, size), _images(size)
    attention = _attention_names(model)
    assert Counter(attention.values()) == Counter(ATTENTION[family])

    report = speccond.apply(model, speccond.SpectralConfig(lam=10))

    conditioned = Counter()
    for row in report.rows:  # a row's module is the attention (fused qkv) or its q / k / v Linear (ClassAttn)
        owners = [n for n in attention if row.module == n or row.module.startswith(n + ".")]
        assert len(owners) == 1, f"{row.module}.{row.parameter} is not inside one attention module"
        conditioned[(owners[0], row.role)] += 1
        assert row.scale == 10.0
    assert conditioned == Counter({(name, role): 1 for name in attention for role in "qkv"})
    assert [(r.module, r.role) for r in speccond.describe(model).rows] == [(r.module, r.role) for r in report.rows]
    checked = speccond.verify(model, x)
    assert {v.attention for v in checked} == set(attention)


@pytest.mark.parametrize("family,size", CASES, ids=IDS)
def test_every_parameter_gets_a_finite_gradient(family, size):
    """timm's sweep: no parameter is left out of the graph; also once conditioned (the correction must not
    cut the stored weights off)."""
    model, x = _build(family, size).train(), _images(size)
    target = torch.arange(BATCH) % DIMS["classes"]
    for conditioned in (False, True):
        if conditioned:
            speccond.apply(model, speccond.SpectralConfig(lam=10))
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), target).backward()
        for name, param in model.named_parameters():
            if param.requires_grad:
                assert param.grad is not None, f"{family} conditioned={conditioned}: {name} has no gradient"
                assert torch.isfinite(param.grad).all(), f"{family} conditioned={conditioned}: {name} gradient"


@pytest.mark.parametrize("family,size", CASES, ids=IDS)
def test_the_seed_decides_the_model(family, size):
    x = _images(size)
    a, b, c = (_build(family, size, seed).eval() for seed in (3, 3, 4))
    with torch.no_grad():
        assert torch.equal(a(x), b(x))
        assert not torch.equal(a(x), c(x))


@pytest.mark.parametrize("family,size", CASES, ids=IDS)
def test_parameter_count_is_within_a_small_factor_of_the_vit(family, size):
    count = lambda model: sum(p.numel() for p in model.parameters())  # noqa: E731
    ratio = count(_build(family, size)) / count(_build("vit", size))
    assert 0.9 <= ratio <= 3.0


@pytest.mark.parametrize("family,image", list(SPEC), ids=[f"{f}-{i}" for f, i in SPEC])
def test_documented_configurations(family, image):
    channels = 1 if image == 28 else 3
    path, kwargs = backbone_spec(family, image, channels, **DIMS)
    assert {k: kwargs[k] for k in SPEC[(family, image)]} == SPEC[(family, image)]
    assert kwargs["drop_path_rate"] == 0.0 and kwargs["in_chans"] == channels


def test_vit_family_is_the_training_model():
    """The "vit" family is the model run_model.build_model builds (same class, arguments and seed)."""
    from speccond.harness.models.run_model import build_model
    from speccond.harness.tasks.datasets import task_shape

    config = TrainConfig().replaced(method="baseline", embed_dim=64, depth=4, num_heads=4, patch_size=4, seed=5)
    expected = build_model(config, task_shape("fashion-mnist")).state_dict()
    got = _build("vit", "28px-1ch", seed=5).state_dict()
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected)


@pytest.mark.parametrize(
    "family,image,changes,message",
    [
        ("resnet", 28, {}, f"known families: {FAMILIES}"),
        ("vit", 28, {"patch_size": 8}, "patch sizes that fit: [1, 2, 4, 7, 14, 28]"),
        ("deit", 32, {"num_heads": 3}, "num_heads (3) must divide embed_dim (64)"),
        ("swin", 28, {"patch_size": 7}, "patch sizes that fit: [2, 4, 14, 28]"),
        ("swin", 28, {"depth": 1}, "depth >= 2"),
        ("xcit", 28, {"embed_dim": 66, "num_heads": 2}, "embed_dim must be a multiple of 4"),
        ("davit", 30, {}, "image_size a multiple of 4"),
        ("davit", 32, {"depth": 3}, "depth must be even"),
    ],
)
def test_sizes_that_do_not_fit_say_what_fits(family, image, changes, message):
    with pytest.raises(ValueError) as error:
        build_backbone(family, image, 1, **{**DIMS, **changes})
    assert message in str(error.value)


def test_patch_sizes_each_family_maps():
    """XCiT and DaViT stems are fixed in timm: patch_size picks XCiT's 8 or 16 and DaViT ignores it."""
    assert backbone_spec("xcit", 32, 3, **{**DIMS, "patch_size": 2})[1]["patch_size"] == 8
    assert backbone_spec("xcit", 32, 3, **{**DIMS, "patch_size": 16})[1]["patch_size"] == 16
    assert backbone_spec("davit", 32, 3, **{**DIMS, "patch_size": 8}) == backbone_spec("davit", 32, 3, **DIMS)
    assert backbone_spec("swin", 32, 3, **{**DIMS, "patch_size": 8})[1]["window_size"] == 4


@pytest.mark.parametrize("family", FAMILIES)
def test_train_config_accepts_the_families_only(family):
    assert TrainConfig().replaced(model=family).model.name == family
    with pytest.raises(ValueError, match=r"TrainConfig.model must be one of \('vit', 'deit'"):
        TrainConfig().replaced(model="vit-b16")
