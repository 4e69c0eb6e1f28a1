"""Every model family a run can name (``TrainConfig.model``), one line each: the inputs it takes and the
file that builds it. Adding a family is one file and one line here.

    FAMILIES["swin"]  # Family(kind="image", module="speccond.harness.models.swin")

What the file defines depends on its kind:

- ``image`` (a timm vision family): ``CLASS``, the timm class path, and ``timm_kwargs(family, image, dim,
  depth, heads, patch)``, the class's size arguments (refusing sizes it cannot take), optionally
  ``finish(model)``; models/timm_family.py checks what they share and builds them.
- any other kind: ``build(config, shape) -> nn.Module``, a plain model for the task's inputs, and
  optionally ``conditioned(model)``, the part whose attention the method acts on (all of it otherwise).

Modules are named by path, not imported, so reading this file (TrainConfig does, to check a name) loads
neither torch nor timm, and a task's own models (detection's) stay above the rooms that build them.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

KINDS = {  # TaskShape.kind -> how an error names such a task
    "image": "an image task", "sequence": "a token-sequence task (lra-...)",
    "text": "a language task (mlm, glue-...)", "scenes": "a detection task (fashion-scenes)",
}


_TIMM_SIZES = ("embed_dim", "depth", "num_heads", "patch_size", "drop_path")  # timm_family.build's


@dataclass(frozen=True)
class Family:
    kind: str  # the task inputs it takes, a key of KINDS
    module: str  # the file that builds it (see above)
    reads: tuple[str, ...] = _TIMM_SIZES  # the TrainConfig fields of SIZES its build reads


_HERE = "speccond.harness.models"
_DETECTION = ("embed_dim", "depth", "num_heads", "patch_size", "fpn_channels")
FAMILIES = {
    "vit": Family("image", f"{_HERE}.vit"),
    "deit": Family("image", f"{_HERE}.deit"),
    "swin": Family("image", f"{_HERE}.swin"),
    "xcit": Family("image", f"{_HERE}.xcit"),
    "davit": Family("image", f"{_HERE}.davit"),
    "xcit-noca": Family("image", f"{_HERE}.xcit_noca"),
    "cait": Family("image", f"{_HERE}.cait"),
    "nystromformer": Family("sequence", f"{_HERE}.sequence", ("embed_dim", "depth", "num_heads", "landmarks")),
    "bert": Family("text", f"{_HERE}.bert", ("embed_dim", "depth", "num_heads")),
    "xcit-maskrcnn": Family("scenes", "speccond.harness.tasks.detection.plugin", _DETECTION),
    "vit-maskrcnn": Family("scenes", "speccond.harness.tasks.detection.plugin", _DETECTION),
}
NAMED_READS = ("model_args",)  # what sizes a model given by name (timm:<name>, hf:<type>): its constructor's arguments
# The model fields one model reads and another does not; the others (attention_norm, init_from) every model reads.
SIZES = tuple(dict.fromkeys(field for family in FAMILIES.values() for field in (*family.reads, *NAMED_READS)))
MODELS = tuple(FAMILIES)  # what the model key (TrainConfig.model.name) accepts besides timm:<name> and hf:<type>
IMAGE_FAMILIES = tuple(name for name, family in FAMILIES.items() if family.kind == "image")


def ignores(model: str, field: str) -> str:
    """"" when model ``model`` (a family, or timm:<name> / hf:<type>) reads TrainConfig ``field``, else why not,
    naming who does."""
    if field not in SIZES:
        return ""
    reads = FAMILIES[model].reads if model in FAMILIES else NAMED_READS
    if field in reads:
        return ""
    if model not in FAMILIES:
        return f"model {model!r} is built from its name and sized by model_args alone, so it does not read {field}"
    readers = [name for name, family in FAMILIES.items() if field in family.reads]
    return f"model {model!r} does not read {field} ({', '.join(readers) or 'timm:<name> and hf:<type> models'} read it)"


def families_of(kind: str) -> tuple[str, ...]:
    """The registered families that take a task of ``kind``, in registration order."""
    return tuple(name for name, family in FAMILIES.items() if family.kind == kind)


def family_module(name: str) -> ModuleType:
    """The module that builds family ``name``; ValueError naming the families for an unknown one."""
    if name not in FAMILIES:
        raise ValueError(f"unknown model family {name!r}; known families: {MODELS}")
    return importlib.import_module(FAMILIES[name].module)
