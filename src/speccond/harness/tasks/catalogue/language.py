"""The language experiment (speccond.data.language): masked-language-model pre-training (mlm) and four GLUE
tasks (glue-sst2, glue-cola, glue-mrpc, glue-rte), all read by the same small BERT (models/bert.py)."""
from __future__ import annotations

from speccond.data.language import SUBSETS
from speccond.harness.tasks.registry import Task

BERT = ["model=bert", "embed_dim=128", "depth=2", "num_heads=2"]  # the language tasks' one model size


def mlm(full: bool) -> list[str]:
    """Masked-language-model pre-training of the language experiment's BERT (data/language.py): depth 2,
    width 128, 2 heads of 64, intermediate 512, 1.49M parameters (1.05M of them the 8,192 x 128 word
    embeddings); one step of batch 64 takes 0.9 s on one core. The same size fine-tunes on the glue-* tasks,
    so they can start from an mlm run (``--set init_from=runs/language-mlm/{method}/seed-0``).

    ``speccond compare --task mlm --preset full``: 3 epochs over the 13,789 training blocks (648 steps),
    all 680 held-out blocks. quick: 64 steps (4,096 blocks), the first 256 held-out blocks.
    """
    if full:
        return [*BERT, "batch_size=64", "epochs=3", "lr=1e-3", "weight_decay=0.01", "warmup_steps=100",
                "track_every=100"]
    return [*BERT, "batch_size=64", "train_size=4096", "epochs=1", "test_size=256", "lr=1e-3", "weight_decay=0.01",
            "warmup_steps=10", "track_every=32"]


def glue(full: bool) -> list[str]:
    """A GLUE task (glue-sst2, glue-cola, glue-mrpc, glue-rte) with the mlm preset's BERT, scored on GLUE's dev.

    ``speccond compare --task glue-rte --preset full``: every training example for 3 epochs (SST-2: 6,315
    steps of batch 32; CoLA 804; MRPC 345; RTE 234), the whole dev set. quick: 2,048 training examples for one
    epoch (64 steps), the whole dev set.
    """
    if full:
        return [*BERT, "batch_size=32", "epochs=3", "lr=2e-4", "weight_decay=0.01", "warmup_steps=100",
                "track_every=200"]
    return [*BERT, "batch_size=32", "train_size=2048", "epochs=1", "lr=2e-4", "weight_decay=0.01",
            "warmup_steps=6", "track_every=16"]


WITHDRAWN = ("glue-sentiment", "glue-fact", "glue-pairs", "glue-hyperbaton")  # their data is gone
NAMED = ()


def named(name: str) -> Task | None:
    """None for every name but a withdrawn task's, which is refused naming the tasks that replace them."""
    if name in WITHDRAWN:
        raise ValueError(f"task {name!r} was withdrawn with the archive it read; the language tasks are now GLUE's: "
                         f"{', '.join(f'glue-{n}' for n in SUBSETS)} (and mlm)")
    return None


def _note(name: str) -> str:
    task = SUBSETS[name].task
    return (f"GLUE {task.title}: {'two sentences' if task.pairs else 'one sentence'}, {' / '.join(task.classes)}; "
            f"scored on dev by {' and '.join(task.metrics)}")


TASKS = (
    Task("mlm", "language", "mlm", "MLM pre-training: the King James Bible and SST-2's training sentences, "
         "128-token blocks", presets=mlm, model="bert"),
    *(Task(f"glue-{name}", "language", "text", _note(name), subset=name, presets=glue, model="bert",
           metrics=SUBSETS[name].task.metrics) for name in SUBSETS),
)
