"""Which process writes under torch.distributed: rank 0, as Lightning's and the Trainer's loggers do.

The monitor and the Tracker measure on every rank (a weight sharded by FSDP2 is gathered by a collective
that every rank must join) and write on this one only, so a file all ranks name gets each row once.
"""
from __future__ import annotations

import torch.distributed as dist


def writes_files() -> bool:
    """True on rank 0 of an initialised process group, and on a process outside any group."""
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
