"""One rank of the FSDP2 / DDP check (tests/test_distributed.py runs it under torchrun, 2 processes, gloo).

For each case (backend, correction, wrapper, and whether speccond.apply comes before or after sharding)
rank r trains its copy on half of each global batch, and every rank also trains a single-process
reference on the whole batch. It then writes, per case, the largest differences between the two of:
the logits after training; describe()'s kappa of W and W + C; refresh(); projection_spectra; and
remove(merge=True)'s merged weights (gathered) and logits. Refusals are written as the message.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import warnings

import timm
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

import speccond
from speccond.core.sharded import gathered
from speccond.diagnostics import attention_entropy, projection_spectra

CORRECTIONS = {"identity": dict(lam=10.0), "svd": dict(correction="svd"), "auto": dict(lam="auto")}
STEPS, BATCH = 3, 8


def vit() -> nn.Module:
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=16, patch_size=8, embed_dim=32,
                             depth=2, num_heads=2, num_classes=3)


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, 3, 16, 16, generator=g), torch.randint(0, 3, (BATCH,), generator=g)) for _ in range(STEPS)]


def train(model: nn.Module, data, rank: int | None) -> None:
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    for images, labels in data:
        if rank is not None:  # this rank's half of the global batch; gradients are averaged over ranks
            images, labels = images.chunk(2)[rank], labels.chunk(2)[rank]
        nn.functional.cross_entropy(model(images), labels).backward()
        optimiser.step()
        optimiser.zero_grad()


def shard(model: nn.Module, wrapper: str) -> nn.Module:
    if wrapper == "ddp":
        return DistributedDataParallel(model)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    return model


def plain_module(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, DistributedDataParallel) else model


def kappas(model: nn.Module) -> list[float]:
    return [v for row in speccond.describe(plain_module(model)).rows for v in (row.kappa_w, row.kappa_eff)]


def spectra(model: nn.Module) -> list[float]:
    return [row["kappa"] for row in projection_spectra(plain_module(model)).rows]


def entropies(model: nn.Module, images: torch.Tensor) -> list[float]:
    return [row["entropy"] for row in attention_entropy(plain_module(model), (images,)).rows]


def logits(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(images)


def largest(a, b) -> float:
    """The largest relative difference |x - y| / max(|x|, 1) over matching entries of a and b."""
    out = 0.0
    for x, y in zip(a, b):
        x, y = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)
        out = max(out, float(((x - y).abs() / x.abs().clamp(min=1)).max()))
    return out


def run_case(backend: str, correction: str, wrapper: str, order: str, rank: int) -> dict:
    config = speccond.SpectralConfig(backend=backend, **CORRECTIONS[correction])
    data, probe = batches(), torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    reference = vit()
    speccond.apply(reference, config)
    distributed = copy.deepcopy(vit()) if order == "after" else copy.deepcopy(reference)
    try:
        if order == "after":
            distributed = shard(distributed, wrapper)
            speccond.apply(plain_module(distributed), config)
        else:
            distributed = shard(distributed, wrapper)
    except ValueError as error:
        return {"refused": str(error)}
    train(reference, data, None)
    train(distributed, data, rank)
    out = {"logits": largest(logits(reference, probe), logits(distributed, probe))}
    out["kappa"] = largest(kappas(reference), kappas(distributed))
    out["spectra"] = largest(spectra(reference), spectra(distributed))
    out["entropy"] = largest(entropies(reference, probe), entropies(distributed, probe))
    out["refreshed"] = [speccond.refresh(reference), speccond.refresh(plain_module(distributed))]
    out["after_refresh"] = largest(logits(reference, probe), logits(distributed, probe))
    try:
        speccond.remove(plain_module(distributed), merge=True)
    except ValueError as error:
        out["remove_refused"] = str(error)
        out["after_refused_remove"] = largest(logits(reference, probe), logits(distributed, probe))
        out["still_conditioned"] = speccond.is_conditioned(distributed)
        return out
    speccond.remove(reference, merge=True)
    merged_reference = reference.state_dict()
    merged = {k: gathered(v) for k, v in plain_module(distributed).state_dict().items()}
    out["keys_equal"] = sorted(merged_reference) == sorted(merged)
    out["merged"] = largest([merged_reference[k] for k in sorted(merged)], [merged[k] for k in sorted(merged)])
    out["after_remove"] = largest(logits(reference, probe), logits(distributed, probe))
    out["plain"] = not speccond.is_conditioned(distributed)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--cases", nargs="+", required=True, help="backend:correction:wrapper:order")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")  # the collapse warning of lam = 10
    results = {case: run_case(*case.split(":"), rank) for case in args.cases}
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as handle:
        json.dump(results, handle, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
