"""One rank of the sharded-evaluation check (tests/test_sharded_evaluation.py runs it under torchrun, 2 processes,
gloo): a seeded tiny ViT evaluated by training_tasks.evaluate over 101 images (an odd count, so padding would
repeat one), a two-class one over the same images with MCC and F1, and over 37 masked-token blocks, once sharded over the ranks (each its rows, the sums all-reduced)
and once whole, on this rank alone; and the indices streaming.RankShard gives each rank. Rank r writes
rank{r}.json."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import timm
import torch
import torch.distributed as dist
from torch import nn

from speccond.harness.tasks import mlm
from speccond.harness.training.distributed import Context
from speccond.harness.training.streaming import RankShard
from speccond.harness.training.training_tasks import evaluate


class TokenModel(nn.Module):
    """(b, 2, L) ids and prediction flags -> (n, vocab) logits at the flagged tokens (mlm's reading)."""

    def __init__(self, vocab: int):
        super().__init__()
        self.embed, self.out = nn.Embedding(vocab, 16), nn.Linear(16, vocab)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        ids, flags = inputs[:, 0], inputs[:, 1].bool()  # (b, L) each
        return self.out(self.embed(ids)[flags])  # (n, vocab)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    out = parser.parse_args().out
    context = Context.from_environment("cpu")
    torch.manual_seed(0)
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=16, patch_size=8, embed_dim=32,
                            depth=1, num_heads=2, num_classes=3)
    generator = torch.Generator().manual_seed(1)
    images, labels = torch.randn(101, 3, 16, 16, generator=generator), torch.randint(0, 3, (101,), generator=generator)
    blocks = torch.randint(5, 50, (37, 12), generator=generator)  # (M, L)
    inputs, targets = mlm.mask_tokens(blocks, torch.Generator().manual_seed(mlm.EVAL_MASK_SEED), 50)
    two = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=16, patch_size=8, embed_dim=32,
                            depth=1, num_heads=2, num_classes=2)
    two_labels = torch.randint(0, 2, (101,), generator=generator)
    tokens = TokenModel(50)
    shard = list(RankShard(101, context))
    everyone = [None] * context.world
    dist.all_gather_object(everyone, shard)
    record = {
        "images": {"sharded": evaluate(vit, images, labels, 16, context), "whole": evaluate(vit, images, labels, 16)},
        "two-class": {"sharded": evaluate(two, images, two_labels, 16, context, two_class=True),
                      "whole": evaluate(two, images, two_labels, 16, two_class=True)},
        "tokens": {"sharded": evaluate(tokens, inputs, targets, 8, context), "whole": evaluate(tokens, inputs, targets, 8)},
        "shards": everyone,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{context.rank}.json").write_text(json.dumps(record))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
