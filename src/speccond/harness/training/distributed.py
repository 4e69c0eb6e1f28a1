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

import atexit
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


def uses_cuda(device: str) -> bool:
    """Whether a run on ``device`` ("auto": CUDA when available, "cpu" or "cuda") trains on CUDA; ValueError
    for another name, or for "cuda" where torch sees no CUDA device."""
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for but torch sees no CUDA device; use device=cpu or auto")
    return device == "cuda" or (device == "auto" and torch.cuda.is_available())


@dataclass(frozen=True)
class Context:
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @classmethod
    def from_environment(cls, device: str = "auto") -> "Context":
        """This process's rank, world size and device; joins torchrun's process group when WORLD_SIZE > 1.

        ``device``: "auto" (CUDA when available), "cpu" or "cuda"; on CUDA each rank takes the GPU
        numbered by its LOCAL_RANK and the group uses NCCL, on CPU gloo."""
        use_cuda = uses_cuda(device)
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        chosen = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
        if use_cuda:
            torch.cuda.set_device(chosen)
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls(device=chosen)
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if use_cuda else "gloo")
            atexit.register(_leave_group)  # a group left to the interpreter's teardown can abort a rank at exit
        return cls(rank=dist.get_rank(), world=dist.get_world_size(), device=chosen)

    def wrap(self, model: nn.Module) -> nn.Module:
        """DistributedDataParallel around ``model`` when distributed; ``model`` itself otherwise."""
        if not self.distributed:
            return model
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)

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

    def gathered(self, value: object) -> list:
        """Every rank's ``value``, in rank order, on every rank (``[value]`` in one process): pickled Python
        objects, for small lists such as a shard's detections."""
        if not self.distributed:
            return [value]
        everyone = [None] * self.world
        dist.all_gather_object(everyone, value)
        return everyone

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()


def _leave_group() -> None:
    """Destroy the process group this process joined, before the interpreter tears down its threads (torch
    asks for it; without it a gloo rank has been seen to abort at exit, "terminate called without an active
    exception", after its work was done)."""
    if dist.is_initialized():
        dist.destroy_process_group()
