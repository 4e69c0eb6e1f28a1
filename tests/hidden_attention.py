"""Modules whose attention structure cannot find (the projection's name, 'mixer', tells nothing), and one that
is not attention although it takes a softmax: the cases of diagnostics/census.py, for the diagnostics' and the
monitor's tests."""
from __future__ import annotations

import torch
import torch.nn.functional as F


class SdpaMixer(torch.nn.Module):
    """Attention through F.scaled_dot_product_attention, q, k, v split from one Linear named 'mixer'."""

    def __init__(self, dim: int = 32, heads: int = 4):
        super().__init__()
        self.heads, self.mixer = heads, torch.nn.Linear(dim, 3 * dim)

    def forward(self, x):  # x (B, N, D)
        batch, tokens, dim = x.shape
        q, k, v = (t.reshape(batch, tokens, self.heads, -1).transpose(1, 2) for t in self.mixer(x).chunk(3, -1))
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, tokens, dim)


class SoftmaxMixer(SdpaMixer):
    """The same attention written out by hand: (B, H, N, N) scores through a softmax."""

    def forward(self, x):  # x (B, N, D)
        batch, tokens, dim = x.shape
        q, k, v = (t.reshape(batch, tokens, self.heads, -1).transpose(1, 2) for t in self.mixer(x).chunk(3, -1))
        weights = torch.softmax(q @ k.transpose(-1, -2), dim=-1)  # (B, H, N, N)
        return (weights @ v).transpose(1, 2).reshape(batch, tokens, dim)


class Router(torch.nn.Module):
    """Not attention: a softmax over (B, N, experts), as a mixture-of-experts router takes."""

    def __init__(self, dim: int = 192, experts: int = 4):
        super().__init__()
        self.gate, self.experts = torch.nn.Linear(dim, experts), torch.nn.Linear(dim, dim * experts)

    def forward(self, x):  # x (B, N, D)
        weights = self.gate(x).softmax(-1)  # (B, N, E)
        outputs = self.experts(x).reshape(*x.shape[:2], -1, x.shape[-1])  # (B, N, E, D)
        return (weights.unsqueeze(-1) * outputs).sum(2)


class Pooled(torch.nn.Module):
    """A timm ViT whose tokens then pass through ``pool``: structure finds the ViT's layers, not ``pool``'s."""

    def __init__(self, vit: torch.nn.Module, pool: torch.nn.Module):
        super().__init__()
        self.vit, self.pool = vit, pool

    def forward(self, images):  # images (B, 3, H, W)
        return self.pool(self.vit.forward_features(images)).mean(1)  # (B, D)
