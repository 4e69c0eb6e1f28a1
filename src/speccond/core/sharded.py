"""Weights sharded by FSDP2 (``torch.distributed.fsdp.fully_shard``): DTensor parameters.

Outside forward and backward FSDP2 keeps every parameter as a DTensor holding this rank's shard (inside
them it gathers plain tensors). speccond's buffers (C, the marker) are never sharded: each rank holds
all of C. Two helpers meet the two kinds where they touch:

- :func:`gathered`: a weight as one plain tensor, for what needs the whole matrix (an SVD, sigma_max,
  kappa, the diagnostics); a collective under FSDP2, so every rank must call it, as every rank calls
  ``describe``, ``refresh`` and ``remove`` of its model replica.
- :func:`shaped_like`: a plain tensor of the weight's shape laid out as the weight is (the same mesh and
  placements, each rank keeping its own part, no communication), so W + C and W - C stay DTensors.
- :func:`unsharded`: an attention module's parameters gathered in place (FSDP2's own unshard), for the
  head diagnostics, which read every tensor the module's forward reads (norms, biases, rotary tables).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch


def is_sharded(tensor: object) -> bool:
    """A DTensor (FSDP2's parameters between steps, tensor-parallel weights)."""
    if not isinstance(tensor, torch.Tensor) or type(tensor) in (torch.Tensor, torch.nn.Parameter):
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def gathered(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` whole, as a plain tensor (all-gathered when it is a DTensor)."""
    return tensor.full_tensor() if is_sharded(tensor) else tensor


def shaped_like(full: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``full`` (a plain tensor of ``weight``'s global shape) distributed as ``weight`` is, when it is a
    DTensor (each rank keeps its own part of ``full``: no communication); else ``full`` itself."""
    if not is_sharded(weight):
        return full
    from torch.distributed.tensor import distribute_tensor

    full = full.to(device=weight.device, dtype=weight.dtype)
    return distribute_tensor(full, weight.device_mesh, weight.placements, src_data_rank=None)


@contextmanager
def unsharded(model: torch.nn.Module, module: torch.nn.Module) -> Iterator[bool]:
    """Every FSDP2 module of ``model`` that contains ``module`` unsharded for the block (``unshard()``, then
    ``reshard()``): inside it, ``module``'s parameters are plain tensors, as in its forward. Yields whether
    anything was unsharded. A collective: every rank must enter it. Without FSDP2 it does nothing."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch without FSDP2
        yield False
        return
    owners = [m for m in model.modules() if isinstance(m, FSDPModule) and any(c is module for c in m.modules())]
    for owner in owners:
        owner.unshard()
    try:
        yield bool(owners)
    finally:
        for owner in reversed(owners):
            owner.reshard()
