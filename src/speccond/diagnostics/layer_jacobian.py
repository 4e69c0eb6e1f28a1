"""The attention Jacobian and Theorem 3.4 of a real model's layer and head (tests/test_jacobian.py).

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
from speccond.diagnostics.heads import Inputs, head_cases, measured_layers
from speccond.diagnostics.jacobian import jacobian_spectrum
from speccond.diagnostics.records import Records


def attention_jacobian(
    model: nn.Module,
    inputs: Inputs,
    layer: int = 0,
    head: int = 0,
    wrt: str = "weights",
    method: str = "auto",
    **options,
) -> Records:
    """One row: layer, head and every field of ``jacobian_spectrum``'s SingularSummary: wrt, method, shape,
    the values (sigma_max, sigma_min, kappa, singular, kappa_nonzero, rank; nan / None when the method has
    not determined them), rank_bound, converged, the proven brackets (kappa_lower, kappa_upper,
    kappa_nonzero_lower, kappa_nonzero_upper, sigma_max_lower, sigma_min_upper, sigma_min_nonzero_upper)
    and (matrix-free) iterations and residuals. ``options``: rtol, max_iter, seed of
    ``jacobian_spectrum``."""
    inputs = inputs if isinstance(inputs, (tuple, dict)) else (inputs,)  # a dict: keyword inputs
    (case,) = head_cases(model, inputs, layer, [head])
    summary = jacobian_spectrum(case, wrt=wrt, method=method, **options)
    return Records([{"layer": layer, "head": head, **asdict(summary)}], "attention Jacobian")


def jacobian_rows(
    model: nn.Module,
    inputs: Inputs,
    layers: Optional[Sequence[int]] = None,
    heads: Sequence[int] = (0,),
    wrt: str = "weights",
    method: str = "matrix-free",
    **options,
) -> Records:
    """attention_jacobian's rows for several layers and heads (default: every layer, head 0), for trackers;
    where the head diagnostics refuse a layer, the error names the ``layers=`` that measures the others.

    Matrix-free by default: a head whose budget (max_iter) does not exhaust the Krylov space gets kappa =
    nan, converged = False and the bracket; read kappa_lower / kappa_nonzero_lower for a proven floor."""
    inputs = inputs if isinstance(inputs, (tuple, dict)) else (inputs,)  # a dict: keyword inputs
    rows = []
    for layer in measured_layers(model, layers, "jacobian_rows"):
        for case_head, case in zip(heads, head_cases(model, inputs, layer, list(heads))):
            summary = jacobian_spectrum(case, wrt=wrt, method=method, **options)
            rows.append({"layer": layer, "head": case_head, **asdict(summary)})
    return Records(rows, "attention Jacobian")


def theorem_bound(
    model: nn.Module, inputs: Inputs, layer: int = 0, head: int = 0, sample: int = 0, method: str = "auto", **options
) -> Records:
    """One row: every term of Theorem 3.4 for sample ``sample`` of the probe batch, the bound, the measured
    kappa(J) (both conventions), whether it holds, and whether the head is within the theorem's setting;
    also how kappa(J) was measured (jacobian_method, jacobian_converged) and its proven bracket
    (jacobian_kappa_lower / _upper, jacobian_kappa_nonzero_lower / _upper). With an unconverged
    matrix-free kappa(J) the kappas are nan, so holds / holds_nonzero are False without meaning that the
    bound fails: compare the bound with the bracket instead."""
    inputs = inputs if isinstance(inputs, (tuple, dict)) else (inputs,)  # a dict: keyword inputs
    (case,) = head_cases(model, inputs, layer, [head])
    record = head_bound.theorem_bound(one_sample(case, sample), method=method, **options)
    row = {k: v for k, v in asdict(record).items() if k != "jacobian"}
    jac = record.jacobian
    row.update(jacobian_method=jac.method, jacobian_converged=jac.converged, jacobian_kappa_lower=jac.kappa_lower,
               jacobian_kappa_upper=jac.kappa_upper, jacobian_kappa_nonzero_lower=jac.kappa_nonzero_lower,
               jacobian_kappa_nonzero_upper=jac.kappa_nonzero_upper)
    return Records([{"layer": layer, "head": head, "sample": sample, **row}], "Theorem 3.4")
