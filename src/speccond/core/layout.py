"""How the q, k, v blocks sit inside one stored projection weight.

Every layout is explicit. Two storage orientations exist:

- ``"out_in"``: (out_features, in_features), as nn.Linear stores W^T;
- ``"in_out"``: (in_features, out_features), as GPT-2's Conv1D stores W.

The q block has ``num_heads`` heads; the k and v blocks of a fused weight may have fewer,
``num_kv_heads`` (grouped-query attention; 1 is multi-query), all of the same head width dh. So a fused
"qkv" weight has out = (num_heads + 2 num_kv_heads) dh rows. Along the output axis they are arranged as

- ``"blocked"``: [q | k | v], each block its heads times dh wide, heads contiguous inside a block
  (timm ``qkv``, nn.MultiheadAttention ``in_proj_weight``, GPT-2 ``c_attn``, Phi-3 ``qkv_proj``,
  GPTBigCode and Falcon multi-query);
- ``"per_head"``: (H, len(roles), dh), the blocks of one head next to each other (GPT-NeoX, BLOOM,
  Falcon); needs as many k and v heads as q heads;
- ``"grouped"``: (G, H / G + 2, dh) for G = num_kv_heads groups: each group's H / G query heads, then its
  key head, then its value head (Falcon's new decoder architecture). With G = H it is "per_head".

The *logical* block of a role is always the (width, in) matrix W_role^T that maps the input to that
role's output features, heads in order. Corrections are defined on logical blocks.
"""
from __future__ import annotations

import numbers
import dataclasses
from dataclasses import dataclass
from typing import Literal, Mapping, Optional

import torch

Storage = Literal["out_in", "in_out"]
Arrangement = Literal["blocked", "per_head", "grouped"]
_VALID_ROLES = ("q", "k", "v")
_ARRANGEMENTS = ("blocked", "per_head", "grouped")


@dataclass(frozen=True)
class ProjectionLayout:
    """Layout of one projection parameter.

    Attributes:
        roles: block order along the output axis, e.g. "qkv" (fused), "q" (separate), "kv".
        num_heads: heads of the q block; of every block when ``num_kv_heads`` is None (1 for an unsplit
            projection). For a weight without q ("k", "v", "kv") it is the head count of its blocks.
        storage: "out_in" (nn.Linear) or "in_out" (Conv1D).
        arrangement: "blocked" ([q | k | v]), "per_head" ((H, len(roles), dh)) or "grouped"
            ((G, H / G + 2, dh), roles "qkv" only).
        num_kv_heads: heads of the k and v blocks of a fused weight that also holds q, when fewer than
            ``num_heads`` (grouped-query or multi-query attention); must divide ``num_heads``. None: as many
            as q.
    """

    roles: str = "qkv"
    num_heads: int = 1
    storage: Storage = "out_in"
    arrangement: Arrangement = "blocked"
    num_kv_heads: Optional[int] = None

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
        _check_count(self, "num_heads")
        if self.storage not in ("out_in", "in_out"):
            raise ValueError(f"ProjectionLayout.storage must be 'out_in' or 'in_out', got {self.storage!r}")
        if self.arrangement not in _ARRANGEMENTS:
            raise ValueError(f"ProjectionLayout.arrangement must be one of {_ARRANGEMENTS}, got {self.arrangement!r}")
        if self.num_kv_heads is not None:
            _check_count(self, "num_kv_heads")
            if "q" not in self.roles or self.roles == "q":
                raise ValueError(
                    f"ProjectionLayout.num_kv_heads applies to a fused weight holding q and k or v; roles "
                    f"{self.roles!r} have one head count: set num_heads to it and leave num_kv_heads None"
                )
            if self.num_heads % self.num_kv_heads:
                raise ValueError(
                    f"ProjectionLayout.num_kv_heads ({self.num_kv_heads}) must divide num_heads ({self.num_heads}): "
                    "each key/value head serves a whole group of query heads"
                )
            if self.num_kv_heads == self.num_heads:
                object.__setattr__(self, "num_kv_heads", None)  # one spelling for "as many as q"
        if self.arrangement == "per_head" and self.num_kv_heads is not None:
            raise ValueError(
                f"ProjectionLayout: arrangement='per_head' ((H, {len(self.roles)}, dh) rows) needs as many k/v "
                f"heads as q heads, got num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}; a weight "
                "laid out per key/value group (its q heads, then k, then v) is arrangement='grouped'"
            )
        if self.arrangement == "grouped" and self.roles != "qkv":
            raise ValueError(
                f"ProjectionLayout: arrangement='grouped' is defined for roles 'qkv' (each group's q heads, "
                f"then k, then v), got roles {self.roles!r}"
            )

    @property
    def fused(self) -> bool:
        return len(self.roles) > 1

    def heads(self, role: str) -> int:
        """Heads of the block of ``role``."""
        if role != "q" and self.num_kv_heads is not None:
            return self.num_kv_heads
        return self.num_heads

    @property
    def group_size(self) -> int:
        """Query heads per key/value head (1 unless grouped-query): q head h uses k/v head h // group_size."""
        return self.num_heads // (self.num_kv_heads or self.num_heads)

    def _head_units(self) -> int:
        """Rows of the whole weight, in head widths: the sum of every block's head count."""
        return sum(self.heads(role) for role in self.roles)

    def describe(self) -> str:
        """Short text for reports, e.g. "fused qkv, blocked, (out, in)" or "fused qkv, grouped, 8/2 heads"."""
        kind = f"fused {self.roles}, {self.arrangement}" if self.fused else f"separate {self.roles}"
        if self.num_kv_heads is not None:
            kind += f", {self.num_heads} q / {self.num_kv_heads} kv heads"
        return f"{kind}, ({self.storage.replace('_', ', ')})"

    def to_dict(self) -> dict:
        fields = {
            "roles": self.roles,
            "num_heads": self.num_heads,
            "storage": self.storage,
            "arrangement": self.arrangement,
        }
        if self.num_kv_heads is not None:
            fields["num_kv_heads"] = self.num_kv_heads
        return fields

    @classmethod
    def from_dict(cls, values: Mapping) -> "ProjectionLayout":
        """The layout :meth:`to_dict` describes; a key that is not a field is a ValueError naming the fields."""
        return cls(**known_fields(cls, values))

    def check_shape(self, shape: torch.Size, where: str) -> tuple[int, int]:
        """Validate a weight shape against this layout; return (out_features, in_features) in (out, in).

        Raises ValueError naming ``where`` and the numbers when the weight is not 2-D or the head counts do
        not divide its output dimension into blocks of one head width.
        """
        if len(shape) != 2:
            raise ValueError(
                f"{where}: expected a 2-D projection weight, got shape {tuple(shape)}; declare a layout only "
                "for 2-D (out, in) or (in, out) weights"
            )
        out_features, in_features = shape if self.storage == "out_in" else (shape[1], shape[0])
        units = self._head_units()
        if out_features % units:
            counts = " + ".join(f"{self.heads(role)} ({role})" for role in self.roles)
            raise ValueError(
                f"{where}: the output dimension {out_features} of weight shape {tuple(shape)} (storage "
                f"{self.storage}) is not {counts} = {units} heads of one width: {units} does not divide "
                f"{out_features}; check roles, num_heads, num_kv_heads and storage"
            )
        return out_features, in_features

    def head_dim(self, out_features: int) -> int:
        """The head width dh of a weight with ``out_features`` output features."""
        return out_features // self._head_units()

    def block_width(self, role: str, out_features: int) -> int:
        """Output features of the block of ``role``: its heads times dh."""
        return self.heads(role) * self.head_dim(out_features)

    def block_rows(self, role: str, out_features: int) -> torch.Tensor:
        """Output-axis indices of the logical block of ``role``, heads in order: shape (heads(role) * dh,)."""
        dh = self.head_dim(out_features)
        within = torch.arange(dh).unsqueeze(0)  # (1, dh)
        position = self.roles.index(role)
        if self.arrangement == "blocked":
            start = sum(self.block_width(r, out_features) for r in self.roles[:position])
            return torch.arange(start, start + self.block_width(role, out_features))
        if self.arrangement == "per_head":
            heads = torch.arange(self.num_heads).unsqueeze(1)  # (H, 1)
            return (heads * len(self.roles) * dh + position * dh + within).reshape(-1)  # (H * dh,)
        groups, group = self.num_kv_heads or self.num_heads, self.group_size
        stride = (group + 2) * dh  # rows of one group: its q heads, k, v
        if role == "q":
            heads = torch.arange(self.num_heads)  # (H,) query head h sits in group h // group
            starts = (heads // group) * stride + (heads % group) * dh  # (H,)
        else:
            starts = torch.arange(groups) * stride + (group + "kv".index(role)) * dh  # (G,)
        return (starts.unsqueeze(1) + within).reshape(-1)  # (heads * dh,)

    def head_rows(self, role: str, head: int, out_features: int) -> torch.Tensor:
        """Output-axis indices of one head of ``role``'s block: (dh,)."""
        dh = self.head_dim(out_features)
        return self.block_rows(role, out_features)[head * dh : (head + 1) * dh]

    def out_in(self, weight: torch.Tensor) -> torch.Tensor:
        """The weight as (out, in), a view."""
        return weight if self.storage == "out_in" else weight.t()

    def logical_block(self, weight: torch.Tensor, role: str) -> torch.Tensor:
        """W_role^T of shape (width, in), heads in order (a copy)."""
        w = self.out_in(weight)
        return w[self.block_rows(role, w.shape[0]).to(w.device)]


def _check_count(layout: "ProjectionLayout", name: str) -> None:
    """A positive int (a numpy integer is accepted and stored as int)."""
    value = getattr(layout, name)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"ProjectionLayout.{name} must be a positive int, got {value!r}")
    object.__setattr__(layout, name, int(value))


def known_fields(cls: type, values: Mapping) -> dict:
    """``values`` as keyword arguments of dataclass ``cls``, refused (ValueError) when a key is not a field."""
    if not isinstance(values, Mapping):
        raise TypeError(f"{cls.__name__}.from_dict expects a mapping, as to_dict writes, got {type(values).__name__}")
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ValueError(f"{cls.__name__}.from_dict: unknown field(s) {', '.join(map(repr, unknown))}; "
                         f"the fields are {', '.join(names)}")
    return dict(values)
