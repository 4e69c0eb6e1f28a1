"""Nystrom attention at initialisation of the ListOps model, lam = 0, 1, 10: its softmax kernels and the
depthwise convolution on V that mixes tokens without them.

    .venv/bin/python scripts/nystrom_attention_at_init.py     # seconds; needs `speccond data prepare listops`

The model is the lra-listops full preset's (seed 0), fed 32 test sequences. For every Nystrom attention
block it recomputes, from the block's own (conditioned) query / key projections as transformers does, the
entropy of kernel 1 (each token over the 64 key landmarks) and of kernel 3 (each query landmark over the
tokens) against log n, and the share of the block's output that comes from the convolution on V rather
than from attention (|conv(V)| / (|attention| + |conv(V)|), Frobenius norms).
"""
from __future__ import annotations

import math

import torch
from transformers.models.nystromformer.modeling_nystromformer import NystromformerSelfAttention

from speccond.diagnostics.entropy import row_entropy
from speccond.harness import TrainConfig, build_model, load_task, preset, task_shape


def entropy(p: torch.Tensor) -> float:
    return float(row_entropy(p).mean())


def inspect_block(module: NystromformerSelfAttention, hidden: torch.Tensor) -> dict:
    """Kernel entropies and the convolution's share of one block's output, for hidden states (B, N, C)."""
    shape = (*hidden.shape[:-1], -1, module.attention_head_size)
    scale = math.sqrt(math.sqrt(module.attention_head_size))
    q, k, v = (layer(hidden).view(shape).transpose(1, 2) for layer in (module.query, module.key, module.value))
    q, k = q / scale, k / scale  # (B, H, N, d)
    segments = (*q.shape[:2], module.num_landmarks, module.seq_len // module.num_landmarks, q.shape[-1])
    q_landmarks, k_landmarks = q.reshape(segments).mean(-2), k.reshape(segments).mean(-2)  # (B, H, m, d)
    kernel_1 = (q @ k_landmarks.transpose(-1, -2)).softmax(-1)  # (B, H, N, m)
    kernel_2 = (q_landmarks @ k_landmarks.transpose(-1, -2)).softmax(-1)  # (B, H, m, m)
    kernel_3 = (q_landmarks @ k.transpose(-1, -2)).softmax(-1)  # (B, H, m, N)
    attention = kernel_1 @ module.iterative_inv(kernel_2) @ (kernel_3 @ v)  # (B, H, N, d)
    conv = module.conv(v)  # (B, H, N, d)
    return {"kernel_1": entropy(kernel_1), "log_m": math.log(kernel_1.shape[-1]), "kernel_3": entropy(kernel_3),
            "log_n": math.log(kernel_3.shape[-1]), "conv_share": float(conv.norm() / (attention.norm() + conv.norm()))}


def main() -> None:
    base = TrainConfig().replaced(task="lra-listops").with_overrides(preset("full", "lra-listops"))
    tokens = load_task(base)["test_x"][:32]  # (32, L)
    for lam in (0.0, 1.0, 10.0):
        config = base.replaced(method="spectral" if lam else "baseline", lam=lam)
        model = build_model(config, task_shape(config.data.task)).eval()
        found = []
        for module in model.modules():
            if isinstance(module, NystromformerSelfAttention):
                module.register_forward_hook(lambda m, inputs, _out: found.append(inspect_block(m, inputs[0])))
        with torch.no_grad():
            model(tokens)
        mean = {key: sum(f[key] for f in found) / len(found) for key in found[0]}
        print(f"lam = {lam:<3g} kernel 1 entropy {mean['kernel_1']:.2f} of {mean['log_m']:.2f} nats, kernel 3 "
              f"{mean['kernel_3']:.2f} of {mean['log_n']:.2f}, convolution's share of the output "
              f"{mean['conv_share']:.2f} ({len(found)} blocks)")


if __name__ == "__main__":
    main()
