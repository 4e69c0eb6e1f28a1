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


@dataclass(frozen=True)
class Family:
    kind: str  # the task inputs it takes, a key of KINDS
    module: str  # the file that builds it (see above)


_HERE = "speccond.harness.models"
FAMILIES = {
    "vit": Family("image", f"{_HERE}.vit"),
    "deit": Family("image", f"{_HERE}.deit"),
    "swin": Family("image", f"{_HERE}.swin"),
    "xcit": Family("image", f"{_HERE}.xcit"),
    "davit": Family("image", f"{_HERE}.davit"),
    "xcit-noca": Family("image", f"{_HERE}.xcit_noca"),
    "cait": Family("image", f"{_HERE}.cait"),
    "nystromformer": Family("sequence", f"{_HERE}.sequence"),
    "bert": Family("text", f"{_HERE}.bert"),
    "xcit-maskrcnn": Family("scenes", "speccond.harness.tasks.detection.plugin"),
    "vit-maskrcnn": Family("scenes", "speccond.harness.tasks.detection.plugin"),
}
MODELS = tuple(FAMILIES)  # what the model key (TrainConfig.model.name) accepts besides timm:<name> and hf:<type>
IMAGE_FAMILIES = tuple(name for name, family in FAMILIES.items() if family.kind == "image")


def families_of(kind: str) -> tuple[str, ...]:
    """The registered families that take a task of ``kind``, in registration order."""
    return tuple(name for name, family in FAMILIES.items() if family.kind == kind)


def family_module(name: str) -> ModuleType:
    """The module that builds family ``name``; ValueError naming the families for an unknown one."""
    if name not in FAMILIES:
        raise ValueError(f"unknown model family {name!r}; known families: {MODELS}")
    return importlib.import_module(FAMILIES[name].module)
