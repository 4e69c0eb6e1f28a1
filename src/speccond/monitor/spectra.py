"""kappa, sigma_max and sigma_min of the effective W_Q, W_K, W_V (W + C) per block and per head, cheaply.

The same quantities as :func:`speccond.diagnostics.projection_spectra` (which computes every one in
float64, one SVD per matrix, for reports), here for a training loop: the singular values are computed in
the weights' own precision (float32; float16 and bfloat16, which the SVD does not take, in float32), all
heads of a block in one batched call, and only the ratio sigma_max / sigma_min in float64 (Python
floats). A matrix whose sigma_min cannot be told from zero in the weights' dtype or the SVD's
(:func:`speccond.core.spectral.is_numerically_singular`) is singular: kappa inf, as in
:class:`speccond.core.spectral.Spectrum`.
"""
from __future__ import annotations

import torch
from torch import nn

from speccond.core.spectral import is_numerically_singular
from speccond.layers import AttentionLayer
from speccond.monitor.names import spectrum_name
from speccond.monitor.schedule import Schedule


def spectra_metrics(layers: list[AttentionLayer], schedule: Schedule) -> dict[str, float]:
    """{name: value} for the ones of ``layers`` (a model's attention layers) and the heads ``schedule``
    samples (names.py for the names), from the weights as they are now."""
    metrics: dict[str, float] = {}
    for layer in layers:
        if schedule.measures_layer(layer.index):
            layer.check_weights_tell("speccond.monitor")
            metrics.update(_layer_metrics(layer, schedule))
    return metrics


def _layer_metrics(layer: AttentionLayer, schedule: Schedule) -> dict[str, float]:
    metrics: dict[str, float] = {}
    for projection in layer.projections:
        effective = projection.effective()  # (out, in)
        for stored_role, role in zip(projection.layout.roles, projection.acts_as):
            block = effective[projection.rows(stored_role)]  # (out_block, in)
            (sigma_max, sigma_min, kappa), = _extremes(block.unsqueeze(0))
            metrics[spectrum_name("kappa", layer.index, role)] = kappa
            metrics[spectrum_name("sigma_max", layer.index, role)] = sigma_max
            metrics[spectrum_name("sigma_min", layer.index, role)] = sigma_min
            count = projection.layout.heads(stored_role)
            heads = schedule.heads_of(count) if schedule.per_head else []
            if heads:
                per_head = block.reshape(count, block.shape[0] // count, block.shape[1])[heads]  # (H, dh, in)
                for head, (_, _, kappa) in zip(heads, _extremes(per_head)):
                    metrics[spectrum_name("kappa", layer.index, role, head)] = kappa
    return metrics


def _extremes(matrices: torch.Tensor) -> list[tuple[float, float, float]]:
    """(sigma_max, sigma_min, kappa) of each matrix of a (M, rows, cols) stack, in one batched SVD."""
    compute = matrices if matrices.dtype in (torch.float32, torch.float64) else matrices.float()
    values = torch.linalg.svdvals(compute)  # (M, min(rows, cols)), descending
    shape = tuple(matrices.shape[1:])
    out = []
    for matrix_values in values:  # (min(rows, cols),)
        sigma_max, sigma_min = float(matrix_values[0]), float(matrix_values[-1])  # Python floats: float64
        singular = is_numerically_singular(matrix_values, shape, matrices.dtype, compute.dtype)
        out.append((sigma_max, sigma_min, float("inf") if singular else sigma_max / sigma_min))
    return out
