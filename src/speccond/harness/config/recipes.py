"""The paper's experiments as config functions (big_vision's shape): ``speccond compare --recipe NAME``.

Each function takes ``smoke`` and returns TrainConfig overrides; ``--task``, ``--model`` and ``--set``
override them in turn, as for the presets (presets.py). ``smoke=True`` keeps every part of the recipe (its
optimiser, schedule, augmentation, mixing, weight average, accumulation) and shrinks the model and the run
to seconds on a CPU, on data of the same format (tests/test_recipes.py trains each so). The docstring of
each gives its full-scale command, for one node of 8 GPUs, and its expected run time; ``--dry-run`` builds
the model, the data pipeline and the optimiser of that command and trains nothing.

The ImageNet recipes read ImageNet in torchvision's ImageFolder layout, streamed from disk
(``--task "imagefolder:DIR?size=224&stream=1" --set num_workers=8``, data/image_folder.py and
harness/training/streaming.py): ImageNet's 1.28M images do not fit in memory, and every part of the recipe
runs on a streamed folder (under torchrun its mixing is each rank's own rows, as in DeiT's main.py). Their
batch sizes are global: 1,024 over 8 GPUs is 128 per GPU.

The values are each recipe's published one where we could read it in the authors' code: DeiT's ``main.py``
defaults for the DeiT recipe, Swin's ``config.py`` and ``configs/swin/swin_base_patch4_window7_224.yaml``
(microsoft/Swin-Transformer), XCiT's ``main.py`` defaults (facebookresearch/xcit), each lr scaled as those
scripts scale it (base lr x global batch / 512). Those marked "to our reading" come from a paper's text, not
its code, and should be checked before a published run. Two differences from the authors' code, everywhere:
the schedule is timm's cosine, per step, from lr 0 to 0 (recipe.Schedule), where DeiT and XCiT warm up from
1e-6 and end at 1e-5 (Swin: 5e-7 and 5e-6); and there is no repeated augmentation (DeiT's and XCiT's
RASampler, on by default there), so each epoch shows every image once.
"""
from __future__ import annotations

import math
from typing import Callable

IMAGENET_TRAIN = 1_281_167  # ImageNet-1k training images
IMAGE_RECIPE_TASK = "imagefolder"  # the task of an image recipe: the user's --task imagefolder:DIR?size=224


def _steps_per_epoch(examples: int, batch_size: int) -> int:
    return math.ceil(examples / batch_size)


def _deit_recipe(batch_size: int, lr: float, warmup_epochs: int, epochs: int) -> list[str]:
    """The DeiT recipe's parts (DeiT's main.py defaults): AdamW, weight decay 0.05, RandAugment
    rand-m9-mstd0.5-inc1, random erasing 0.25, mixup 0.8, cutmix 1.0, label smoothing 0.1, bfloat16."""
    warmup = warmup_epochs * _steps_per_epoch(IMAGENET_TRAIN, batch_size)
    return [f"batch_size={batch_size}", f"lr={lr:g}", "weight_decay=0.05", f"epochs={epochs}", f"warmup_steps={warmup}",
            "optimizer=timm:adamw", "scheduler=timm:cosine", "auto_augment=rand-m9-mstd0.5-inc1", "random_erasing=0.25",
            "mixup=0.8", "cutmix=1.0", "label_smoothing=0.1", "precision=bfloat16", "grad_clip=0",
            "eval_batch_size=256", "checkpoint_every=2000"]


def _smoke_image(model_args: str) -> list[str]:
    """A run of seconds: 2 epochs of batch 8 on the folder the test generates; the recipe's parts kept."""
    return [f"model_args={model_args}", "batch_size=8", "epochs=2", "warmup_steps=1", "precision=float32",
            "eval_batch_size=64", "checkpoint_every=4", "accumulate_steps=2"]


def deit_b_imagenet(smoke: bool) -> list[str]:
    """DeiT-B (timm's deit_base_patch16_224, 86.6M parameters) on ImageNet-1k with the DeiT recipe, 300
    epochs, global batch 1,024, lr 1e-3 (5e-4 x 1024 / 512), 5 warm-up epochs, drop path 0.1, and DeiT's
    weight average (ModelEmaV3, 0.99996) evaluated. Without a teacher (timm's deit_base_patch16_224 is the
    plain ViT-B/16 architecture); the paper: 81.6 -> 82.6 top-1.

        torchrun --standalone --nproc_per_node 8 -m speccond compare --recipe deit_b_imagenet \\
            --task "imagefolder:/data/imagenet?size=224&stream=1" --set num_workers=8 \\
            --methods baseline,spectral --seeds 1 --out runs/deit-b

    375,600 steps per method. Expected time (not measured here): the DeiT paper trained DeiT-B for 300
    epochs in 53 hours on one node of 8 V100s; on 8 H100s in bfloat16, about a day per method.
    """
    if smoke:
        return ["model=timm:deit_base_patch16_224", *_deit_recipe(8, 1e-3, 0, 2), "ema_decay=0.9",
                *_smoke_image("drop_path_rate=0.1,embed_dim=32,depth=1,num_heads=2,patch_size=8")]
    return ["model=timm:deit_base_patch16_224", "model_args=drop_path_rate=0.1", *_deit_recipe(1024, 1e-3, 5, 300),
            "ema_decay=0.99996"]


def vit_b_imagenet(smoke: bool) -> list[str]:
    """ViT-B/16 (timm's vit_base_patch16_224, 86.6M parameters) on ImageNet-1k with the DeiT recipe as for
    deit_b_imagenet, without the weight average; the paper: 80.7 -> 81.7 top-1.

        torchrun --standalone --nproc_per_node 8 -m speccond compare --recipe vit_b_imagenet \\
            --task "imagefolder:/data/imagenet?size=224&stream=1" --set num_workers=8 \\
            --methods baseline,spectral --seeds 1 --out runs/vit-b

    375,600 steps per method; as deit_b_imagenet, about a day per method on 8 H100s (an estimate, not
    measured here).
    """
    if smoke:
        return ["model=timm:vit_base_patch16_224", *_deit_recipe(8, 1e-3, 0, 2),
                *_smoke_image("drop_path_rate=0.1,embed_dim=32,depth=1,num_heads=2,patch_size=8")]
    return ["model=timm:vit_base_patch16_224", "model_args=drop_path_rate=0.1", *_deit_recipe(1024, 1e-3, 5, 300)]


def swin_b_imagenet(smoke: bool) -> list[str]:
    """Swin-B (timm's swin_base_patch4_window7_224, 87.8M parameters) on ImageNet-1k, 300 epochs: the DeiT
    recipe's augmentation (Swin's config.py has the same: RandAugment rand-m9-mstd0.5-inc1, random erasing
    0.25, mixup 0.8, cutmix 1.0, label smoothing 0.1) with Swin's optimiser settings from its code: global
    batch 1,024, lr 1e-3 (5e-4 x 1024 / 512), 20 warm-up epochs, weight decay 0.05, gradient clip 5, drop
    path 0.5 (the Swin-B config), no weight average; the paper: 83.4 -> 84.1 top-1.

        torchrun --standalone --nproc_per_node 8 -m speccond compare --recipe swin_b_imagenet \\
            --task "imagefolder:/data/imagenet?size=224&stream=1" --set num_workers=8 \\
            --methods baseline,spectral --seeds 1 --out runs/swin-b

    375,600 steps per method; about a day per method on 8 H100s, as deit_b_imagenet (an estimate, not
    measured here).
    """
    if smoke:
        return ["model=timm:swin_base_patch4_window7_224", *_deit_recipe(8, 1e-3, 0, 2), "grad_clip=5",
                *_smoke_image("drop_path_rate=0.5,embed_dim=16,depths=(1,1),num_heads=(1,2),window_size=4")]
    return ["model=timm:swin_base_patch4_window7_224", "model_args=drop_path_rate=0.5", *_deit_recipe(1024, 1e-3, 20, 300),
            "grad_clip=5"]


def xcit_m_imagenet(smoke: bool) -> list[str]:
    """XCiT-M24/16 (timm's xcit_medium_24_p16_224, 84.4M parameters) on ImageNet-1k, 400 epochs: the DeiT
    recipe with XCiT's main.py defaults (global batch 1,024 at lr 1e-3, 5e-4 x 1024 / 512; 5 warm-up
    epochs; no gradient clip; the weight average ModelEmaV3 0.99996, on by default there) and drop path 0.15
    for M24 (to our reading of the XCiT paper's Table B.1: main.py's default is 0.1 and its README sets
    it per model); the paper: 82.6 -> 83.5 top-1.

        torchrun --standalone --nproc_per_node 8 -m speccond compare --recipe xcit_m_imagenet \\
            --task "imagefolder:/data/imagenet?size=224&stream=1" --set num_workers=8 \\
            --methods baseline,spectral --seeds 1 --out runs/xcit-m

    500,800 steps per method; about a day and a third per method on 8 H100s (deit_b_imagenet's estimate
    for 400 epochs, not measured here).
    """
    if smoke:
        return ["model=timm:xcit_medium_24_p16_224", *_deit_recipe(8, 1e-3, 0, 2), "ema_decay=0.9",
                *_smoke_image("drop_path_rate=0.15,embed_dim=32,depth=1,num_heads=2,patch_size=8")]
    return ["model=timm:xcit_medium_24_p16_224", "model_args=drop_path_rate=0.15", *_deit_recipe(1024, 1e-3, 5, 400),
            "ema_decay=0.99996"]


def davit_b_imagenet(smoke: bool) -> list[str]:
    """DaViT-B (timm's davit_base, 88.0M parameters) on ImageNet-1k, 300 epochs: the DeiT recipe with DaViT's
    settings to our reading of the DaViT paper (global batch 1,024 at lr 1e-3, 20 warm-up epochs, drop path
    0.4); the paper: 84.3 -> 84.9 top-1.

        torchrun --standalone --nproc_per_node 8 -m speccond compare --recipe davit_b_imagenet \\
            --task "imagefolder:/data/imagenet?size=224&stream=1" --set num_workers=8 \\
            --methods baseline,spectral --seeds 1 --out runs/davit-b

    375,600 steps per method; about a day per method on 8 H100s, as deit_b_imagenet (an estimate, not
    measured here).
    """
    if smoke:
        return ["model=timm:davit_base", *_deit_recipe(8, 1e-3, 0, 2),
                *_smoke_image("drop_path_rate=0.4,embed_dims=(16,32),depths=(1,1),num_heads=(1,2),window_size=4")]
    return ["model=timm:davit_base", "model_args=drop_path_rate=0.4", *_deit_recipe(1024, 1e-3, 20, 300)]


def nystromformer_lra(smoke: bool) -> list[str]:
    """Nystromformer on a Long Range Arena task (``--task lra-listops-full``, the default: ListOps at LRA's
    settings, or lra-text, lra-retrieval, lra-image, lra-pathfinder; smoke: lra-listops): the harness's LRA model (2 layers, width 64, 2 heads, 64
    landmarks; harness/tasks/catalogue/long_range_arena.py) for 5 epochs at batch 32, AdamW lr 1e-3, bfloat16; the paper:
    ListOps 37.1 -> 37.8, Text 63.8 -> 64.8, Retrieval 79.8 -> 80.6, Image 39.9 -> 40.2, Pathfinder 72.9 -> 73.7
    (docs/THEORY.md, section 4).

        torchrun --standalone --nproc_per_node 8 -m speccond compare --recipe nystromformer_lra \\
            --task lra-listops-full --methods baseline,spectral --seeds 3 --out runs/lra-listops

    Each task takes minutes on one GPU (the model has 0.1M parameters); 8 GPUs are more than it needs
    (``--nproc_per_node 1`` does the same run; batch 32 leaves 4 examples per GPU on 8).
    """
    model = ["model=nystromformer", "embed_dim=64", "depth=2", "num_heads=2", "landmarks=64", "optimizer=timm:adamw",
             "scheduler=timm:cosine"]
    if smoke:
        return ["task=lra-listops", *model, "batch_size=16", "train_size=64", "test_size=32", "epochs=1", "warmup_steps=1",
                "accumulate_steps=2"]
    return ["task=lra-listops-full", *model, "batch_size=32", "epochs=5", "warmup_steps=100", "precision=bfloat16"]


def crammed_bert_mlm(smoke: bool) -> list[str]:
    """Crammed-BERT-style pre-training (Geiping and Goldstein's shape: 16 layers, width 768, 12 heads,
    intermediate 3,072) by masked-language modelling on the built-in ``mlm`` task, global batch 8,192 by
    accumulating 8 micro-batches of 1,024 (128 per GPU), AdamW lr 1e-3, weight decay 0.01, clip 0.5,
    bfloat16. The built-in corpus is small (13,789 blocks): a corpus of the paper's size is your own texts,
    ``--task "text:DIR?text=COLUMN&mlm=1"`` (parquet, CSV or a saved dataset; one ``[CLS] text [SEP]`` block of
    ``&width=`` tokens per row, data/text_files.py; tests/test_recipes.py runs the smoke size on a parquet file).

        torchrun --standalone --nproc_per_node 8 -m speccond compare --recipe crammed_bert_mlm \\
            --methods baseline,spectral --seeds 1 --out runs/crammed-mlm

    Then crammed_bert_glue from these runs. 100 epochs of the built-in corpus are 300 steps of 8,192 blocks;
    minutes per method on 8 H100s (not measured here).
    """
    model = ["task=mlm", "model=bert", "optimizer=timm:adamw", "scheduler=timm:cosine", "weight_decay=0.01",
             "grad_clip=0.5"]
    if smoke:
        return [*model, "embed_dim=32", "depth=1", "num_heads=2", "batch_size=16", "accumulate_steps=2",
                "train_size=64", "test_size=8", "epochs=1", "warmup_steps=1"]
    return [*model, "embed_dim=768", "depth=16", "num_heads=12", "batch_size=8192", "accumulate_steps=8",
            "lr=1e-3", "epochs=100", "warmup_steps=30", "precision=bfloat16", "checkpoint_every=50"]


def crammed_bert_glue(smoke: bool) -> list[str]:
    """Fine-tuning crammed_bert_mlm's encoders on a GLUE task (``--task glue-sst2``, the default, or
    glue-cola, glue-mrpc, glue-rte: GLUE's own train and dev, data/glue.py; or your own texts,
    ``--task "text:DIR?text=COLUMN&label=COLUMN"`` over parquet, CSV or a saved dataset), each method from
    its own pre-training run (``init_from=runs/crammed-mlm/{method}/seed-0``), batch 32, lr 1e-4, 5 epochs;
    the paper: GLUE average 78.6 -> 79.4.

        torchrun --standalone --nproc_per_node 8 -m speccond compare --recipe crammed_bert_glue \\
            --task glue-sst2 --methods baseline,spectral --seeds 3 --out runs/crammed-glue-sst2

    Minutes per run on one GPU (not measured here).
    """
    model = ["task=glue-sst2", "model=bert", "optimizer=timm:adamw", "scheduler=timm:cosine",
             "weight_decay=0.01", "lr=1e-4"]
    if smoke:
        return [*model, "embed_dim=32", "depth=1", "num_heads=2", "batch_size=16", "train_size=64", "test_size=32",
                "epochs=1", "warmup_steps=1"]
    return [*model, "embed_dim=768", "depth=16", "num_heads=12", "batch_size=32", "epochs=5", "warmup_steps=100",
            "precision=bfloat16", "init_from=runs/crammed-mlm/{method}/seed-0"]


RECIPES: dict[str, Callable[[bool], list[str]]] = {
    "deit_b_imagenet": deit_b_imagenet,
    "vit_b_imagenet": vit_b_imagenet,
    "swin_b_imagenet": swin_b_imagenet,
    "xcit_m_imagenet": xcit_m_imagenet,
    "davit_b_imagenet": davit_b_imagenet,
    "nystromformer_lra": nystromformer_lra,
    "crammed_bert_mlm": crammed_bert_mlm,
    "crammed_bert_glue": crammed_bert_glue,
}
IMAGE_RECIPES = tuple(name for name in RECIPES if name.endswith("_imagenet"))


def recipe(name: str, smoke: bool, task: str = "") -> list[str]:
    """The TrainConfig overrides of recipe ``name``; ``task`` is the --task given (an ImageNet recipe needs
    an image folder). ValueError naming the recipes, or the task to give."""
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; recipes: {', '.join(RECIPES)}")
    if name in IMAGE_RECIPES and not task.startswith(IMAGE_RECIPE_TASK + ":"):
        raise ValueError(f"recipe {name} trains on ImageNet in ImageFolder layout: give --task "
                         f"\"imagefolder:DIR?size=224\" (got {task or 'no --task'})")
    return RECIPES[name](smoke)
