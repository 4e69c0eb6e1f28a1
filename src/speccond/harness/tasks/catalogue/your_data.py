"""Your own data, named by a path the user writes: images in torchvision's ImageFolder layout
(``imagefolder:DIR``, speccond.data.image_folder) and texts (``text:DIR?text=COLUMN&label=COLUMN``,
speccond.data.text_files; ``&mlm=1`` for masked-language modelling on them). No named tasks: ``named``
makes one from each such name."""
from __future__ import annotations

from typing import Optional

from speccond.data import image_folder, text_files
from speccond.harness.tasks.catalogue.language import BERT
from speccond.harness.tasks.registry import Task

TASKS = ()
NAMED = ("imagefolder:DIR (your images in torchvision's ImageFolder layout)",
         "text:DIR?text=COLUMN&label=COLUMN (your texts)")


def images(full: bool) -> list[str]:
    """Your images (imagefolder:DIR): the small-image recipe of the built-in tasks, with the model sized by
    --model / --set (a timm:<name> model by model_args). quick: 10 epochs, full: 100.

        speccond compare --task imagefolder:DIR --model timm:vit_small_patch16_224 --preset full
    """
    return [f"epochs={100 if full else 10}", "batch_size=64", f"warmup_steps={500 if full else 50}"]


def texts(full: bool) -> list[str]:
    """Your texts (text:DIR?text=COLUMN&label=COLUMN): the glue-* tasks' BERT and fine-tuning recipe over all
    of the training split and all of the test split. quick: 1 epoch, full: 3.

        speccond compare --task "text:DIR?text=sentence&label=label" --model bert --preset full
    """
    return [*BERT, "batch_size=32", f"epochs={3 if full else 1}", "lr=2e-4", "weight_decay=0.01",
            f"warmup_steps={100 if full else 12}"]


def named(name: str) -> Optional[Task]:
    """The task of your images or texts called ``name``; None for any other name. A malformed name or a folder
    that is not there is a one-line ValueError (image_folder.parse, text_files.parse)."""
    if image_folder.is_image_folder(name):
        image_folder.parse(name)
        return Task(name, name, "image", "your images, in torchvision's ImageFolder layout (stream=1: decoded from "
                    "disk as batches need them, harness/training/streaming.py)", presets=images)
    if text_files.is_text_files(name):
        source = text_files.parse(name)
        return Task(name, name, "mlm" if source.mlm else "text", "your texts: a saved datasets DatasetDict, or "
                    f"parquet / CSV files by split{', masked-language modelling' if source.mlm else ''} (stream=1: "
                    "token ids read from disk as batches need them, data/text_stream.py)", presets=texts, model="bert")
    return None
