"""Data-parallel training under torchrun: one process per rank, the same global batch as one process.

    torchrun --nproc_per_node=2 -m speccond train --out runs/ddp --set method=spectral

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK and the rendezvous address; ``Context.from_environment``
joins the process group (gloo on CPU, NCCL when CUDA is available) or, without torchrun, returns a
single-process context. Every rank builds the same global batch (same seeded order and augmentation)
and trains on its slice ``batch[rank::world]``; :meth:`Context.local_loss` weights each rank's mean
loss by its share of the batch, so DistributedDataParallel's gradient average equals the gradient of
the global batch mean exactly (up to the order of floating-point sums), even for a short last batch.
Only rank 0 writes files.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class Context:
    rank: int = 0
    world: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @classmethod
    def from_environment(cls) -> "Context":
        """Join torchrun's process group when WORLD_SIZE > 1; a single-process context otherwise."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls()
        if not dist.is_initialized():
            backend = "nccl" if torch.cuda.is_available() else "gloo"
            dist.init_process_group(backend=backend)
        return cls(rank=dist.get_rank(), world=dist.get_world_size())

    def wrap(self, model: nn.Module) -> nn.Module:
        """DistributedDataParallel around ``model`` when distributed; ``model`` itself otherwise."""
        if not self.distributed:
            return model
        return nn.parallel.DistributedDataParallel(model)

    def shard(self, batch: torch.Tensor) -> torch.Tensor:
        """This rank's slice of a global batch: rows rank, rank + world, ..."""
        return batch[self.rank :: self.world]

    def local_loss(self, local_mean: torch.Tensor, local_count: int, global_count: int) -> torch.Tensor:
        """The loss whose DDP-averaged gradient is the gradient of the global batch mean."""
        return local_mean * (local_count * self.world / global_count)

    def global_mean(self, local_mean: torch.Tensor, local_count: int, global_count: int) -> float:
        """The global batch's mean loss, identical on every rank (for logging and divergence checks)."""
        if not self.distributed:
            return float(local_mean.detach())
        total = local_mean.detach() * local_count
        dist.all_reduce(total)
        return float(total) / global_count

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()
