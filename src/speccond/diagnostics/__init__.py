"""Diagnostics: see the conditioning the paper talks about.

    from speccond import diagnostics as dx
    dx.projection_spectra(model)          # sigma_min, sigma_max, kappa of W_Q, W_K, W_V per layer/head
    dx.attention_entropy(model, inputs)   # mean attention entropy per layer and head, vs log(N)
    dx.attention_jacobian(model, inputs, layer=0, head=0, wrt="weights", method="auto")
    dx.theorem_bound(model, inputs, layer=0, head=0)   # each term of Theorem 3.4 next to kappa(J)
    tracker = dx.Tracker(model, probe, every=200, path="run/metrics.jsonl")

Every function returns Records: rows that print as a table and save as JSON. Only torch is imported.
"""
from speccond.diagnostics.entropy import attention_entropy
from speccond.diagnostics.layer_jacobian import attention_jacobian, jacobian_rows, theorem_bound
from speccond.diagnostics.records import Records, read_metrics
from speccond.diagnostics.spectra import projection_spectra
from speccond.diagnostics.tracker import Tracker

__all__ = [
    "Records",
    "Tracker",
    "attention_entropy",
    "attention_jacobian",
    "jacobian_rows",
    "projection_spectra",
    "read_metrics",
    "theorem_bound",
]
