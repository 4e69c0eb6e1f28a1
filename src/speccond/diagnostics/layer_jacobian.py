"""The attention Jacobian and Theorem 3.4 of a real model's layer and head (the contract of issue 4).

    dx.attention_jacobian(model, inputs, layer=0, head=0, wrt="weights", method="auto")
    dx.theorem_bound(model, inputs, layer=0, head=0)

The head is rebuilt from the layer's captured input exactly as the model computes it (heads.py); the
Jacobian is that of its output A (B, N, dh) with respect to the head's slices of the effective W_Q, W_K,
W_V (biases excluded) or to the attention input X. The math, the matrix-free method and what the checks
found about the theorem are in jacobian.py, lanczos.py and bound.py.
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Optional, Sequence

from torch import nn

from speccond.diagnostics import bound as head_bound
from speccond.diagnostics.attention_head import one_sample
from speccond.diagnostics.heads import head_cases, layer_count
from speccond.diagnostics.jacobian import jacobian_spectrum
from speccond.diagnostics.records import Records


def attention_jacobian(
    model: nn.Module,
    inputs: tuple,
    layer: int = 0,
    head: int = 0,
    wrt: str = "weights",
    method: str = "auto",
    **options,
) -> Records:
    """One row: layer, head, wrt, method, shape, sigma_max, sigma_min, kappa, singular, kappa_nonzero,
    rank or rank_bound, and (matrix-free) iterations, converged, residuals. ``options``: rtol, max_iter,
    tol, seed of ``jacobian_spectrum``."""
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    (case,) = head_cases(model, inputs, layer, [head])
    summary = jacobian_spectrum(case, wrt=wrt, method=method, **options)
    return Records([{"layer": layer, "head": head, **asdict(summary)}], "attention Jacobian")


def jacobian_rows(
    model: nn.Module,
    inputs: tuple,
    layers: Optional[Sequence[int]] = None,
    heads: Sequence[int] = (0,),
    wrt: str = "weights",
    method: str = "matrix-free",
    **options,
) -> Records:
    """attention_jacobian for several layers and heads (default: every layer, head 0), for trackers."""
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    rows = []
    for layer in range(layer_count(model)) if layers is None else layers:
        for case_head, case in zip(heads, head_cases(model, inputs, layer, list(heads))):
            summary = jacobian_spectrum(case, wrt=wrt, method=method, **options)
            rows.append({"layer": layer, "head": case_head, **asdict(summary)})
    return Records(rows, "attention Jacobian")


def theorem_bound(
    model: nn.Module, inputs: tuple, layer: int = 0, head: int = 0, sample: int = 0, method: str = "auto", **options
) -> Records:
    """One row: every term of Theorem 3.4 for sample ``sample`` of the probe batch, the bound, the measured
    kappa(J) (both conventions), whether it holds, and whether the head is within the theorem's setting."""
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    (case,) = head_cases(model, inputs, layer, [head])
    record = head_bound.theorem_bound(one_sample(case, sample), method=method, **options)
    row = {k: v for k, v in asdict(record).items() if k != "jacobian"}
    row.update(jacobian_method=record.jacobian.method, jacobian_converged=record.jacobian.converged)
    return Records([{"layer": layer, "head": head, "sample": sample, **row}], "Theorem 3.4")
