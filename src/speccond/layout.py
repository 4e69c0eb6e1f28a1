"""How the q, k, v blocks sit inside one stored projection weight.

Every layout is explicit. Two storage orientations exist:

- ``"out_in"``: (out_features, in_features), as nn.Linear stores W^T;
- ``"in_out"``: (in_features, out_features), as GPT-2's Conv1D stores W.

Along the output axis, the rows of a fused weight are arranged either

- ``"blocked"``: [q | k | v], each block ``out // len(roles)`` wide, heads contiguous inside a block
  (timm ``qkv``, nn.MultiheadAttention ``in_proj_weight``, GPT-2 ``c_attn``); or
- ``"per_head"``: (H, len(roles), dh), the blocks of one head next to each other (some codebases).

The *logical* block of a role is always the (out_block, in) matrix W_role^T that maps the input to that
role's output features, heads in order. Corrections are defined on logical blocks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

Storage = Literal["out_in", "in_out"]
Arrangement = Literal["blocked", "per_head"]
_VALID_ROLES = ("q", "k", "v")


@dataclass(frozen=True)
class ProjectionLayout:
    """Layout of one projection parameter.

    Attributes:
        roles: block order along the output axis, e.g. "qkv" (fused), "q" (separate), "kv".
        num_heads: heads per block (1 for an unsplit projection).
        storage: "out_in" (nn.Linear) or "in_out" (Conv1D).
        arrangement: "blocked" ([q | k | v]) or "per_head" ((H, len(roles), dh)).
    """

    roles: str = "qkv"
    num_heads: int = 1
    storage: Storage = "out_in"
    arrangement: Arrangement = "blocked"

    def __post_init__(self) -> None:
        if isinstance(self.roles, (tuple, list)):
            object.__setattr__(self, "roles", "".join(self.roles))
        if not self.roles or any(r not in _VALID_ROLES for r in self.roles) or len(set(self.roles)) != len(
            self.roles
        ):
            raise ValueError(
                f"ProjectionLayout.roles must be distinct letters from 'qkv' in block order (e.g. 'qkv', 'q', "
                f"'kv'), got {self.roles!r}"
            )
        if isinstance(self.num_heads, bool) or not isinstance(self.num_heads, int) or self.num_heads < 1:
            raise ValueError(f"ProjectionLayout.num_heads must be a positive int, got {self.num_heads!r}")
        if self.storage not in ("out_in", "in_out"):
            raise ValueError(f"ProjectionLayout.storage must be 'out_in' or 'in_out', got {self.storage!r}")
        if self.arrangement not in ("blocked", "per_head"):
            raise ValueError(
                f"ProjectionLayout.arrangement must be 'blocked' or 'per_head', got {self.arrangement!r}"
            )

    @property
    def fused(self) -> bool:
        return len(self.roles) > 1

    def describe(self) -> str:
        """Short text for reports, e.g. "fused qkv, blocked, (out, in)"."""
        kind = f"fused {self.roles}, {self.arrangement}" if self.fused else f"separate {self.roles}"
        return f"{kind}, ({self.storage.replace('_', ', ')})"

    def to_dict(self) -> dict:
        return {
            "roles": self.roles,
            "num_heads": self.num_heads,
            "storage": self.storage,
            "arrangement": self.arrangement,
        }

    def check_shape(self, shape: torch.Size, where: str) -> tuple[int, int]:
        """Validate a weight shape against this layout; return the logical (out_block, in) size.

        Raises ValueError naming ``where`` when the weight is not 2-D or the block or head count does not
        divide its output dimension.
        """
        if len(shape) != 2:
            raise ValueError(
                f"{where}: expected a 2-D projection weight, got shape {tuple(shape)}; declare a layout only "
                "for 2-D (out, in) or (in, out) weights"
            )
        out_features, in_features = shape if self.storage == "out_in" else (shape[1], shape[0])
        blocks = len(self.roles)
        if out_features % blocks:
            raise ValueError(
                f"{where}: {blocks} blocks ({self.roles}) do not divide the output dimension {out_features} "
                f"of weight shape {tuple(shape)} (storage {self.storage}); check roles and storage"
            )
        block_out = out_features // blocks
        if block_out % self.num_heads:
            raise ValueError(
                f"{where}: {self.num_heads} heads do not divide the block width {block_out} "
                f"(weight shape {tuple(shape)}, roles {self.roles}); check num_heads"
            )
        return block_out, in_features

    def block_rows(self, role: str, out_features: int) -> torch.Tensor:
        """Output-axis indices of the logical block of ``role``, heads in order: shape (out_block,)."""
        blocks = len(self.roles)
        position = self.roles.index(role)
        block_out = out_features // blocks
        if self.arrangement == "blocked":
            return torch.arange(position * block_out, (position + 1) * block_out)
        head_dim = block_out // self.num_heads
        heads = torch.arange(self.num_heads).unsqueeze(1)  # (H, 1)
        within = torch.arange(head_dim).unsqueeze(0)  # (1, dh)
        return (heads * blocks * head_dim + position * head_dim + within).reshape(-1)  # (H * dh,)

    def out_in(self, weight: torch.Tensor) -> torch.Tensor:
        """The weight as (out, in), a view."""
        return weight if self.storage == "out_in" else weight.t()

    def logical_block(self, weight: torch.Tensor, role: str) -> torch.Tensor:
        """W_role^T of shape (out_block, in), heads in order (a copy)."""
        w = self.out_in(weight)
        return w[self.block_rows(role, w.shape[0]).to(w.device)]
