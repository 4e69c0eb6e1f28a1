"""BERT's attention entropy, the language experiment's model: at initialisation for lam = 0, 1, 10 and
lam = auto, and after MLM pre-training for every finished pre-training run given.

    .venv/bin/python scripts/bert_attention.py                                 # init only; needs `speccond data prepare language`
    .venv/bin/python scripts/bert_attention.py runs/language-mlm-full/*/seed-0  # and each pre-trained encoder

The model is the mlm full preset's (width 128, depth 2, 2 heads; seed 0), fed the first 8 held-out MLM
blocks (128 tokens, no padding, so uniform attention has entropy log 128 = 4.85 nats). Entropy is
speccond.diagnostics.attention_entropy (every layer and head, recomputed from the conditioned q and k);
qk-norm runs are skipped, because their q and k LayerNorms are hooks that diagnostic does not rebuild.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from speccond.diagnostics import attention_entropy
from speccond.harness import TrainConfig, latest_checkpoint, load_model, load_task, model_for, preset, read_run

AT_INIT = {"lam = 0 (baseline)": {"method": "baseline"}, "lam = 1": {"method": "spectral", "lam": 1.0},
           "lam = 10": {"method": "spectral", "lam": 10.0}, "lam = auto": {"method": "spectral", "lam": "auto"}}


def mean_entropy(model: torch.nn.Module, probe: torch.Tensor) -> tuple[float, float, float]:
    """(mean, lowest head, log n) of the attention entropy, nats, over every layer and head."""
    rows = attention_entropy(model, (probe,))
    return sum(r["entropy"] for r in rows) / len(rows), min(r["entropy"] for r in rows), rows[0]["log_n"]


def pretrained_model(folder: Path) -> torch.nn.Module | None:
    """The finished pre-training run's model at its last checkpoint (eval mode); None for qk-norm or unfinished."""
    record = read_run(folder)
    if record.status != "finished" or record.config.method.name == "qk-norm":
        return None
    return load_model(record.config, latest_checkpoint(folder))[0].eval()


def main(folders: list[str]) -> None:
    base = TrainConfig().replaced(task="mlm").with_overrides(preset("full", "mlm"))
    probe = load_task(base)["test_x"][:8]  # (8, 2, 128): token ids and prediction flags
    line = "entropy {:.2f} of {:.2f} nats (lowest head {:.2f})"
    for label, change in AT_INIT.items():
        mean, low, log_n = mean_entropy(model_for(base.replaced(**change)).eval(), probe)
        print(f"at initialisation, {label:18s} {line.format(mean, log_n, low)}")
    for folder in map(Path, folders):
        model = pretrained_model(folder)
        if model is None:
            print(f"{folder}: skipped (unfinished, or qk-norm)")
            continue
        mean, low, log_n = mean_entropy(model, probe)
        print(f"pre-trained, {folder.parent.name:24s} {line.format(mean, log_n, low)}")


if __name__ == "__main__":
    main(sys.argv[1:])
