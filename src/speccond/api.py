"""The public verbs: apply, refresh, remove, is_conditioned, describe.

    SpecA(X) = softmax(X (W_Q + C_Q)(W_K + C_K)^T X^T) X (W_V + C_V)     (Saratchandran and Lucey, 2025)
"""
from __future__ import annotations

import dataclasses

import logging
import warnings
from typing import Optional

import torch
from torch import nn
from torch.nn.utils import parametrize

from speccond.adapters import (
    ProjectionSite,
    attention_modules,
    find_projections,
    unrecognised_attention,
    unrecognised_message,
)
from speccond.adapters.base import is_conv1d
from speccond.adapters.unrecognised import state_space_mixers
from speccond.checkpoint_files import refuse_partly_loaded
from speccond.checks import check_example_input, received, require_bool, require_module
from speccond.core.backends import Undo, attach, attachments, detach, merged_weight, restore
from speccond.core.config import SpectralConfig
from speccond.core.correction import SpectralCorrection
from speccond.core.peft_layers import is_tuner_layer, rescaling_reason
from speccond.core.sharded import is_sharded
from speccond.progress import tracked
from speccond.report import PendingRows, SpectralReport, rows_of
from speccond.verify import verify

log = logging.getLogger(__name__)


def apply(
    model: nn.Module, config: Optional[SpectralConfig] = None, *, verify_with: object = None
) -> SpectralReport:
    """Condition the q, k, v projections of ``model`` in place and report what changed.

    The report's spectra (kappa of W and of W + C per block and per head) are computed on its first
    read, or by ``report.compute()``, from the weights as attached; read it before training, or call
    :func:`describe` for the model as it stands (speccond.report).

    ``verify_with``: one example input of ``model``, as the model is called: a dict (any mapping, e.g. a
    tokenizer's BatchEncoding) of keyword arguments, ``{"input_ids": ids, "attention_mask": mask}``; a
    tuple or list of positional arguments, ``(images,)``; or a single tensor. When given,
    :func:`speccond.verify` probes every conditioned attention module after attaching, with the model's
    own defaults (a decoder's KV cache included; nothing is written to it); if it fails, the model is put
    back as it was (below) and the error is raised.

    Every projection that the adapters (or ``config.layouts``) find and ``config.targets`` selects gets
    its fixed correction C: lam * I_k per q/k/v block (Theorem 3.8) or sigma_max U V^T (Theorem 3.5).
    With lam="auto", each block's (or head's) lam = sigma_max (t + 1) / (t - 1), t = config.target_kappa,
    is chosen from the weight as it is now. Nothing is attached when every lam is 0, so the model stays
    bit for bit unchanged.

    Raises:
        TypeError: ``model`` is not an nn.Module or ``config`` not a SpectralConfig.
        ValueError: the model is already conditioned; a selected module looks like attention but no
            adapter or declared layout covers it (the message shows the declaration that would); targets
            select nothing; a weight does not fit its layout; the activation backend was asked for a
            projection that reads its weight directly; lam="auto" met an all-zero (or non-finite) block,
            or granularity="head" with heads whose rows run past the block's diagonal (block_out > in).
        Every check runs before the first correction is attached: an error leaves the model untouched.

    All or nothing: if anything fails once attaching has begun (attaching the k-th projection, verify,
    the collapse measurement), every module is put back as it was before the call: outputs, stored W
    (with ``init="preserve"`` too: W itself, not (W - C) + C), state_dict, classes, forward hooks and the
    very Parameter objects, bit for bit; then the error is raised.

    Order and mode: call it on the bare model, before DistributedDataParallel (or FSDP) wraps it (a
    wrapped model is refused); under ``torch.inference_mode`` it still makes normal tensors, so the model
    trains afterwards.
    """
    with torch.inference_mode(False):  # buffers made here must serve autograd later, even under inference_mode
        return _condition(model, config, verify_with)


def _condition(model: nn.Module, config: Optional[SpectralConfig], verify_with: object) -> SpectralReport:
    """The body of :func:`apply` (warnings point at apply's caller: stacklevel 3)."""
    config = SpectralConfig() if config is None else config
    require_module(model, "speccond.apply")
    if not isinstance(config, SpectralConfig):
        raise TypeError(
            f"speccond.apply expects a speccond.SpectralConfig, got {received(config)}; e.g. "
            "speccond.SpectralConfig(lam=10.0)"
        )
    _refuse_wrapped(model)
    example = None if verify_with is None else _example_call(verify_with)
    if example is not None:
        check_example_input(*example)  # the inputs, not the model, are at fault: said before anything changes
    refuse_partly_loaded(model)  # transformers' from_pretrained of a conditioned save: q, k, v were dropped
    if is_conditioned(model):
        raise ValueError(
            "this model is already spectrally conditioned; call speccond.remove(model) before applying again"
        )
    sites = find_projections(model, config)
    unknown = unrecognised_attention(model, config, sites)
    if unknown:
        raise ValueError(unrecognised_message(unknown, model))
    if not sites:
        raise ValueError(_nothing_selected_message(model, config))
    _check_sites(model, sites, config)
    if config.is_noop():
        log.info("every lam is 0: nothing attached")
        return SpectralReport(config=config.to_dict())
    built = _build(sites, config)  # every correction is built (and its errors raised) before the first is attached
    risks = _predicted_collapse(model, sites, built)  # read before attaching: W + C from the built corrections
    # the advice predicts other settings from the stored W, so it is read before attaching too
    advice = _collapse_advice(model, sites, config) if verify_with is not None or any(
        risk.collapses for risk in risks) else ""
    undos = []  # each module as it was before its attach: any failure below puts every one back
    try:
        for site, correction in built:
            for note in site.notes:
                warnings.warn(f"{site.qualified_name}: {note}", UserWarning, stacklevel=4)
            weight = getattr(site.module, site.param_name)
            undos.append(Undo(site.module, weight, config.backend, writes=config.init == "preserve"))
            attach(site.module, site.param_name, correction, config.backend, config.init, *_placement(model, site))
        if example is not None:
            verify(model, *example[0], **example[1])
            risks = _measured_collapse(model, verify_with, risks, config)
        for risk in risks:
            if risk.collapses:
                warnings.warn(risk.message(advice), UserWarning, stacklevel=4)
    except BaseException:
        restore(undos)  # W itself comes back (with "preserve" too, not (W - C) + C), bit for bit
        raise
    # The spectra are computed on first read of the report, not here (speccond.report: 90 % of apply's time)
    report = SpectralReport(config=config.to_dict(), pending=PendingRows(list(attachments(model))))
    log.info("conditioned %d projections", len(report))
    return report


def _example_call(example_inputs: object) -> tuple[tuple, dict]:
    """(positional, keyword arguments) of ``verify_with``: a mapping gives keyword arguments, a tuple or list
    positional arguments, anything else the one positional argument."""
    from collections.abc import Mapping

    if isinstance(example_inputs, Mapping):
        bad = [key for key in example_inputs if not isinstance(key, str)]
        if bad:
            raise TypeError(
                f"speccond.apply: verify_with as a mapping holds keyword arguments, so its keys must be "
                f"str; got {bad[:3]!r}. Pass positional inputs as a tuple instead"
            )
        return (), dict(example_inputs)
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs), {}
    return (example_inputs,), {}


def _refuse_wrapped(model: nn.Module) -> None:
    """Refuse a model that DistributedDataParallel (or FSDP1) already wraps: it recorded the parameters and
    hooked their gradients when it was built, so it would not see q, k, v once they move under a correction."""
    for name, module in model.named_modules():
        kind = type(module).__name__
        if isinstance(module, nn.parallel.DistributedDataParallel) or kind == "FullyShardedDataParallel":
            where = f"its submodule {name!r}" if name else "the model"
            raise ValueError(
                f"speccond.apply: {where} is wrapped in {kind}, which recorded the parameters and hooked their "
                "gradients when it was built: q, k, v conditioned now would escape it (their gradients not "
                f"all-reduced, or its forward failing). Condition the bare model before wrapping: "
                f"speccond.apply(model, config), then {kind}(model)"
            )


def _predicted_collapse(model: nn.Module, sites: list[ProjectionSite], built: list) -> list:
    """speccond.collapse.predict over the selected attention modules, at W + C of the built corrections."""
    from speccond.collapse import predict

    corrections = {id(site): correction for site, correction in built}
    groups: dict[str, list] = {}
    modules: dict[str, nn.Module] = {}
    for site in sites:
        key = site.attention_name or site.module_name.rpartition(".")[0]  # a declared site: its parent
        groups.setdefault(key, []).append((site, corrections.get(id(site))))
        modules[key] = model.get_submodule(key)  # its logit scale, when it has one
    return predict(groups, modules)


def _build(sites: list[ProjectionSite], config: SpectralConfig, precision: torch.dtype = torch.float64) -> list:
    """[(site, its SpectralCorrection)] for every selected site with a non-zero lam; raises every error
    (naming the module) before anything is attached. ``precision``: float64 for what is attached; the
    collapse advice's candidates, never attached, are built in float32 (SpectralCorrection)."""
    built = []
    work = "corrections" if precision == torch.float64 else "the collapse advice's candidate corrections"
    for site in tracked(sites, log, f"speccond.apply: {work} of %d/%d projections built"):
        scales = {role: config.scale(role) for role in site.layout.roles}
        if all(s == 0 for s in scales.values()):
            continue
        weight = getattr(site.module, site.param_name)
        try:
            correction = SpectralCorrection(
                site.layout, weight.shape, scales, config.correction, config.granularity, weight=weight,
                notes=site.notes, target_kappa=config.target_kappa, precision=precision, key_basis=config.key_basis,
            )
        except ValueError as err:
            raise ValueError(f"{site.qualified_name} ({site.source}): {err}") from None
        correction.acts_as = site.acts_as or site.layout.roles  # what verify probes for
        correction.probe_skip = site.probe_skip
        correction.collapse_exempt = site.collapse_exempt
        built.append((site, correction))
    return built


def _collapse_advice(model: nn.Module, sites: list[ProjectionSite], config: SpectralConfig) -> str:
    """What to try instead: other settings the same prediction says keep this model's attention spread
    (speccond.collapse_advice), never one it says collapses."""
    from speccond.collapse_advice import advice

    def predict_for(candidate: SpectralConfig):
        # The logits see q and k only, so a candidate's v correction is not built (a third of the work).
        logits_only = dataclasses.replace(candidate, lam_v=0.0)
        try:
            return _predicted_collapse(model, sites, _build(sites, logits_only, torch.float32))
        except ValueError:
            return None  # the setting cannot be built on these modules: not offered

    return advice(config, predict_for)


def _measured_collapse(model: nn.Module, inputs: object, predicted: list, config: SpectralConfig) -> list:
    """The collapse risk measured on ``inputs`` where the head diagnostics rebuild a family, else predicted;
    over the attention ``config`` selects (a module it excludes, one speccond refuses included, is not read)."""
    from collections.abc import Mapping

    from speccond.collapse import measure

    measured = measure(model, dict(inputs) if isinstance(inputs, Mapping) else inputs, config)
    families = {risk.family for risk in measured}
    return measured + [risk for risk in predicted if risk.family not in families]


def describe(model: nn.Module) -> SpectralReport:
    """The report of a conditioned model as it stands now (kappa of W and W + C recomputed)."""
    require_module(model, "speccond.describe")
    return SpectralReport(rows=rows_of(list(attachments(model))))


def refresh(model: nn.Module) -> int:
    """Recompute every correction that follows the weights from the current stored weights W; return how
    many corrections were recomputed.

    That is every SVD correction (C = sigma_max U V^T of the current W) and every lam="auto" (lam =
    sigma_max (t + 1) / (t - 1) of the current W, per head or per block; numeric lams of the same
    projection stay). A numeric identity correction is fixed and is left as it is. Refreshing moves
    W + C. The paper sets its correction once; docs/THEORY.md section 5 makes periodic refresh an option: calling
    ``refresh`` every N steps is the caller's (or the training harness's) choice, and between two calls C
    is fixed, a buffer that is not trained, exactly as in the paper.

    All or nothing: every new correction is computed before any is stored (an all-zero block under "auto"
    raises there), and if storing one fails, those already stored get their old buffers back, bit for bit.
    """
    require_module(model, "speccond.refresh")
    found = [item for item in attachments(model) if item.correction.follows_weights]
    fresh = []
    for item in found:
        try:
            fresh.append(item.correction.recomputed(item.stored_weight()))
        except ValueError as err:
            raise ValueError(f"speccond.refresh: {item.qualified_name}: {err}") from None
    kept = []  # each correction's buffers before its store: (name, the tensor, a copy of its values)
    try:
        for item, buffer in zip(found, fresh):
            correction = item.correction
            kept.append((correction, [(n, b, b.clone()) for n, b in correction.named_buffers(recurse=False)]))
            correction.store(buffer)
    except BaseException:
        for correction, buffers in reversed(kept):
            for name, tensor, values in buffers:
                setattr(correction, name, tensor)  # the very tensor, with its old values
                tensor.copy_(values)  # buffers are never trained: no autograd involved
        raise
    return len(found)


def remove(model: nn.Module, merge: bool = True) -> nn.Module:
    """Take every correction off ``model`` and return it.

    ``merge=True`` bakes W + C into the parameters: plain modules (class restored), same outputs, zero
    overhead. ``merge=False`` drops C and leaves the stored W (bit for bit the original weight if the model
    was not trained since ``init="add"``). The Parameter objects stay the same, so optimisers keep working.

    All or nothing: every W + C is computed before the first correction comes off (so arithmetic that
    fails on the weights' type, a DTensor under FSDP, raises with nothing changed), and if taking one off
    fails, every module already done is put back as it was: still conditioned, stored W, class, hooks and
    Parameters bit for bit and object for object. (The activation backend's merge writes W + C in place,
    so until ``remove`` returns it keeps a copy of each W.)
    """
    require_module(model, "speccond.remove")
    require_bool(merge, "speccond.remove: merge")
    found = list(attachments(model))
    if not found:
        raise ValueError("this model is not spectrally conditioned; nothing to remove")
    sharded = [item for item in found if item.backend == "weight" and is_sharded(item.stored_weight())]
    if sharded:
        raise ValueError(
            f"{sharded[0].qualified_name} is sharded (FSDP2), and removing a weight-backend correction moves the "
            "parameter back from parametrizations.weight.original, where FSDP keeps it: the model would no longer "
            "run. Gather a full state dict (torch.distributed.checkpoint.state_dict.get_model_state_dict with "
            "StateDictOptions(full_state_dict=True)), load it with speccond.load_conditioned into an unsharded "
            "model and remove there; or use the activation backend, whose remove works on a sharded model"
        )
    merged = [merged_weight(item) if merge else None for item in found]  # before anything is taken off
    undos = []  # each module as it was before its detach
    try:
        for item, weight in zip(found, merged):
            undos.append(Undo(item.module, item.stored_weight(), item.backend, writes=merge))
            detach(item, merge, weight)
    except BaseException:
        restore(undos)
        raise
    return model


def is_conditioned(model: nn.Module) -> bool:
    """True when any module of ``model`` carries a spectral correction."""
    require_module(model, "speccond.is_conditioned")
    return next(attachments(model), None) is not None


def _check_sites(model: nn.Module, sites: list[ProjectionSite], config: SpectralConfig) -> None:
    """Validate every site before touching any, so a bad one leaves the model untouched."""
    for site in sites:
        _check_not_rewritten_by_peft(model, site, config.backend)
        weight = getattr(site.module, site.param_name)
        site.layout.check_shape(weight.shape, site.qualified_name)
        if config.backend == "weight" and is_sharded(weight):
            raise ValueError(
                f"{site.qualified_name} is already sharded (a DTensor: FSDP2's fully_shard ran), and FSDP keeps "
                "each parameter where it found it, so the weight backend cannot move it under a parametrization; "
                "call speccond.apply before fully_shard, or use SpectralConfig(backend='activation'), which "
                "leaves the parameter in place"
            )
        if config.backend == "activation" and not site.activation_ok:
            raise ValueError(
                f"{site.qualified_name} ({site.source}) is read directly by its attention module, so the "
                "activation backend cannot reach it; use SpectralConfig(backend='weight')"
            )
        if parametrize.is_parametrized(site.module, site.param_name):
            raise ValueError(
                f"{site.qualified_name} already has a parametrization; remove it first or choose "
                "SpectralConfig(backend='activation') if the module is Linear-like"
            )


def _placement(model: nn.Module, site: ProjectionSite) -> tuple[Optional[nn.Module], str]:
    """(the module holding ``site.module``, its name there); (None, "") for the model itself."""
    if not site.module_name:
        return None, ""
    parent_name, _, child_name = site.module_name.rpartition(".")
    return model.get_submodule(parent_name), child_name


def _check_not_rewritten_by_peft(model: nn.Module, site: ProjectionSite, backend: str) -> None:
    """PEFT wraps a Linear (or Conv1D) and calls it: the correction on the wrapped layer then holds (see
    speccond.core.peft_layers), except on the activation backend under a tuner that rescales the output (IA3,
    DoRA). PEFT's other tuner layers (LoRA for nn.MultiheadAttention) delete and re-register the wrapped
    module's weights around every forward, which would take the correction off. Those are refused."""
    parent, _ = _placement(model, site)
    if not is_tuner_layer(parent):
        return
    reason = rescaling_reason(parent)
    if backend == "activation" and reason:
        raise ValueError(
            f"{site.qualified_name} ({site.source}) is wrapped by PEFT: {reason}, so the activation backend's "
            "x C^T would be rescaled with the output and no merge could keep it; use "
            "SpectralConfig(backend='weight'), with which the tuners tested (LoRA, DoRA, IA3, LoHa, LoKr, VeRA) "
            "merge exactly"
        )
    if not (isinstance(site.module, nn.Linear) or is_conv1d(site.module)):
        raise ValueError(
            f"{site.qualified_name} ({site.source}) is wrapped by PEFT's {type(parent).__name__}, which deletes "
            f"and re-registers the {type(site.module).__name__}'s weights around every forward, so no correction "
            "on them would survive; leave this module out of the LoRA config's target_modules (LoRA on Linear "
            "projections works with speccond on both backends), or out of speccond's targets"
        )


def _nothing_selected_message(model: nn.Module, config: SpectralConfig) -> str:
    found = attention_modules(model)
    listing = "\n".join(f"  {name or '<root>'}  ({adapter.name})" for name, _, adapter in found[:20])
    if len(found) > 20:
        listing += f"\n  ... and {len(found) - 20} more"
    targets = [p.pattern for p in config.targets] if config.targets else None
    exclude = [p.pattern for p in config.exclude] if config.exclude else None
    mixers = state_space_mixers(model)
    if not found and mixers:
        names = ", ".join(f"{name or '<root>'} ({type(module).__name__})" for name, module in mixers[:4])
        more = f" and {len(mixers) - 4} more" if len(mixers) > 4 else ""
        return (
            f"{type(model).__name__} has no softmax attention for speccond to condition: its mixers {names}{more} are "
            "state-space (or linear-recurrent) mixers, which compute no softmax over query-key scores q k^T (their "
            "in_proj is not a q/k/v projection), so the paper's correction has nothing to act on"
        )
    if not found:
        return (
            f"no attention projections found in {type(model).__name__} (targets={targets}, exclude={exclude}). "
            "Declare the layout of your projection, e.g. SpectralConfig(layouts={r'attn\\.qkv\\.weight$': "
            "ProjectionLayout(roles='qkv', num_heads=8)})"
        )
    return (
        f"targets={targets} / exclude={exclude} selected none of the attention modules found in "
        f"{type(model).__name__}:\n{listing}\nPatterns are re.search()ed against these names."
    )
