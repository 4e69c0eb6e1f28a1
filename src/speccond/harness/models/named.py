"""Building named models from config (never downloading weights), for the command line.

``timm:<name>`` builds ``timm.create_model(name, pretrained=False, **overrides)``; ``hf:<model_type>``
builds ``transformers.AutoModel.from_config(AutoConfig.for_model(model_type, **overrides))``.
Overrides are ``key=value`` strings parsed as Python literals when they look like one.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importing this file imports neither torch nor timm: they load where a model is built
    from torch import nn

    from speccond.harness.config.train_config import TrainConfig
    from speccond.harness.tasks.datasets import TaskShape


def build_named_model(name: str, overrides: dict) -> nn.Module:
    """A model from ``timm:<name>`` or ``hf:<model_type>``, randomly initialised, in eval mode."""
    family, sep, model_name = name.partition(":")
    if not sep or family not in ("timm", "hf"):
        raise ValueError(f"model names look like timm:vit_tiny_patch16_224 or hf:bert, got {name!r}")
    if family == "timm":
        import timm

        refuse_unknown(model_name, timm.list_models(), "timm model")
    else:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import CONFIG_MAPPING

        refuse_unknown(model_name, list(CONFIG_MAPPING.keys()), "hf model type")
    try:
        return _build(family, model_name, overrides)
    except (TypeError, ValueError, RuntimeError, AssertionError, AttributeError, IndexError, KeyError) as error:
        given = ", ".join(f"{key}={value!r}" for key, value in overrides.items()) or "no overrides"
        raise ValueError(f"{name} could not be built with {given} ({type(error).__name__}: {error}); "
                         "check the --set values") from None


def _build(family: str, model_name: str, overrides: dict) -> nn.Module:
    if family == "timm":
        import timm

        return timm.create_model(model_name, pretrained=False, **overrides).eval()
    from transformers import AutoConfig, AutoModel

    return AutoModel.from_config(AutoConfig.for_model(model_name, **overrides)).eval()


def refuse_unknown(name: str, known: list[str], kind: str) -> None:
    """ValueError naming the nearest known names (difflib) when ``name`` is not one of ``known``."""
    if name in known:
        return
    import difflib

    nearest = difflib.get_close_matches(name, known, n=5, cutoff=0.6)
    raise ValueError(f"unknown {kind} {name!r}; " + (f"nearest: {', '.join(nearest)}" if nearest else
                                                      f"{len(known)} are known, none close"))


def example_inputs(model: nn.Module, batch: int = 2, seed: int = 0) -> tuple:
    """A random input batch the model accepts: images for vision models, token ids for text models."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "vocab_size") and not hasattr(config, "image_size"):
        length = min(getattr(config, "max_position_embeddings", 128), 32)
        return (torch.randint(0, config.vocab_size, (batch, length), generator=generator),)
    if config is not None and hasattr(config, "image_size"):
        size = config.image_size
        channels = getattr(config, "num_channels", 3)
    else:
        cfg = getattr(model, "pretrained_cfg", {}) or {}
        channels, *size = cfg.get("input_size", (3, 224, 224))
        size = getattr(getattr(model, "patch_embed", None), "img_size", size)
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    return (torch.randn(batch, channels, height, width, generator=generator),)


def build_timm_model(config: "TrainConfig", shape: "TaskShape") -> nn.Module:
    """Any registered timm model, ``config.model`` = "timm:<name>", for the task's images:
    ``timm.create_model(name, pretrained=False, num_classes=, in_chans=, img_size=, **config.model_args)``,
    in train mode; img_size is left out for a model that does not take it (a ResNet). An unknown name is a
    ValueError naming the nearest registered ones. Seed torch before calling: this does not."""
    kwargs = config.model_kwargs()
    base = {"num_classes": shape.classes, "in_chans": shape.channels}
    try:
        return build_named_model(config.model, {**base, "img_size": shape.image_size, **kwargs}).train()
    except ValueError as error:
        if "img_size" in kwargs or "unexpected keyword argument 'img_size'" not in str(error):
            raise
    return build_named_model(config.model, {**base, **kwargs}).train()
