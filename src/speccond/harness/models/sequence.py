"""Sequence classifiers for the Long Range Arena tasks: a Hugging Face Nystromformer built from config.

    model = build_nystromformer(length=1024, vocab=257, classes=10, embed_dim=64, depth=2, num_heads=2,
                                landmarks=64)
    logits = model(tokens)   # tokens (B, 1024) int64, PAD = 0 -> logits (B, 10)
    pairs = build_nystromformer(256, 257, 2, 64, 2, 2, 64, pairs=True)
    logits = pairs(tokens)   # tokens (B, 2, 256): two texts per example -> logits (B, 2)

The encoder is transformers' ``NystromformerModel`` (no pretrained weights); the classifier is a linear
layer on the mean of the encoder's outputs over the non-PAD tokens (LRA's mean pooling), so no CLS token
is needed and an image of 32 x 32 pixels stays 1,024 tokens. Dropout is off, as in the vision families.
For two-text tasks (pairs-bytes, the analogue of LRA's Retrieval) :class:`PairClassifier` is LRA's dual
encoder (``classifier_head_dual`` with NLI interaction in google-research/long-range-arena): one shared
encoder embeds each text as the masked mean u or v, and an MLP reads [u, v, u * v, u - v].

Nystrom attention (Xiong et al. 2021) averages q and k over ``length / landmarks`` consecutive tokens
to form the landmarks. transformers' implementation takes the segment length from its config
(``segment_means_seq_len``) and, when ``num_landmarks`` equals it, silently computes full softmax
attention instead. So every sequence is padded to exactly the configured length, a multiple of the
landmark count (``padded_length``), and :func:`attention_mode` names which of the two a configuration
gets; the harness records it. PAD tokens are masked out of the pooling only: transformers 5.24 expands
an attention mask to (B, 1, L, L), which its Nystrom branch cannot add to its (landmarks x L) scores (a
shape error), so the encoder sees PAD tokens as tokens, as the landmark means do in any case. The
pixel tasks have no padding; ListOps pads up to the longest sequence of its split.

The Nystrom pseudo-inverse of the (landmarks x landmarks) kernel is 6 Newton-Schulz iterations from
Z_0 = K^T / c. transformers' default c (``inv_coeff_init_option=False``, the original code's) is one
maximum over the whole batch, so an example's output depends on the other examples in its batch
whenever 6 iterations do not converge: at lam = 10 the kernel's condition number reaches about 1e36
and an example alone differs from the same example in a batch of 8 by about 1e-2 (about 1e-7 at
lam = 0). The models here use the per-matrix c (1 / ||K||_1 of each matrix), so predictions never
depend on batch composition (tested). transformers offers it as ``inv_coeff_init_option=True``, but in
5.24 that option fails while the model is built (it indexes the config like a dict), so
:func:`_per_matrix_inverse_scale` sets the attribute that option would have set.
"""
from __future__ import annotations

import logging

import torch
from torch import nn

from speccond.harness.tasks.datasets import PAD, padded_length  # the sequence tasks' padding

log = logging.getLogger(__name__)
CONV_KERNEL = 35  # the depthwise convolution on V that LRA's Nystromformer configuration uses


def attention_mode(length: int, landmarks: int) -> str:
    """"nystrom" when the landmarks approximate attention, "full" when transformers falls back to
    exact softmax attention (landmarks == length). ``length`` must be a multiple of ``landmarks``."""
    if length % landmarks:
        raise ValueError(
            f"sequence length {length} is not a multiple of landmarks {landmarks}: transformers' Nystromformer "
            f"would group tokens wrongly; pad to {padded_length(length, landmarks)}"
        )
    return "full" if length == landmarks else "nystrom"


def pooled(encoder: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """The mean of the encoder's outputs over the non-PAD tokens: tokens (B, L) -> (B, D)."""
    hidden = encoder(input_ids=tokens).last_hidden_state  # (B, L, D); no attention mask, see above
    weights = (tokens != PAD).unsqueeze(-1).to(hidden.dtype)  # (B, L, 1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp_min(1)  # (B, D)


class SequenceClassifier(nn.Module):
    """Encoder, masked mean pooling, linear head: tokens (B, L) int64 -> logits (B, classes)."""

    def __init__(self, encoder: nn.Module, width: int, classes: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(width, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(pooled(self.encoder, tokens))  # (B, classes)


class PairClassifier(nn.Module):
    """LRA's dual encoder: tokens (B, 2, L) int64 (text a, text b) -> logits (B, classes).

    Both texts go through the one shared encoder, in one batch of 2B sequences; their masked means
    u, v (B, D) are combined as [u, v, u * v, u - v] (B, 4D) and read by Linear(4D, H), ReLU,
    Linear(H, H / 2), ReLU, Linear(H / 2, classes), with H = ``hidden``.
    """

    def __init__(self, encoder: nn.Module, width: int, classes: int, hidden: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = nn.Sequential(
            nn.Linear(4 * width, hidden), nn.ReLU(), nn.Linear(hidden, hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, classes),
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 3 or tokens.shape[1] != 2:
            raise ValueError(f"PairClassifier: expected tokens of shape (batch, 2, length), two texts per example, "
                             f"got {tuple(tokens.shape)}; a one-text task wants SequenceClassifier (pairs=False)")
        u, v = pooled(self.encoder, tokens.flatten(0, 1)).unflatten(0, (tokens.shape[0], 2)).unbind(1)  # (B, D) each
        return self.head(torch.cat([u, v, u * v, u - v], dim=-1))  # (B, 4D) -> (B, classes)


def build_nystromformer(
    length: int, vocab: int, classes: int, embed_dim: int, depth: int, num_heads: int, landmarks: int,
    pairs: bool = False,
) -> SequenceClassifier | PairClassifier:
    """A plain Nystromformer classifier for sequences of exactly ``length`` tokens (seed torch first);
    ``pairs``: a PairClassifier for two texts of ``length`` tokens each, MLP width 2 * embed_dim."""
    from transformers import NystromformerConfig, NystromformerModel

    if embed_dim % num_heads:
        raise ValueError(f"nystromformer: num_heads ({num_heads}) must divide embed_dim ({embed_dim})")
    mode = attention_mode(length, landmarks)
    if mode == "full":
        log.warning("nystromformer: landmarks (%d) == sequence length: transformers computes full attention", landmarks)
    config = NystromformerConfig(
        vocab_size=vocab, hidden_size=embed_dim, num_hidden_layers=depth, num_attention_heads=num_heads,
        intermediate_size=2 * embed_dim, max_position_embeddings=length, segment_means_seq_len=length,
        num_landmarks=landmarks, conv_kernel_size=CONV_KERNEL, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, pad_token_id=PAD,
    )
    encoder = _per_matrix_inverse_scale(NystromformerModel(config))
    if pairs:
        return PairClassifier(encoder, embed_dim, classes, hidden=2 * embed_dim)
    return SequenceClassifier(encoder, embed_dim, classes)



def build(config, shape) -> SequenceClassifier | PairClassifier:
    """The run's Nystromformer (registry.py's ``nystromformer``) sized by its config, for the task's tokens
    padded to a multiple of its landmarks (a PairClassifier when each example is two texts)."""
    return build_nystromformer(
        padded_length(shape.length, config.model.landmarks), shape.vocab, shape.classes, embed_dim=config.model.embed_dim,
        depth=config.model.depth, num_heads=config.model.num_heads, landmarks=config.model.landmarks, pairs=shape.pairs,
    )

def _per_matrix_inverse_scale(encoder: nn.Module) -> nn.Module:
    """Start every Nystrom pseudo-inverse from its own matrix's scale, not the batch's (module note)."""
    from transformers.models.nystromformer.modeling_nystromformer import NystromformerSelfAttention

    attentions = [m for m in encoder.modules() if isinstance(m, NystromformerSelfAttention)]
    if not attentions or not all(getattr(m, "init_option", None) == "original" for m in attentions):
        raise RuntimeError("this transformers version's NystromformerSelfAttention has no init_option 'original' "
                           "to replace; check sequence._per_matrix_inverse_scale against its iterative_inv")
    for attention in attentions:
        attention.init_option = "exact"  # anything but "original": 1 / max column sum of each matrix
    return encoder
