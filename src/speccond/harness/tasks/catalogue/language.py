"""The language experiment (speccond.data.language): masked-language-model pre-training (mlm) and four
GLUE-like fine-tuning tasks (glue-*), all read by the same small BERT (models/bert.py)."""
from __future__ import annotations

from speccond.harness.tasks.registry import Task

BERT = ["model=bert", "embed_dim=128", "depth=2", "num_heads=2"]  # the language tasks' one model size


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
        return [*BERT, "batch_size=64", "epochs=3", "lr=1e-3", "weight_decay=0.01", "warmup_steps=100",
                "track_every=100"]
    return [*BERT, "batch_size=64", "train_size=4096", "epochs=1", "test_size=256", "lr=1e-3", "weight_decay=0.01",
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
        return [*BERT, "batch_size=32", "train_size=16384", "epochs=2", "lr=2e-4", "weight_decay=0.01",
                "warmup_steps=100", "track_every=200"]
    return [*BERT, "batch_size=32", "train_size=4096", "epochs=1", "test_size=1000", "lr=2e-4", "weight_decay=0.01",
            "warmup_steps=12", "track_every=64"]


_GLUE = {"sentiment": "like SST-2: MultiEmo English sentences, 4 sentiment classes",
         "fact": "like QNLI / MNLI: VitaminC claim vs Wikipedia evidence, true / false / neither",
         "pairs": "like MRPC / QQP: two adjacent film-dialogue lines, same speaker?",
         "hyperbaton": "like CoLA: an adjective phrase, acceptable or not (adjective order)"}
TASKS = (
    Task("mlm", "language", "mlm", "MLM pre-training: topical_chat and English Wikipedia, 128-token blocks",
         presets=mlm, model="bert"),
    *(Task(f"glue-{name}", "language", "text", note, subset=name, presets=glue, model="bert")
      for name, note in _GLUE.items()),
)
