"""The optional packages the harness imports where it uses them, and the command that installs each.

``speccond`` itself needs only torch; timm, transformers, matplotlib and the rest are imported by the file
that uses them. The command line checks what a command needs before it reads data or writes anything
(:func:`require`), and turns any other missing one into the same one-line error (:func:`missing_message`):

    speccond demo: error: needs timm, which is not installed; install it with: pip install -e ".[timm]"
"""
from __future__ import annotations

import importlib

# import name -> how to install it: the project's extras where one holds it (pyproject.toml), else the package
INSTALL = {
    "timm": 'pip install -e ".[timm]"',
    "torchvision": 'pip install -e ".[timm]"',
    "transformers": 'pip install -e ".[hf]"',
    "submitit": 'pip install -e ".[sweeps]"',
    "numpy": "pip install numpy",
    "matplotlib": "pip install matplotlib",
    "safetensors": "pip install safetensors",
    "tqdm": "pip install tqdm",
    "tokenizers": "pip install tokenizers",
    "PIL": "pip install pillow",
    "sklearn": "pip install scikit-learn",
    "pycocotools": "pip install pycocotools",
}

# the packages a model family of models/registry.py needs, by the kind of task it takes
FAMILY_NEEDS = {
    "image": ("timm",),
    "sequence": ("transformers",),  # the Nystromformer is transformers'
    "text": ("transformers",),
    "scenes": ("timm", "torchvision", "pycocotools"),  # Mask R-CNN is torchvision's; box and mask AP pycocotools'
}
REPORT_NEEDS = ("numpy", "matplotlib")  # the report's tables and comparison.png
RUN_NEEDS = ("numpy", "safetensors")  # a run's split indices and checkpoints


def missing_message(package: str) -> str:
    """The one line that says ``package`` is missing and how to install it."""
    install = INSTALL.get(package, f"pip install {package}")
    return f"needs {package}, which is not installed; install it with: {install}"


class MissingPackage(ValueError):
    """An optional package a command needs is not installed (the message names it and its install command)."""


def require(*packages: str) -> None:
    """Import each of ``packages``; MissingPackage (a ValueError) for the first that cannot be imported."""
    for package in packages:
        try:
            importlib.import_module(package)
        except ModuleNotFoundError as error:
            if (error.name or "").partition(".")[0] != package:
                raise  # the package is there but one of its own imports is missing: that one is named below
            raise MissingPackage(missing_message(package)) from None


def missing_package(error: ModuleNotFoundError) -> str | None:
    """The top-level package a ModuleNotFoundError names when it is one of the optional ones, else None (a
    module of speccond itself missing is a broken install, not a missing extra)."""
    name = (error.name or "").partition(".")[0]
    return name if name and name != "speccond" else None
