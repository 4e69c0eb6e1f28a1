"""speccond.verify: probe each conditioned attention module and confirm the layout is what it computes.

A layout names which rows of a weight are q, k, v and which head they belong to. If it is wrong (a
third-party module that interleaves heads, a block order we guessed wrongly, a module that reads its
weight directly past an activation hook), the correction lands in the wrong place silently. ``verify``
runs each conditioned attention module on its real input (captured from one forward of the model, with
the model's own defaults: masks, position embeddings, encoder states of a cross-attention), on a float64
copy whose projection rows it sets by hand, and checks four signatures of what it observes: the input of
the module's output projection when it has one (the attention context of every head, linear in v even
when the module adds a residual and a LayerNorm, as ALBERT does), else the module's output; where the
module normalises the attention output before projecting it (BitNet, DiffLlama, timm's scale_attn_norm),
the input of the child it calls after the projections at which the output is linear in v and not in q or k
(``_choose_observation``):

1. the correction takes effect: zeroing C changes the output;
2. values: the output is affine in a scaling of the rows declared as v, and not in those declared as
   q or k (the softmax), which must move it: q or k rows the output does not change with are reported
   as such (one key per query on this input, or rows the module does not read), not as values;
3. query-key pairing: with q and k biases zeroed, restoring the q rows of head h and the k rows of its
   key head h // g (g = q heads / k heads: 1 for multi-head, more for grouped-query attention) moves the
   output away from the all-zero q/k output, and restoring q of head h with a k head of another group
   does not (not testable with one key head: multi-query). This reads logits q k^T: where q or k alone
   changes the output (DeBERTa's relative-position keys from its own pos_key_proj) it is skipped;
4. value-head pairing: the v rows of value head j change the output only together with the q and k
   rows of a query head of group j.

A module with two sets of q/k/v (Longformer's query, key, value and query_global, key_global, value_global)
has each set checked on its own. verify fails where the forward reads rows left plain: a q/k/v-named
projection of the module, not conditioned, in a role conditioned elsewhere in it (one set declared, the
other not), that moves the output; or no conditioned q (or k) and none named as one (queries from a
mixture of experts' input projection): the paper's correction would be applied only in part.

A key/value cache the module is called with (a transformers ``Cache``: ``past_key_values``, BART's
``cache``) is copied when the module is called during the capture, before the module writes to it, and
each probe call gets its own copy of that snapshot: neither the user's cache nor the one the model
builds is written to, and every probe starts from the same state. A cache passed in the input must be
empty (cached keys were computed with the weights as they are and would not follow the probe): pass an
input that starts a sequence, not a continuation.

q and k enter the logits symmetrically, so the probe cannot tell a q/k swap apart; that matters only
when lam_q != lam_k.
"""
from __future__ import annotations

import copy
import re
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch import nn

from speccond.adapters import attention_modules
from speccond.checks import check_example_input, require_module
from speccond.core.backends import Attachment, attachments
from speccond.core.sharded import is_sharded
from speccond.adapters.unrecognised import declared_attention, every_layer_pattern
from speccond.layers import projection_bias


# Names of an attention module's output projection (a direct Linear or Conv1D child): the probe observes
# its input, the attention context (see _Context).
OUTPUT_PROJECTIONS = ("proj", "o_proj", "out_proj", "c_proj", "dense", "out_lin", "out", "to_out")


class VerificationError(ValueError):
    """A conditioned projection's layout does not match what its attention module computes."""


@dataclass
class VerifiedAttention:
    """What was checked on one attention module."""

    attention: str
    parameters: list[str]
    checks: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    observed: str = "the module's output"  # what the probe compares: the output, or its output projection's input


@dataclass(frozen=True)
class _Block:
    """The rows of one role in one attachment of the probe copy."""

    attachment: Attachment
    name: str  # qualified name of the parameter in the user's model
    role: str  # the role this block plays in the attention (q, k or v)
    rows: torch.Tensor  # (block_out,) output-axis indices, heads in order
    heads: int

    def describe(self) -> str:
        return f"{self.name} ({self.attachment.correction.layout.describe()})"

    def head_rows(self, head: int) -> torch.Tensor:
        width = self.rows.numel() // self.heads
        return self.rows[head * width : (head + 1) * width]


def verify(model: nn.Module, *example_args: Any, **example_kwargs: Any) -> list[VerifiedAttention]:
    """Probe every conditioned attention module of ``model``; raise VerificationError naming the first
    projection whose declared layout does not match.

    ``example_args``/``example_kwargs`` are one valid input of ``model`` (a small batch), passed as a user
    would call it: ``verify(model, images)``, ``verify(model, input_ids=ids, attention_mask=mask)``,
    ``verify(seq2seq, input_ids=ids, decoder_input_ids=dec)``. The model runs once in eval mode without
    gradients, with its own defaults (a decoder builds its KV cache as usual); neither the model, its
    training mode, nor a cache passed in the input is modified.

    Raises:
        ValueError: ``model`` is not conditioned, or the input carries a KV cache that already holds
            positions (pass the start of a sequence instead).
        VerificationError: a conditioned attention module was not called by the input, or a projection's
            declared layout does not match what its module computes.
    """
    require_module(model, "speccond.verify")
    found = list(attachments(model))
    if not found:
        raise ValueError("speccond.verify: this model is not spectrally conditioned; call speccond.apply first")
    sharded = [item.qualified_name for item in found if is_sharded(item.stored_weight())]
    if sharded:
        raise ValueError(
            f"speccond.verify probes by writing rows of W, but {sharded[0]} is sharded (a DTensor: FSDP2); "
            "verify the model before fully_shard (speccond.apply(model, config, verify_with=inputs) does)"
        )
    check_example_input(example_args, example_kwargs)
    groups = _group_by_attention(model, found)
    _check_no_filled_cache(example_args, example_kwargs)
    captured = _capture_inputs(model, list(groups), example_args, example_kwargs)
    results = []
    for path, members in groups.items():
        if path not in captured:
            raise VerificationError(
                f"speccond.verify: attention module '{path}' was not called by the example input; pass an input "
                "that runs every conditioned layer, or, where the model never runs it (a head that skips a "
                f"predictor), leave it plain: SpectralConfig(exclude=[r\"^{re.escape(path)}$\"])"
            )
        results.append(_probe(model.get_submodule(path), path, members, *captured[path]))
    return results


# -- grouping and input capture ------------------------------------------------------------------------
def _group_by_attention(model: nn.Module, found: list[Attachment]) -> dict[str, list[Attachment]]:
    recognised = [name for name, _, _ in attention_modules(model)]
    groups: dict[str, list[Attachment]] = {}
    for item in found:
        inside = [n for n in recognised if item.module_name == n or item.module_name.startswith(n + ".") or n == ""]
        if inside:
            path = max(inside, key=len)
        elif _is_leaf(item.module):
            path = declared_attention(item.module_name)  # a declared projection: its parent is the attention
        else:
            path = item.module_name
        groups.setdefault(path, []).append(item)
    return groups


def _is_leaf(module: nn.Module) -> bool:
    return not [m for m in module.children() if not _is_correction_machinery(m)]


def _is_correction_machinery(module: nn.Module) -> bool:
    from torch.nn.utils import parametrize

    from speccond.core.correction import SpectralCorrection

    return isinstance(module, (SpectralCorrection, parametrize.ParametrizationList, nn.ModuleDict))


def _capture_inputs(model: nn.Module, paths: list[str], args: tuple, kwargs: dict) -> dict[str, tuple]:
    """Each attention module's (args, kwargs) of its first call in one forward of ``model``: tensors
    detached and cloned, caches deep-copied at the call (before the module writes to them)."""
    captured: dict[str, tuple] = {}

    def hook_for(path: str):
        def hook(_module, hook_args, hook_kwargs):
            if path not in captured:
                captured[path] = (_snapshot(hook_args), _snapshot(hook_kwargs))

        return hook

    handles = [model.get_submodule(p).register_forward_pre_hook(hook_for(p), with_kwargs=True) for p in paths]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(*_fresh(args), **_fresh(kwargs))  # a cache the user passed is copied, never written to
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    return captured


def _is_cache(value: Any) -> bool:
    """A key/value cache object (transformers ``Cache``, ``EncoderDecoderCache``), found by what it does."""
    if isinstance(value, (torch.Tensor, nn.Module)):
        return False
    return callable(getattr(value, "update", None)) and callable(getattr(value, "get_seq_length", None))


def _snapshot(value: Any) -> Any:
    """A copy of a captured input that later calls cannot change: tensors detached and cloned, caches
    deep-copied as they are now."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if _is_cache(value):
        return copy.deepcopy(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_snapshot(v) for v in value)
    if isinstance(value, dict):
        return {k: _snapshot(v) for k, v in value.items()}
    return value


def _fresh(value: Any) -> Any:
    """``value`` with every cache in it replaced by its own deep copy (tensors are shared: nothing writes
    to them in place)."""
    if _is_cache(value):
        return copy.deepcopy(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_fresh(v) for v in value)
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    return value


def _caches(value: Any) -> Iterator[Any]:
    if _is_cache(value):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _caches(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _caches(v)


def _check_no_filled_cache(args: tuple, kwargs: dict) -> None:
    """Refuse an input cache that already holds positions: its keys and values were computed with the
    weights as they are, so they would not follow the rows the probe sets. A cache the model builds itself
    starts empty, and each module's snapshot is taken before that module writes its own entry."""
    for cache in _caches((args, kwargs)):
        try:
            held = int(cache.get_seq_length())
        except (IndexError, KeyError, TypeError, ValueError, AttributeError):
            continue
        updated = any(getattr(cache, "is_updated", {}).values())  # cross-attention keys already cached
        if held > 0 or updated:
            raise ValueError(
                f"speccond.verify: the example input carries a {type(cache).__name__} that already holds "
                f"{held} positions; cached keys and values do not follow the probe. Pass an input that starts "
                "a sequence: drop past_key_values (the model builds its own cache as usual)"
            )


def _to_double(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.double() if value.is_floating_point() else value
    if isinstance(value, (tuple, list)):
        return type(value)(_to_double(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_double(v) for k, v in value.items()}
    return value


# -- the probe -------------------------------------------------------------------------------------------
def _probe(attention: nn.Module, path: str, members: list[Attachment], args: tuple, kwargs: dict) -> VerifiedAttention:
    probe = copy.deepcopy(attention).double().eval()
    prefix = f"{path}." if path else ""
    probe_found = {(a.module_name, a.param_name): a for a in attachments(probe)}
    names = []
    every: list[_Block] = []
    for item in members:
        relative = item.module_name[len(prefix):] if item.module_name.startswith(prefix) else ""
        twin = probe_found[(relative, item.param_name)]
        names.append(item.qualified_name)
        layout = twin.correction.layout
        for stored_role, acts_as in zip(layout.roles, twin.correction.acts_as):
            rows = layout.block_rows(stored_role, twin.correction.out_features)
            every.append(_Block(twin, item.qualified_name, acts_as, rows, layout.heads(stored_role)))
    sets = _qkv_sets(every, path)
    blocks = sets[0]  # the set whose signatures choose the observed point
    result = VerifiedAttention(path, names)
    args, kwargs = _to_double(args), _to_double(kwargs)
    context = _Context(probe, [a.module for a in probe_found.values()])

    def call() -> Any:
        # Each call gets its own copy of the captured cache state, so no probe sees another's keys.
        return probe(*_fresh(args), **_fresh(kwargs))

    def run() -> torch.Tensor:
        return context.observed(call())

    for one_set in sets:
        _check_head_counts(attention, path, one_set)
    with torch.no_grad():
        _first_float64_run(run, attention, path)
        _choose_observation(context, call, blocks)
        result.observed = context.describe()
        _check_correction_takes_effect(probe_found.values(), names, run, result, _same_for_every_token(args, kwargs))
        _check_nothing_read_is_plain(probe, path, every, run)
        skip = next((b.attachment.correction.probe_skip for b in every if b.attachment.correction.probe_skip), "")
        if skip:
            result.skipped.append(f"role and head signatures: {skip}")
            return result
        for one_set in sets:
            _zero_qk_biases(one_set, result, probe)
            _check_values_are_linear(one_set, run, result)
            _check_head_pairing(one_set, run, result)
    return result


def _qkv_sets(blocks: list[_Block], path: str) -> list[dict[str, _Block]]:
    """The conditioned blocks as sets of {role: block}: one set, unless a role is conditioned twice (a module with
    two sets of projections, Longformer's query, key, value and query_global, key_global, value_global), then one
    per set, told apart by the projections' names without their roles (``projection_set``)."""
    from speccond.adapters.unrecognised import projection_set

    roles = [b.role for b in blocks]
    if len(set(roles)) == len(roles):
        return [{b.role: b for b in blocks}]
    sets: dict[str, dict[str, _Block]] = {}
    for block in blocks:
        item = block.attachment
        key = projection_set(item.module_name.rpartition(".")[2] if item.module_name else item.param_name)
        one_set = sets.setdefault(key, {})
        if block.role in one_set:
            raise VerificationError(
                f"{block.describe()} and {one_set[block.role].describe()} are both declared as {block.role} of the "
                f"attention module '{path}', and their names do not tell which q, k and v act together; verify "
                "cannot check such a layout: read the forward, and apply without verify_with if it is right"
            )
        one_set[block.role] = block
    return list(sets.values())


def _check_nothing_read_is_plain(probe: nn.Module, path: str, blocks: list[_Block], run) -> None:
    """Fail where the module's forward reads q, k or v rows that are left plain: a q/k/v-named projection of the
    module (``speccond.adapters.unrecognised``'s names) that is not conditioned, plays a role conditioned
    elsewhere in the module (a second set's query_global beside a conditioned query), and moves the output when
    zeroed; or no conditioned q (or k) and no projection named as one (queries from a mixture of experts' input
    projection), where only part of the paper's correction was applied."""
    from speccond.adapters.unrecognised import owned_projections

    conditioned = {(id(b.attachment.module), b.attachment.param_name) for b in blocks}
    roles = {b.role for b in blocks}
    prefix = f"{path}." if path else ""
    found = owned_projections("", probe)
    named = {role for _, p in found for role in p.roles}
    missing = [role for role in "qk" if role not in roles and role not in named]
    if missing:
        raise VerificationError(
            f"{path}: no projection of the module is conditioned as {' or '.join(missing)}, and none is named as one: "
            f"its {' and '.join({'q': 'queries', 'k': 'keys'}[r] for r in missing)} come from weights no layout "
            "declares (heads as a mixture of experts read them from the experts' input projection), so conditioning "
            f"{', '.join(sorted(roles))} alone is not the paper's correction; leave the module plain: "
            f'SpectralConfig(exclude=[r"{every_layer_pattern(path)}"])'
        )
    reference = run()
    for (owner_id, param_name), projection in found:
        if (owner_id, param_name) in conditioned or not set(projection.roles) & roles:
            continue
        owner = next(m for m in probe.modules() if id(m) == owner_id)
        weight = getattr(owner, param_name)
        saved = weight.detach().clone()
        weight.data.zero_()
        moved = not _same(run(), reference)
        weight.data.copy_(saved)
        if moved:
            raise VerificationError(
                f"{prefix}{projection.qualified_name}: the forward reads it as {projection.roles} (zeroing it moves the "
                f"output) beside the conditioned {', '.join(sorted(set(projection.roles) & roles))} of '{path}', but it "
                "is left plain: declare its layout too (a second set of q/k/v gets its own lines), or leave the module "
                f'plain: SpectralConfig(exclude=[r"{every_layer_pattern(path)}"])'
            )


def _first_float64_run(run, attention: nn.Module, path: str) -> None:
    """The probe's first call, on the float64 copy; a module whose own code fails in float64 (XGLM builds its
    mask's minimum, a float64 number, into a float32 tensor) is refused in one line instead of its traceback."""
    try:
        run()
    except (RuntimeError, TypeError) as error:
        message = str(error).strip()
        first_line = message.splitlines()[0] if message else type(error).__name__
        raise VerificationError(
            f"{path} ({type(attention).__name__}): verify runs a float64 copy of the module on the example input, and "
            f"the module's own code fails in float64 ({type(error).__name__}: {first_line}), so its layout cannot be "
            "checked here; apply without verify_with (the layout then rests on the adapter alone), or leave it plain: "
            f"SpectralConfig(exclude=[r\"{every_layer_pattern(path)}\"])"
        ) from None


class _Context:
    """What the probe observes: the attention context, where v acts linearly.

    By default the input of the module's output projection when it has one, else its output. The output
    projection is a direct Linear (or Conv1D) child named as one (``OUTPUT_PROJECTIONS``: timm ``proj``, Llama
    ``o_proj``, BART ``out_proj``, GPT-2 ``c_proj``, ALBERT ``dense``), called after every conditioned
    projection in the forward. Its input, the attention context softmax(q k^T) v of every head, is linear in v
    even when the module adds a residual and a LayerNorm after the projection (ALBERT), which its output is
    not. Other Linear children (DeBERTa's ``pos_key_proj`` on the relative embeddings) are not it. A module
    without one (BERT's self-attention, nn.MultiheadAttention, which reads ``out_proj.weight`` directly) is
    observed at its output.

    Where the module normalises the attention output before projecting it (BitNet's ``attn_sub_norm``,
    DiffLlama's per-head ``groupnorm``, timm's ``scale_attn_norm``), neither is linear in v; ``chosen`` (set
    by ``_choose_observation``) then names another direct child called after the last projection (the norm),
    the latest one whose input is linear in v and not in q or k, and its input is observed instead.
    """

    def __init__(self, probe: nn.Module, projections: list[nn.Module]) -> None:
        from speccond.adapters.base import is_conv1d

        self.calls: list[tuple[str, torch.Tensor]] = []  # (child, its input) called after the last projection
        self.output_projection = ""  # the child named as one, if any
        self.default = ""  # the output projection when its input was the default point of the last call, else ""
        self.chosen: str | None = None  # the child whose input is observed; None: the default
        projection_ids = {id(m) for m in projections}
        for module in projections:
            if module is not probe:
                module.register_forward_pre_hook(self._projection_called)
        for name, child in probe.named_children():
            if id(child) in projection_ids:
                continue
            child.register_forward_pre_hook(self._hook_for(name))
            linear = isinstance(child, nn.Linear) or is_conv1d(child)
            if name in OUTPUT_PROJECTIONS and linear and not self.output_projection:
                self.output_projection = name

    def _projection_called(self, _module: nn.Module, _args: tuple) -> None:
        self.calls = []  # only children called after the last projection see the attention context

    def _hook_for(self, name: str):
        def hook(_module: nn.Module, args: tuple) -> None:
            if args and isinstance(args[0], torch.Tensor):
                self.calls.append((name, args[0].clone()))

        return hook

    def candidates(self, output: Any) -> dict[str, torch.Tensor]:
        """Every point the probe could observe on this call, most preferred first: the output projection's
        input (or the module's output, under ""), then the inputs of the other children called after the last
        projection, latest first (each child's first such call)."""
        calls, self.calls = self.calls, []
        seen: dict[str, torch.Tensor] = {}
        for name, tensor in calls:
            seen.setdefault(name, tensor)
        default = seen.pop(self.output_projection) if self.output_projection in seen else None
        self.default = self.output_projection if default is not None else ""
        found = {"": default if default is not None else _first_tensor(output)}
        found.update((name, seen[name]) for name in reversed(list(seen)))
        return found

    def observed(self, output: Any) -> torch.Tensor:
        found = self.candidates(output)
        return found.get(self.chosen, found[""]) if self.chosen else found[""]

    def describe(self) -> str:
        if self.chosen:
            return f"the input of its child '{self.chosen}', called after the projections"
        if self.default:
            return f"the input of its output projection '{self.default}'"
        return "the module's output"


def _choose_observation(context: _Context, call, blocks: dict[str, _Block]) -> None:
    """Observe where v acts linearly: the default point (``_Context``) when the output there is affine in the
    v rows and moves with them, else the first other candidate that is the attention context: affine in v,
    moving with q and k but not affine in them (the input of a norm the module applies to the attention
    output; a q norm's input, linear in q and blind to k, is not it). Nothing changes where q, k or v is not
    conditioned or no candidate qualifies (the values check then reports it)."""
    if not {"q", "k", "v"} <= blocks.keys():
        return
    seen = {"v": _candidates_scaled(context, call, blocks["v"])}
    if _affine_at("", seen["v"]) or len(seen["v"][0]) == 1:
        return  # the default point is linear in v (nearly every module), or there is no other
    seen.update((role, _candidates_scaled(context, call, blocks[role])) for role in "qk")
    for name in list(seen["v"][0])[1:]:
        if _affine_at(name, seen["v"]) is True and _affine_at(name, seen["q"]) is _affine_at(name, seen["k"]) is False:
            context.chosen = name
            return


def _candidates_scaled(context: _Context, call, block: _Block) -> list[dict[str, torch.Tensor]]:
    """Every candidate point (``_Context.candidates``) with the block's rows scaled by 0, 1 and 2."""
    original = _effective_rows(block.attachment, block.rows)
    seen = []
    for scale in (0.0, 1.0, 2.0):
        _set_effective_rows(block.attachment, block.rows, scale * original)
        seen.append(context.candidates(call()))
    _set_effective_rows(block.attachment, block.rows, original)
    return seen


def _affine_at(name: str, runs: list[dict[str, torch.Tensor]]) -> bool | None:
    """Whether the point ``name`` is affine in the scaled rows (``_affinity``); None where it does not move with
    them, is not finite, or is not seen alike on every run."""
    outputs = [found.get(name) for found in runs]
    if any(o is None or o.shape != outputs[0].shape for o in outputs):
        return None
    affine, change = _affinity(outputs, 1.0)
    return None if change is None or change <= 1e-9 else affine


# Attributes in which attention modules keep their head counts: query heads, key/value heads, and query heads
# per key/value head (transformers' num_key_value_groups).
_QUERY_HEAD_ATTRS = ("num_heads", "num_attention_heads", "n_heads", "n_head")
_KV_HEAD_ATTRS = ("num_key_value_heads", "num_kv_heads", "kv_n_heads", "n_kv_heads", "kv_heads")


def _check_head_counts(attention: nn.Module, path: str, blocks: dict[str, _Block]) -> None:
    """The declared head counts agree with the ones the module keeps: q with its query head count, k and v
    with its key/value head count (or query heads over num_key_value_groups; or, when it keeps only a query
    head count, the same: no key/value head count means multi-head attention). The probes alone cannot see
    every wrong count: with one declared head the pairing checks have nothing to cross, and a count that
    splits rows on a multiple of the true width still pairs up."""
    query = _count(attention, _QUERY_HEAD_ATTRS)
    kv = _count(attention, _KV_HEAD_ATTRS)
    groups = _count(attention, ("num_key_value_groups",))
    expected = {"q": query}
    if kv is not None:
        expected["k"] = expected["v"] = kv
    elif groups is not None and "q" in blocks and blocks["q"].heads % groups == 0:
        expected["k"] = expected["v"] = blocks["q"].heads // groups
    elif query is not None:
        expected["k"] = expected["v"] = query
    for role, block in blocks.items():
        want = expected.get(role)
        if want is not None and block.heads != want:
            kind = "query" if role == "q" else "key/value"
            raise VerificationError(
                f"{block.describe()}: its {role} block is declared with {block.heads} heads, but the attention "
                f"module '{path}' ({type(attention).__name__}) has {want} {kind} heads; declare "
                f"{'num_heads' if role == 'q' or 'q' not in block.attachment.correction.layout.roles else 'num_kv_heads'}"
                f"={want}"
            )


def _count(module: nn.Module, names: tuple[str, ...]) -> int | None:
    for name in names:
        value = getattr(module, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _same_for_every_token(args: tuple, kwargs: dict) -> bool:
    """Whether the module's first input of tokens (B, N, D), N > 1, holds the same vector at every token (all zeros:
    DETR's first decoder self-attention, whose queries start at zero): then so do its values, and its output
    cannot change with q, k or any correction, on this input."""
    tokens = next((t for t in (*args, *kwargs.values()) if torch.is_tensor(t) and t.is_floating_point() and t.dim() == 3), None)
    return tokens is not None and tokens.shape[1] > 1 and bool((tokens == tokens[:, :1]).all())


def _check_correction_takes_effect(
    found: Iterator[Attachment], names: list[str], run, result: VerifiedAttention, same_tokens: bool = False
) -> None:
    if same_tokens and _same(run(), _zeroed_all_run(found, run)):
        raise VerificationError(
            f"{result.attention}: its input on the example holds the same vector at every token (all zeros where "
            "the queries of DETR's first decoder layer start), so its values do too and its output cannot change "
            "with q, k or the correction here; if the model always feeds it such an input, the correction does "
            f"nothing there: leave it plain, SpectralConfig(exclude=[r\"^{re.escape(result.attention)}$\"])"
        )
    for item in found:
        reference = run()
        if not bool(torch.isfinite(reference).any()):
            raise VerificationError(
                f"{result.attention}: the attention output is not finite anywhere on the example input; check "
                "that input (and the weights, for inf or NaN) before verifying"
            )
        with _correction_zeroed(item):
            without = run()
        if not bool(reference.any()):
            raise VerificationError(
                f"{result.attention}: the attention output is zero everywhere on the example input, so it reads "
                "none of its weights here (transformers' MRA gives zeros on the CPU, where its kernel is missing); "
                "verify on the device and input where this attention runs"
            )
        if _same(reference, without):
            name = next((n for n in names if n.endswith(item.qualified_name)), item.qualified_name)
            why = (
                "the module probably reads the weight directly past the activation backend: use backend='weight'"
                if item.backend == "activation"
                else "either each query sees a single key on this input (one token, or a mask that hides the "
                "rest), where softmax gives 1 whatever q and k are, so verify with a longer input, or the module "
                "computes from something other than module.weight"
            )
            raise VerificationError(f"{name}: the correction does not change the attention output; {why}")
    result.checks.append("correction takes effect")


def _zeroed_all_run(found: Iterator[Attachment], run) -> torch.Tensor:
    """The output with every correction of the module zeroed."""
    with ExitStack() as stack:
        for item in found:
            stack.enter_context(_correction_zeroed(item))
        return run()


def _check_values_are_linear(blocks: dict[str, _Block], run, result: VerifiedAttention) -> None:
    """The output is affine in a scaling of the v rows, not in the q or k rows. A module that clamps its
    projection output (DBRX ``clip_qkv``) is affine in v only while the values stay inside the clamp: v rows
    that are not affine at their own magnitude are probed again at ``_SMALL`` of it, and pass with a note
    when affine there (q or k rows are never affine, however small)."""
    for role, block in blocks.items():
        affine, change = _affine_in_rows(block, run, 1.0)
        where = f"rows of {block.describe()} expected to act as {role}"
        if role == "v" and change > 1e-9 and not affine:
            affine, change = _affine_in_rows(block, run, _SMALL)
            if affine and change > 1e-9:
                result.skipped.append(
                    f"values at their own magnitude: the output of {block.name} is affine in its v rows only near "
                    f"zero (checked at {_SMALL:g} of them): the module clamps or saturates its projection output "
                    "(as DBRX's clip_qkv does)"
                )
        if role == "v" and (not affine or change <= 1e-9):
            raise VerificationError(
                f"{where}: the output is not linear in them, so either they are not the values (check the layout's "
                "roles and arrangement: 'blocked', 'per_head' or 'grouped') or the module transforms v after "
                "projecting it (a norm on v, as Gemma 4's vision attention has), where verify cannot confirm a layout: "
                "read the forward, and apply without verify_with if the layout is right"
            )
        if role in "qk" and change <= 1e-9:
            raise VerificationError(
                f"{where}: the output does not change with them on this input; either each query sees a single "
                f"key here (one token, or a mask that hides the rest), where softmax gives 1 whatever q and k are, "
                "so verify with a longer input, or the module does not read these rows"
            )
        if role in "qk" and affine:
            raise VerificationError(
                f"{where}: the output is linear in them, so they act as values, not as {role}; check the "
                "layout's roles and arrangement"
            )
    result.checks.append("values linear, queries and keys not")


_SMALL = 1e-3  # the scale of the second values probe, for modules that clamp their projection output


def _affine_in_rows(block: _Block, run, step: float) -> tuple[bool, float]:
    """(whether the output is affine in the block's rows scaled by 0, step and 2 step, the largest change
    between the first two), the rows restored afterwards. Changes are relative to step, so a small step
    is judged as a unit one."""
    original = _effective_rows(block.attachment, block.rows)
    outputs = []
    for scale in (0.0, step, 2 * step):
        _set_effective_rows(block.attachment, block.rows, scale * original)
        outputs.append(run())
    _set_effective_rows(block.attachment, block.rows, original)
    affine, change = _affinity(outputs, step)
    if change is None:
        raise VerificationError(f"{block.describe()}: the attention output is not finite anywhere")
    return affine, change


def _affinity(outputs: list[torch.Tensor], step: float) -> tuple[bool, float | None]:
    """(whether outputs at scales 0, step and 2 step lie on a line, the largest change between the first two
    relative to step), over the entries finite in all three; (False, None) where none is."""
    finite = torch.stack([torch.isfinite(o) for o in outputs]).all(0)  # fully masked rows may be NaN
    outputs = [o[finite] for o in outputs]  # each (n_finite,)
    if not outputs[0].numel():
        return False, None
    change = float((outputs[1] - outputs[0]).abs().max()) / step
    curvature = float((outputs[2] - 2 * outputs[1] + outputs[0]).abs().max()) / step
    return curvature <= 1e-7 * (change + 1e-12), change


def _check_head_pairing(blocks: dict[str, _Block], run, result: VerifiedAttention) -> None:
    """Query head h pairs with key head h // g and value head h // g', g = q heads / k heads (grouped-query
    attention; 1 for multi-head); the q and k blocks may sit in different projections."""
    if not {"q", "k"} <= blocks.keys():
        result.skipped.append("head pairing (needs both q and k conditioned)")
        return
    q, k, v = blocks["q"], blocks["k"], blocks.get("v")
    if q.heads < 2:
        result.skipped.append("head pairing (one head)")
        return
    q_width, k_width = q.head_rows(0).numel(), k.head_rows(0).numel()
    if q_width != k_width:
        raise VerificationError(
            f"{k.describe()}: its {k.heads} heads are {k_width} rows wide, the {q.heads} query heads of "
            f"{q.describe()} {q_width}: a query head and its key head have the same width; check num_heads "
            "and num_kv_heads"
        )
    group = _group_size(q, k)
    v_group = _group_size(q, v) if v is not None else 0
    saved = {role: _effective_rows(b.attachment, b.rows) for role, b in blocks.items()}

    def restore(block: _Block, head: int) -> None:
        rows = block.head_rows(head)
        width = rows.numel()
        _set_effective_rows(block.attachment, rows, saved[block.role][head * width : (head + 1) * width])

    def zero_qk() -> None:
        for block in (q, k):
            _set_effective_rows(block.attachment, block.rows, torch.zeros_like(saved[block.role]))

    def restore_qk(head: int) -> None:
        restore(q, head)
        restore(k, head // group)

    alone = _acts_alone(q, k, saved, run, zero_qk)
    if alone:
        for role, block in blocks.items():
            _set_effective_rows(block.attachment, block.rows, saved[role])
        result.skipped.append(
            f"head pairing: with the {'k' if alone == 'q' else 'q'} rows zeroed the {alone} rows still change the "
            "output, so the logits have terms in one of them alone (relative-position keys or queries from a "
            "projection that is not conditioned, as DeBERTa's pos_key_proj / pos_query_proj); the pairing "
            "signatures assume logits q k^T only"
        )
        return
    if k.heads < 2:
        result.skipped.append(
            f"crossed q/k heads ({q.heads} query heads share one key head, multi-query: no other key head to "
            "cross with); each query head is checked to pair with it"
        )
    for head in range(q.heads):
        key = head // group
        other = (key + 1) % k.heads  # a key head of another group (none when there is one key head)
        zero_qk()
        baseline = run()
        restore(q, head)
        crossed = baseline
        if k.heads > 1:
            restore(k, other)
            crossed = run()
        restore(k, key)
        paired = run()
        if _same(paired, baseline) or not _same(crossed, baseline):
            raise VerificationError(
                f"{q.describe()}: q rows of head {head} do not pair with the k rows of head {key} in "
                f"{k.describe()} (query head h uses key head h // {group}: {q.heads} q heads, {k.heads} k "
                "heads); check num_heads, num_kv_heads and arrangement"
            )
        if v is not None:
            _check_value_head(v, saved["v"], head, v_group, run, zero_qk, restore_qk)
    if v is not None and v.heads < 2:
        result.skipped.append("crossed value heads (one value head: no other value head to cross with)")
    for role, block in blocks.items():
        _set_effective_rows(block.attachment, block.rows, saved[role])
    result.checks.append("q/k/v rows of each head pair up")


def _acts_alone(q: _Block, k: _Block, saved: dict[str, torch.Tensor], run, zero_qk) -> str:
    """"q" or "k" when restoring that block alone, the other zeroed, changes the output; else "".

    With logits q k^T only, zero keys (or zero queries) give zero logits whatever the other holds."""
    zero_qk()
    baseline = run()
    for block in (q, k):
        zero_qk()
        _set_effective_rows(block.attachment, block.rows, saved[block.role])
        if not _same(run(), baseline):
            return block.role
    return ""


def _group_size(q: _Block, other: _Block) -> int:
    """Query heads per head of ``other`` (a k or v block)."""
    if other.heads > q.heads or q.heads % other.heads:
        raise VerificationError(
            f"{other.describe()}: {other.heads} {other.role} heads cannot serve the {q.heads} query heads of "
            f"{q.describe()}: the key/value head count must divide the query head count; check num_heads "
            "and num_kv_heads"
        )
    return q.heads // other.heads


def _check_value_head(v: _Block, saved_v: torch.Tensor, head: int, group: int, run, zero_qk, restore_qk) -> None:
    """Keeping only value head head // group (the one query head ``head`` reads), attending with ``head``'s
    q and k changes the output; keeping only another value head, it does not."""
    width = v.head_rows(0).numel()
    only = lambda h: _set_effective_rows(  # noqa: E731
        v.attachment, v.rows, _keep_head(saved_v, h, width)
    )
    value_head = head // group
    cases = [(value_head, True)]
    if v.heads > 1:
        cases.append(((value_head + 1) % v.heads, False))
    for kept, should_change in cases:
        only(kept)
        zero_qk()
        uniform = run()
        restore_qk(head)
        attended = run()
        if _same(attended, uniform) == should_change:
            raise VerificationError(
                f"{v.describe()}: v rows of head {kept} {'do not act' if should_change else 'act'} through the "
                f"attention of query head {head}, which reads value head {value_head} (query head h reads value "
                f"head h // {group}: {v.heads * group} q heads, {v.heads} v heads); check num_heads, num_kv_heads "
                "and arrangement"
            )
    _set_effective_rows(v.attachment, v.rows, saved_v)


def _keep_head(rows: torch.Tensor, head: int, width: int) -> torch.Tensor:
    kept = torch.zeros_like(rows)
    kept[head * width : (head + 1) * width] = rows[head * width : (head + 1) * width]
    return kept


# -- row access on the probe ------------------------------------------------------------------------------
def _effective_rows(item: Attachment, rows: torch.Tensor) -> torch.Tensor:
    layout = item.correction.layout
    return layout.out_in(item.effective_weight())[rows].clone()  # (len(rows), in)


def _set_effective_rows(item: Attachment, rows: torch.Tensor, values: torch.Tensor) -> None:
    """Make W + C equal ``values`` on ``rows`` by writing values - C into the stored W."""
    layout = item.correction.layout
    stored = layout.out_in(item.stored_weight())  # (out, in) view
    correction = item.correction.dense_out_in(stored.dtype)
    stored[rows] = values - correction[rows]


@contextmanager
def _correction_zeroed(item: Attachment):
    buffer = item.correction.matrix if item.correction.kind == "svd" else item.correction.values
    saved = buffer.clone()
    buffer.zero_()
    try:
        yield
    finally:
        buffer.copy_(saved)


def _zero_qk_biases(blocks: dict[str, _Block], result: VerifiedAttention, attention: nn.Module) -> None:
    """Zero the q and k biases, so zeroed q or k rows give exactly zero queries or keys: the projection's
    own bias, or the attention module's separate ``q_bias`` / ``k_bias`` of a bias-free fused weight (timm
    EVA, BEiT, SwinV2, which add them with F.linear)."""
    for role in "qk":
        if role not in blocks:
            continue
        block = blocks[role]
        bias = _bias_rows(block)
        separate = getattr(attention, f"{role}_bias", None)
        if bias is None and isinstance(separate, torch.Tensor) and separate.numel() == block.rows.numel():
            separate.data.zero_()  # on the probe copy
            continue
        if bias is None:
            result.skipped.append(f"no {role} bias found on {block.name}; assumed none")
            continue
        bias.zero_()


def _bias_rows(block: _Block) -> _RowsView | None:
    item = block.attachment
    layout = item.correction.layout
    bias = projection_bias(item.module, item.param_name, item.correction.out_features, layout.roles)
    return None if bias is None else _RowsView(bias, block.rows)


class _RowsView:
    """Zeroes chosen entries of a bias in place."""

    def __init__(self, data: torch.Tensor, rows: torch.Tensor) -> None:
        self.data, self.rows = data, rows

    def zero_(self) -> None:
        self.data[self.rows] = 0


def _first_tensor(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict):
        output = list(output.values())
    for value in output:
        if isinstance(value, torch.Tensor):
            return value
    raise TypeError(f"speccond.verify: the attention module returned no tensor ({type(output).__name__})")


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal to 1e-9 relative. Non-finite entries (a fully masked query row of some attention kernels)
    must sit at the same places in both and are not compared."""
    finite = torch.isfinite(a)
    if not torch.equal(finite, torch.isfinite(b)):
        return False
    a, b = a[finite], b[finite]  # (n_finite,)
    if a.numel() == 0:
        return True
    scale = float(a.abs().max()) + 1.0
    return bool((a - b).abs().max() <= 1e-9 * scale)
