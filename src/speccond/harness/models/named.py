"""Building named models from config (never downloading weights), for the command line.

``timm:<name>`` builds ``timm.create_model(name, pretrained=False, **overrides)``; ``hf:<model_type>``
builds ``transformers.AutoModel.from_config(AutoConfig.for_model(model_type, **overrides))``; ``hf:<folder>``
(a path: it holds a ``/`` or starts with ``.`` or ``~``) loads the transformers checkpoint that
``save_pretrained`` wrote there, from that folder only. Overrides are ``key=value`` strings parsed as
Python literals when they look like one. :func:`check_model` checks any run's model name, and that the
packages it needs are installed, before a command reads data or writes anything.
"""
from __future__ import annotations

import os
from pathlib import Path
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
    check_model(name)
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

    if is_checkpoint_folder(model_name):
        return AutoModel.from_pretrained(model_name, local_files_only=True, **overrides).eval()
    return AutoModel.from_config(AutoConfig.for_model(model_name, **overrides)).eval()


def check_model(model: str) -> None:
    """Before a command reads data or writes anything: the packages that build ``model`` (a TrainConfig.model
    or an inspect name) are installed (harness/packages.py: MissingPackage names the install command), a
    timm:<name> is a registered timm model, an hf:<type> a transformers model type (an unknown one names the
    nearest few) and an hf:<folder> a checkpoint folder (:func:`checkpoint_folder`)."""
    from speccond.harness.models.registry import FAMILIES
    from speccond.harness.packages import FAMILY_NEEDS, require

    if model.startswith("timm:"):
        require("timm")
        import timm

        refuse_unknown(model[len("timm:"):], timm.list_models(), "timm model")
    elif model.startswith("hf:"):
        require("transformers")
        name = model[len("hf:"):]
        if is_checkpoint_folder(name):
            checkpoint_folder(name)
            return
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import CONFIG_MAPPING

        refuse_unknown(name, list(CONFIG_MAPPING.keys()), "transformers model type")
    elif model in FAMILIES:
        require(*FAMILY_NEEDS[FAMILIES[model].kind])


# The weights files transformers' save_pretrained writes (one file, or an index of shards)
HF_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def is_checkpoint_folder(name: str) -> bool:
    """hf:<name> names a local folder, not a model type, when it holds a path separator or starts with "." or
    "~" (model types hold neither): ``hf:./my-bert``, ``hf:runs/exported``, ``hf:/data/bert``."""
    return "/" in name or os.sep in name or name.startswith((".", "~"))


def checkpoint_folder(name: str) -> Path:
    """The folder of ``hf:<name>``; ValueError unless it holds a transformers checkpoint (config.json and the
    weights save_pretrained writes). The harness reads it only there: a Hub id is not downloaded."""
    path = Path(name).expanduser()
    if not path.is_dir():
        raise ValueError(f"hf:{name} is not a folder; hf:<folder> takes a local transformers checkpoint (what "
                         "model.save_pretrained(folder) writes; nothing is downloaded), hf:<type> a model type such as bert")
    if not (path / "config.json").is_file():
        raise ValueError(f"hf:{name} holds no config.json, so it is not a transformers checkpoint folder; give the "
                         "folder model.save_pretrained(folder) wrote")
    if not any((path / weights).is_file() for weights in HF_WEIGHTS):
        raise ValueError(f"hf:{name} holds config.json but no weights ({', '.join(HF_WEIGHTS)}); give the folder "
                         "model.save_pretrained(folder) wrote")
    return path


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
    """Any registered timm model, ``config.model.name`` = "timm:<name>", for the task's images:
    ``timm.create_model(name, pretrained=False, num_classes=, in_chans=, img_size=, **config.model.model_args)``,
    in train mode; img_size is left out for a model that does not take it (a ResNet). An unknown name is a
    ValueError naming the nearest registered ones. Seed torch before calling: this does not."""
    kwargs = config.model.model_kwargs()
    base = {"num_classes": shape.classes, "in_chans": shape.channels}
    try:
        return build_named_model(config.model.name, {**base, "img_size": shape.image_size, **kwargs}).train()
    except ValueError as error:
        if "img_size" in kwargs or "unexpected keyword argument 'img_size'" not in str(error):
            raise
    return build_named_model(config.model.name, {**base, **kwargs}).train()
