"""One head of a real attention layer, as the model computes it, rebuilt from its captured input.

For layer ``l`` and head ``h`` this captures the attention module's real input with a forward pre-hook,
asks the module's adapter how the module forms its logits on that input (``head_inputs``: scale, masks,
position biases, q/k norms, rotary embedding, soft-capping; ``speccond.adapters.head_inputs``), slices
the head's effective weights W_Q, W_K, W_V (paper layout (D, dh), so q = X W_Q + b_Q) and biases, and
records all of it in an ``AttentionHead`` (attention_head.py), which recomputes

    A(X) = softmax(cap(scale rot(n_Q(X W_Q + b_Q)) rot(n_K(X W_K + b_K))^T) + bias) (X W_V + b_V)

with an explicit softmax (fused kernels break forward-mode AD); the entropy and Jacobian diagnostics
read and differentiate it. Under grouped-query attention query head h reads key/value head
h // (query heads / key-value heads). The capability belongs to the adapter: a module whose adapter
does not rebuild heads (channel attention, Nystrom landmarks, windowed attention, modules declared by
a layout) is refused with the adapter's reason.
"""
from __future__ import annotations

import copy
import numbers
from contextlib import nullcontext
from dataclasses import replace
from typing import Any, Iterable, Optional

import torch
from torch import nn

from speccond.adapters.head_inputs import HeadInputs, head_refusal
from speccond.checks import check_example_input, require_module
from speccond.core.sharded import unsharded
from speccond.diagnostics.attention_head import AttentionHead
from speccond.diagnostics.census import watched
from speccond.layers import AttentionLayer, Projection, attention_layers, coverage_refusal, projection_bias

Inputs = Any  # a tuple of positional inputs, a dict of keyword inputs, or one tensor


# -- building AttentionHeads from a real model ---------------------------------------------------------------
def head_cases(model: nn.Module, inputs: Inputs, layer: int, heads: Optional[list[int]] = None) -> list[AttentionHead]:
    """AttentionHeads of ``layer`` for query ``heads`` (default all) on the probe batch ``inputs``."""
    require_module(model, "speccond.diagnostics")
    check_example_input(*_split(inputs), where="speccond.diagnostics: the probe input")
    refused: list[nn.Module] = []  # left out with a warning; the census counts their attention as known
    layers = attention_layers(model, refused=refused)
    uncovered = coverage_refusal(model, "the head diagnostics", layers=layers)
    if uncovered:  # the layers would be numbered without them, or there are none
        raise ValueError(uncovered)
    if isinstance(layer, bool) or not isinstance(layer, numbers.Integral) or not 0 <= layer < len(layers):
        raise ValueError(
            f"layer must be an int in [0, {len(layers)}): the model has {len(layers)} attention layers, got {layer!r}"
        )
    layer = int(layer)
    target = layers[layer]
    check_rebuildable(target)
    found = [found.module for found in layers] + refused
    args, kwargs = capture_input(model, target.module, inputs, found=found)
    with unsharded(model, target.module) as gathered:  # FSDP2: the module's own tensors, as in its forward
        return _rebuilt(target, layer, args, kwargs, heads, gathered)


def heads_on_input(
    target: AttentionLayer, args: tuple, kwargs: dict, heads: Optional[list[int]] = None,
) -> list[AttentionHead]:
    """AttentionHeads of ``target`` for query ``heads`` (default all) on the args and kwargs its module was
    called with, as a forward pre-hook receives them during any forward (speccond.monitor reads the training
    batch this way, with no forward of its own). The caller checks the layer first (:func:`rebuild_refusal`)."""
    return _rebuilt(target, target.index, args, kwargs, heads, gathered=False)


def _rebuilt(
    target: AttentionLayer, layer: int, args: tuple, kwargs: dict, heads: Optional[list[int]], gathered: bool,
) -> list[AttentionHead]:
    try:
        form: HeadInputs = target.adapter.head_inputs(target.module, args, kwargs)
    except ValueError as err:
        raise ValueError(f"layer {layer} ({target.name}, {target.adapter_name}): {err}") from None
    if gathered:  # copies of the q/k norm modules, holding the values read now (FSDP2 reshards on the way out)
        form = replace(form, q_norm=_snapshot(form.q_norm), k_norm=_snapshot(form.k_norm))
    q_proj, q_role = target.block("q")
    k_proj, k_role = target.block("k")
    v_proj, v_role = target.block("v")
    q_heads, kv_heads = q_proj.layout.heads(q_role), k_proj.layout.heads(k_role)
    if q_heads % kv_heads or v_proj.layout.heads(v_role) != kv_heads:
        raise ValueError(
            f"layer {layer} ({target.name}): {q_heads} query heads cannot share {kv_heads} key and "
            f"{v_proj.layout.heads(v_role)} value heads"
        )
    group = q_heads // kv_heads
    cases = []
    for head in range(q_heads) if heads is None else heads:
        if not 0 <= head < q_heads:
            raise ValueError(f"head must be in [0, {q_heads}) for layer {layer} ({target.name}), got {head}")
        w_q, b_q = _head_weight(q_proj, q_role, head)
        w_k, b_k = _head_weight(k_proj, k_role, head // group)
        w_v, b_v = _head_weight(v_proj, v_role, head // group)
        cases.append(
            AttentionHead(
                form.x, w_q, w_k, w_v, form.scale, b_q, b_k, b_v, form.head_bias(head), form.causal,
                form.q_norm, form.k_norm, form.rotary, form.softcap,
            )
        )
    return cases


def _snapshot(norm):
    return copy.deepcopy(norm) if isinstance(norm, nn.Module) else norm


def rebuild_refusal(model: nn.Module) -> str:
    """Why the head diagnostics refuse an attention layer of ``model``, as far as the modules tell without a
    call: the adapter's reason, PEFT tuner layers, hooks on a projection ('' when none does; a call can
    still be refused for its inputs, e.g. a mask), attention-like modules no adapter recognises, or no attention
    layer at all. Runs nothing."""
    try:
        refused = refused_layers(model)
    except ValueError as uncovered:
        return str(uncovered)
    return next(iter(refused.values()), "")


def refused_layers(model: nn.Module) -> dict[int, str]:
    """Layer -> why the head diagnostics refuse it (:func:`check_rebuildable`'s message), for each attention layer
    of ``model`` they refuse; raises ValueError as :func:`layer_count` does. Runs nothing."""
    return _refusals(_covered_layers(model))


def _refusals(layers: list[AttentionLayer]) -> dict[int, str]:
    refused = {}
    for layer in layers:
        try:
            check_rebuildable(layer)
        except ValueError as error:
            refused[layer.index] = str(error)
    return refused


def layer_count(model: nn.Module) -> int:
    """The number of attention layers the head diagnostics number; raises ValueError naming attention-like
    modules that no adapter recognises (the layers would be numbered and tabled without them), and when there is
    no attention layer (layers.coverage_refusal)."""
    return len(_covered_layers(model))


def _covered_layers(model: nn.Module) -> list[AttentionLayer]:
    layers = attention_layers(model)
    uncovered = coverage_refusal(model, "the head diagnostics", layers=layers)
    if uncovered:
        raise ValueError(uncovered)
    return layers


def measured_layers(model: nn.Module, layers: Optional[Iterable[int]], diagnostic: str) -> list[int]:
    """The layers a whole-model diagnostic measures: ``layers`` as given (a non-empty list; each is checked when
    its heads are built), or every attention layer. When every layer was asked for and the head diagnostics
    refuse some, ValueError with the first refusal and the ``layers=`` that measures the others, so the table is
    never silently short of a layer."""
    covered = _covered_layers(model)
    if layers is not None:
        chosen = list(layers) if isinstance(layers, Iterable) and not isinstance(layers, (str, bytes)) else []
        if not chosen:
            raise ValueError(f"{diagnostic}: layers must be a non-empty list of attention layer indices, got {layers!r}")
        return chosen
    refused = _refusals(covered)
    if not refused:
        return list(range(len(covered)))
    others = [index for index in range(len(covered)) if index not in refused]
    first = next(iter(refused.values()))
    if not others:
        raise ValueError(first)
    raise ValueError(f"{first.rstrip('.')}; {diagnostic}(..., layers={others}) measures the {len(others)} it can rebuild")


def check_rebuildable(layer: AttentionLayer) -> None:
    """ValueError unless the head diagnostics can rebuild ``layer``'s heads (its adapter's answer, PEFT tuner
    layers, hooks on a projection): :func:`rebuild_refusal`'s check of one layer."""
    layer.check_weights_tell("the head diagnostics")
    reason = "it was declared by a layout, so speccond does not know how it forms its logits"
    if layer.adapter is not None:
        reason = head_refusal(layer.adapter)
        module_refusal = getattr(layer.adapter, "module_refusal", None)  # adapters whose answer depends on the module
        if not reason and module_refusal is not None:
            reason = module_refusal(layer.module) or None
    if reason:
        raise ValueError(
            f"layer {layer.index} ({layer.name}, {layer.adapter_name}): the head diagnostics cannot rebuild its "
            f"heads: {reason}. projection_spectra works for it."
        )


UNFOUND_ADVICE = ("they rebuild only attention an adapter recognises: measure a model without that module, or read "
                  "its q, k, v spectra with projection_spectra and its layout declared (SpectralConfig(layouts=...))")


def capture_input(
    model: nn.Module, module: nn.Module, inputs: Inputs, found: Optional[list[nn.Module]] = None,
) -> tuple[tuple, dict]:
    """The args and kwargs ``module`` is called with when the model runs on ``inputs`` (eval, no grad).

    ``inputs``: a tuple (positional), a dict (keyword: {"input_ids": ..., "attention_mask": ...}) or one tensor,
    as verify takes them. A key/value cache in the captured
    arguments is dropped: the diagnostics rebuild one forward of the input, not a cached continuation.
    ``found``: the attention modules the diagnostics table; when given, the forward is watched
    (census.py) and attention that runs outside all of them is refused, naming where it ran.
    """
    captured: list[tuple[tuple, dict]] = []

    def hook(_module, args, kwargs):
        if not captured:
            captured.append((args, dict(kwargs)))

    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    # each module's own mode: a PEFT wrapper is in training mode around a base model in eval mode, and
    # model.train(was_training) would switch the base's dropout on
    modes = [(child, child.training) for child in model.modules()]
    args, kwargs = _split(inputs)
    try:
        model.eval()
        with torch.no_grad(), (watched(model, found) if found is not None else nullcontext()) as census:
            model(*args, **kwargs)
    finally:
        handle.remove()
        for child, training in modes:
            child.training = training
    unfound = census.refusal(model, "the head diagnostics", UNFOUND_ADVICE) if census is not None else ""
    if unfound:
        raise ValueError(unfound)
    if not captured:
        raise ValueError("the probe input never reached this attention layer; pass an input the model runs on")
    return captured[0]


def _split(inputs: Inputs) -> tuple[tuple, dict]:
    if isinstance(inputs, dict):
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    return (inputs,), {}


def _head_weight(projection: Projection, role: str, head: int) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    rows = projection.rows(role, head)
    weight = projection.effective()[rows].t().contiguous()  # (D, dh) paper layout
    bias = _bias(projection)
    return weight, (None if bias is None else bias[rows].clone())


def _bias(projection: Projection) -> Optional[torch.Tensor]:
    out_features = projection.layout.out_in(getattr(projection.module, projection.param_name)).shape[0]
    return projection_bias(
        projection.module, projection.param_name, out_features, projection.layout.roles, projection.attention
    )
