"""Tiny real models for the tests, each with the inputs it takes and how to read q/k/v weights.

Every case builds a real model (timm, torch.nn, or a hand-written attention with a declared layout),
never a mock. ``effective_blocks`` returns, per conditioned parameter, the logical q/k/v blocks so tests
can compare W_eff - W with the correction they expect.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

import speccond


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[], tuple]
    # Qualified parameter names to be conditioned and their layouts.
    params: dict[str, speccond.ProjectionLayout]
    config: dict = field(default_factory=dict)  # extra SpectralConfig fields (declared layouts)
    activation_ok: bool = True


def timm_vit() -> nn.Module:
    import timm

    return timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4,
        num_classes=5,
    )


def timm_deit() -> nn.Module:
    import timm

    return timm.create_model(
        "deit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, embed_dim=48, depth=2, num_heads=3,
        num_classes=5,
    )


def transformer_encoder() -> nn.Module:
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)


class CrossAttention(nn.Module):
    """nn.MultiheadAttention with kdim/vdim != embed_dim: separate q/k/v weights."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(24, 3, kdim=16, vdim=20, batch_first=True)

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.attn(x, k, v, need_weights=False)[0]


class InterleavedAttention(nn.Module):
    """A user's attention whose fused projection is laid out per head: rows (H, 3, dh)."""

    def __init__(self, dim: int = 24, heads: int = 3) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.to_qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        qkv = self.to_qkv(x).reshape(b, n, self.heads, 3, self.head_dim)  # (B, N, H, 3, dh)
        q, k, v = qkv.permute(3, 0, 2, 1, 4)  # each (B, H, N, dh)
        attn = (q @ k.transpose(-2, -1) / self.head_dim**0.5).softmax(-1)  # (B, H, N, N)
        return self.out((attn @ v).transpose(1, 2).reshape(b, n, -1))  # (B, N, D)


class Conv1DAttention(nn.Module):
    """A GPT-2 style block: fused q, k, v in a transformers Conv1D stored (in, out)."""

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        from transformers.pytorch_utils import Conv1D

        self.heads, self.head_dim = heads, dim // heads
        self.c_attn = Conv1D(3 * dim, dim)  # weight (dim, 3 dim)
        self.c_proj = Conv1D(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=-1)  # each (B, N, D)
        split = lambda t: t.reshape(b, n, self.heads, self.head_dim).transpose(1, 2)  # noqa: E731  (B, H, N, dh)
        out = F.scaled_dot_product_attention(split(q), split(k), split(v))  # (B, H, N, dh)
        return self.c_proj(out.transpose(1, 2).reshape(b, n, d))


def _images() -> tuple:
    return (torch.randn(2, 3, 32, 32),)


def _tokens(dim: int) -> Callable[[], tuple]:
    return lambda: (torch.randn(2, 7, dim),)


QKV = speccond.ProjectionLayout
CASES = [
    Case("timm-vit", timm_vit, _images, {f"blocks.{i}.attn.qkv.weight": QKV("qkv", 4) for i in range(2)}),
    Case("timm-deit", timm_deit, _images, {f"blocks.{i}.attn.qkv.weight": QKV("qkv", 3) for i in range(2)}),
    Case(
        "torch-transformer-encoder",
        transformer_encoder,
        _tokens(32),
        {f"layers.{i}.self_attn.in_proj_weight": QKV("qkv", 4) for i in range(2)},
        activation_ok=False,
    ),
    Case(
        "torch-mha-separate-qkv",
        CrossAttention,
        lambda: (torch.randn(2, 5, 24), torch.randn(2, 6, 16), torch.randn(2, 6, 20)),
        {f"attn.{r}_proj_weight": QKV(r, 3) for r in "qkv"},
        activation_ok=False,
    ),
    Case(
        "declared-per-head-interleaved",
        InterleavedAttention,
        _tokens(24),
        {"to_qkv.weight": QKV("qkv", 3, arrangement="per_head")},
        config={"layouts": {r"to_qkv\.weight$": QKV("qkv", 3, arrangement="per_head")}},
    ),
    Case(
        "declared-conv1d-in-out",
        Conv1DAttention,
        _tokens(16),
        {"c_attn.weight": QKV("qkv", 2, storage="in_out")},
        config={"layouts": {r"c_attn\.weight$": QKV("qkv", 2, storage="in_out")}},
    ),
]
CASE_IDS = [c.name for c in CASES]


def expected_identity(weight: torch.Tensor, layout: speccond.ProjectionLayout, lam: dict[str, float]) -> torch.Tensor:
    """C built by hand, stored orientation: lam_role * eye(width, in) placed at each role's rows."""
    w = layout.out_in(weight)
    out, inp = w.shape
    correction = torch.zeros(out, inp, dtype=weight.dtype)
    for role in layout.roles:
        rows = layout.block_rows(role, out)  # (width,): each block its own rectangular identity
        correction[rows] = lam[role] * torch.eye(rows.numel(), inp, dtype=weight.dtype)
    return layout.out_in(correction)


def plain_at(model: nn.Module, effective: dict[str, torch.Tensor]) -> nn.Module:
    """The reference: a plain copy of ``model`` whose named weights are set to the given W_eff by hand."""
    import copy

    reference = copy.deepcopy(model)
    with torch.no_grad():
        for name, value in effective.items():
            reference.get_parameter(name).copy_(value)
    return reference


def reference_at_w_plus_c(model: nn.Module, params: dict[str, speccond.ProjectionLayout], lam: dict[str, float]) -> nn.Module:
    """A plain copy of ``model`` with each listed weight set by hand to W + lam_role * I per block."""
    weights = {name: model.get_parameter(name).detach().clone() for name in params}
    return plain_at(model, {n: w + expected_identity(w, params[n], lam) for n, w in weights.items()})


def build_case(case, seed: int = 0) -> nn.Module:
    """A case's model (any case with ``build()``: this file's or adapter_models'), seeded, in eval mode."""
    torch.manual_seed(seed)
    return case.build().eval()


def case_inputs(case) -> tuple:
    """A case's inputs, drawn with a fixed seed."""
    torch.manual_seed(1)
    return case.inputs()
