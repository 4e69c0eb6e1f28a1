"""The presets of ``speccond compare``: one config function per task (big_vision's shape).

Each function takes ``full`` (False: the quick preset, True: the full one) and returns TrainConfig
overrides (``key=value`` strings); ``--set`` overrides them in turn, so a task without a preset can
still be compared with ``--set`` alone. Its docstring gives the command and the run time measured on
this project's 2-core machine. The published runs were made with exactly these overrides
(their config.json and docs/results/*/results.json record the resulting configs).
"""
from __future__ import annotations

from typing import Callable

_BERT = ["model=bert", "embed_dim=128", "depth=2", "num_heads=2"]  # the language tasks' one model size
_NYSTROMFORMER = ["model=nystromformer", "embed_dim=64", "depth=2", "num_heads=2", "landmarks=64", "batch_size=32"]


def fashion_mnist(full: bool) -> list[str]:
    """Fashion-MNIST, a ViT of width 64 on 7 x 7 patches (16 tokens).

    quick (the main job, ``./run main``): one epoch over 51,200 training images (400 steps), 2,000 test
    images; 2 methods x 3 seeds took 531 s with one thread (as ./run main sets) while two other jobs ran.
    full (``speccond compare --preset full``): all 60,000 images for 3 epochs (1,407 steps), all 10,000
    test images; about 3 minutes per run on one core (an hour for 7 methods x 3 seeds).
    """
    if full:
        return ["embed_dim=64", "patch_size=7", "epochs=3", "warmup_steps=100", "track_every=100"]
    return ["embed_dim=64", "patch_size=7", "train_size=51200", "epochs=1", "test_size=2000", "warmup_steps=20",
            "track_every=50"]


def cifar10(full: bool) -> list[str]:
    """CIFAR-10, width 64 on 4 x 4 patches (64 tokens), 8,000 training and 2,000 held-out images (cifar10.py).

    ``speccond compare --task cifar10 --model vit --preset full``: 5 epochs (315 steps), about 3 minutes
    per ViT run on one core; Swin wants ``--set patch_size=8``. quick: one epoch, 1,000 test images.
    """
    if full:
        return ["embed_dim=64", "patch_size=4", "epochs=5", "warmup_steps=50", "track_every=50"]
    return ["embed_dim=64", "patch_size=4", "epochs=1", "test_size=1000", "warmup_steps=20", "track_every=20"]


def long_range_arena(full: bool, epochs: int = 5, track_every: int = 100) -> list[str]:
    """A Long Range Arena task with a 2-layer Nystromformer (64 landmarks), batch 32.

    ``speccond compare --task lra-listops --preset full``: 5 epochs. quick: 2,048 training and 500 test
    examples for one epoch (64 steps). Per task: lra-image is CIFAR-10 as 1,024 grey-level tokens,
    lra-pathfinder Pathfinder-32 as 1,024 pixel tokens, lra-listops ListOps at 100 to 256 tokens,
    lra-text MultiEmo reviews as 2,048 bytes (all 6,573 reviews for 5 epochs, 1,030 steps, a step about
    twice an lra-image step), lra-retrieval two 256-byte lines through one shared encoder (all 39,827
    pairs for 2 epochs, 2,490 steps, a step about 0.8 of an lra-image step).
    """
    if full:
        return [*_NYSTROMFORMER, f"epochs={epochs}", "warmup_steps=100", f"track_every={track_every}"]
    return [*_NYSTROMFORMER, "train_size=2048", "test_size=500", "epochs=1", "warmup_steps=10", "track_every=16"]


def mlm(full: bool) -> list[str]:
    """Masked-language-model pre-training of the language experiment's BERT (data/language.py): depth 2,
    width 128, 2 heads of 64, intermediate 512, 1.49M parameters (1.05M of them the 8,192 x 128 word
    embeddings); one step of batch 64 takes 0.9 s on one core. The same size fine-tunes on the glue-* tasks,
    so they can start from an mlm run (``--set init_from=runs/language-mlm/{method}/seed-0``).

    ``speccond compare --task mlm --preset full``: 3 epochs over the 21,039 blocks (987 steps, 8.1M tokens
    seen), all 931 held-out blocks, about 15 minutes per run on one core. quick: 64 steps (4,096 blocks),
    the first 256 held-out blocks, about a minute per run.
    """
    if full:
        return [*_BERT, "batch_size=64", "epochs=3", "lr=1e-3", "weight_decay=0.01", "warmup_steps=100",
                "track_every=100"]
    return [*_BERT, "batch_size=64", "train_size=4096", "epochs=1", "test_size=256", "lr=1e-3", "weight_decay=0.01",
            "warmup_steps=10", "track_every=32"]


def glue(full: bool) -> list[str]:
    """A GLUE-like fine-tuning task (glue-sentiment, glue-fact, glue-pairs, glue-hyperbaton) with the mlm
    preset's BERT; a step of batch 32 takes 0.13 s on one core at 64 tokens, 0.25 s at 128 (glue-fact).

    ``speccond compare --task glue-sentiment --preset full``: 16,384 training examples (a seeded subset)
    for 2 epochs (1,024 steps) and the whole test split, about 2 minutes per run (hyperbaton, sentiment,
    pairs) to 4 (fact) on one core; all training examples: ``--set train_size=0`` (2.6x the steps). quick:
    4,096 examples for one epoch (128 steps, 15 to 35 s) and the first 1,000 test examples.
    """
    if full:
        return [*_BERT, "batch_size=32", "train_size=16384", "epochs=2", "lr=2e-4", "weight_decay=0.01",
                "warmup_steps=100", "track_every=200"]
    return [*_BERT, "batch_size=32", "train_size=4096", "epochs=1", "test_size=1000", "lr=2e-4", "weight_decay=0.01",
            "warmup_steps=12", "track_every=64"]


def fashion_scenes(full: bool) -> list[str]:
    """Detection and instance segmentation: Mask R-CNN on a timm XCiT trunk (width 96, depth 4, 4 heads,
    patch 8, 96 px scenes, batch 8; ``--model vit-maskrcnn`` for the ViT trunk), AdamW lr 3e-4.

    Step times, measured over 25 steps, float32, one thread, while two other training jobs kept this
    2-core machine's load at 3.6 to 3.8: median 1.9 to 2.1 s per training step (baseline and lam = 10
    alike), fastest 1.3 s (about an idle core's speed); evaluation 0.13 s per scene.
    full (``speccond compare --task fashion-scenes --preset full``): 4,000 scenes for 1 epoch (500
    steps), all 1,500 test scenes, about 20 minutes per run on a busy core, 10 to 13 on an idle one.
    quick: 80 steps on 640 scenes, 100 test scenes, about 3 minutes per run on a busy core; the losses
    fall and AP leaves 0, too short to rank methods.
    """
    model = ["model=xcit-maskrcnn", "embed_dim=96", "patch_size=8", "batch_size=8", "lr=3e-4", "eval_batch_size=25"]
    if full:
        return [*model, "train_size=4000", "epochs=1", "val_size=0", "test_size=0", "warmup_steps=50"]
    return [*model, "train_size=640", "epochs=1", "val_size=0", "test_size=100", "warmup_steps=10"]


def digits(full: bool) -> list[str]:
    """scikit-learn's 8 x 8 digits: seconds per run, for tests and smoke checks."""
    epochs, warmup = (40, 50) if full else (15, 20)
    return ["embed_dim=32", "depth=2", "num_heads=2", "patch_size=2", f"epochs={epochs}", "batch_size=64",
            f"warmup_steps={warmup}"]


def image_folder(full: bool) -> list[str]:
    """Your images (imagefolder:DIR): the small-image recipe of the built-in tasks, with the model sized by
    --model / --set (a timm:<name> model by model_args). quick: 10 epochs, full: 100.

        speccond compare --task imagefolder:DIR --model timm:vit_small_patch16_224 --preset full
    """
    return [f"epochs={100 if full else 10}", "batch_size=64", f"warmup_steps={500 if full else 50}"]


def text_files(full: bool) -> list[str]:
    """Your texts (text:DIR?text=COLUMN&label=COLUMN): the glue-* tasks' BERT and fine-tuning recipe over all
    of the training split and all of the test split. quick: 1 epoch, full: 3.

        speccond compare --task "text:DIR?text=sentence&label=label" --model bert --preset full
    """
    return [*_BERT, "batch_size=32", f"epochs={3 if full else 1}", "lr=2e-4", "weight_decay=0.01",
            f"warmup_steps={100 if full else 12}"]


PRESETS: dict[str, Callable[[bool], list[str]]] = {
    "fashion-mnist": fashion_mnist,
    "cifar10": cifar10,
    "lra-image": long_range_arena,
    "lra-pathfinder": long_range_arena,
    "lra-listops": long_range_arena,
    "lra-text": long_range_arena,
    "lra-retrieval": lambda full: long_range_arena(full, epochs=2, track_every=200),
    "mlm": mlm,
    **{f"glue-{name}": glue for name in ("sentiment", "fact", "pairs", "hyperbaton")},
    "fashion-scenes": fashion_scenes,
    "digits": digits,
}
NAMES = ("quick", "full")


def preset(name: str, task: str) -> list[str]:
    """The TrainConfig overrides of preset ``name`` ("quick" or "full") for ``task``."""
    if task.startswith("imagefolder:"):
        return image_folder(name == "full")
    if task.startswith("text:"):
        return text_files(name == "full")
    if task not in PRESETS:
        raise ValueError(f"no presets for task {task!r}; tasks with presets: {', '.join(PRESETS)}")
    if name not in NAMES:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(NAMES)}")
    return PRESETS[task](name == "full")
