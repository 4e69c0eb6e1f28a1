"""speccond.verify: probe each conditioned attention module and confirm the layout is what it computes.

A layout names which rows of a weight are q, k, v and which head they belong to. If it is wrong (a
third-party module that interleaves heads, a block order we guessed wrongly, a module that reads its
weight directly past an activation hook), the correction lands in the wrong place silently. ``verify``
runs each conditioned attention module on its real input (captured from one forward of the model),
on a float64 copy whose projection rows it sets by hand, and checks four signatures:

1. the correction takes effect: zeroing C changes the output;
2. values: the output is affine in a scaling of the rows declared as v, and not in those declared as
   q or k (the softmax);
3. query-key pairing: with q and k biases zeroed, restoring the q and k rows of head h moves the
   output away from the all-zero q/k output, and restoring q of head h with k of another head does not;
4. value-head pairing: the v rows of head h change the output only together with head h's q and k.

q and k enter the logits symmetrically, so the probe cannot tell a q/k swap apart; that matters only
when lam_q != lam_k.
"""
from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch import nn

from speccond.adapters import attention_modules
from speccond.backends import Attachment, attachments
from speccond.layers import projection_bias


class VerificationError(ValueError):
    """A conditioned projection's layout does not match what its attention module computes."""


@dataclass
class VerifiedAttention:
    """What was checked on one attention module."""

    attention: str
    parameters: list[str]
    checks: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


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
    projection whose declared layout does not match. ``example_args``/``example_kwargs`` are one valid
    input of ``model`` (a small batch); the model itself is not modified."""
    found = list(attachments(model))
    if not found:
        raise ValueError("speccond.verify: this model is not spectrally conditioned; call speccond.apply first")
    groups = _group_by_attention(model, found)
    captured = _capture_inputs(model, list(groups), example_args, example_kwargs)
    results = []
    for path, members in groups.items():
        if path not in captured:
            raise VerificationError(
                f"speccond.verify: attention module '{path}' was not called by the example input; "
                "pass an input that runs every conditioned layer"
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
            path = item.module_name.rpartition(".")[0]  # a declared projection: its parent is the attention
        else:
            path = item.module_name
        groups.setdefault(path, []).append(item)
    return groups


def _is_leaf(module: nn.Module) -> bool:
    return not [m for m in module.children() if not _is_correction_machinery(m)]


def _is_correction_machinery(module: nn.Module) -> bool:
    from torch.nn.utils import parametrize

    from speccond.correction import SpectralCorrection

    return isinstance(module, (SpectralCorrection, parametrize.ParametrizationList, nn.ModuleDict))


def _capture_inputs(model: nn.Module, paths: list[str], args: tuple, kwargs: dict) -> dict[str, tuple]:
    captured: dict[str, tuple] = {}

    def hook_for(path: str):
        def hook(_module, hook_args, hook_kwargs):
            captured.setdefault(path, (_detach(hook_args), _detach(hook_kwargs)))

        return hook

    handles = [model.get_submodule(p).register_forward_pre_hook(hook_for(p), with_kwargs=True) for p in paths]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    return captured


def _detach(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_detach(v) for v in value)
    if isinstance(value, dict):
        return {k: _detach(v) for k, v in value.items()}
    return value


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
    blocks: dict[str, _Block] = {}
    for item in members:
        relative = item.module_name[len(prefix):] if item.module_name.startswith(prefix) else ""
        twin = probe_found[(relative, item.param_name)]
        names.append(item.qualified_name)
        layout = twin.correction.layout
        for stored_role, acts_as in zip(layout.roles, twin.correction.acts_as):
            rows = layout.block_rows(stored_role, twin.correction.out_features)
            blocks[acts_as] = _Block(twin, item.qualified_name, acts_as, rows, layout.heads(stored_role))
    result = VerifiedAttention(path, names)
    args, kwargs = _to_double(args), _to_double(kwargs)
    run = lambda: _first_tensor(probe(*args, **kwargs))  # noqa: E731
    with torch.no_grad():
        _check_correction_takes_effect(probe_found.values(), names, run, result)
        skip = next((b.attachment.correction.probe_skip for b in blocks.values() if b.attachment.correction.probe_skip), "")
        if skip:
            result.skipped.append(f"role and head signatures: {skip}")
            return result
        _zero_qk_biases(blocks, result)
        _check_values_are_linear(blocks, run, result)
        _check_head_pairing(blocks, run, result)
    return result


def _check_correction_takes_effect(found: Iterator[Attachment], names: list[str], run, result: VerifiedAttention) -> None:
    for item in found:
        reference = run()
        with _correction_zeroed(item):
            without = run()
        if _same(reference, without):
            name = next((n for n in names if n.endswith(item.qualified_name)), item.qualified_name)
            raise VerificationError(
                f"{name}: the correction does not change the attention output; the module "
                f"probably reads the weight directly past the {item.backend} backend: use backend='weight'"
            )
    result.checks.append("correction takes effect")


def _check_values_are_linear(blocks: dict[str, _Block], run, result: VerifiedAttention) -> None:
    for role, block in blocks.items():
        original = _effective_rows(block.attachment, block.rows)
        outputs = []
        for scale in (0.0, 1.0, 2.0):
            _set_effective_rows(block.attachment, block.rows, scale * original)
            outputs.append(run())
        _set_effective_rows(block.attachment, block.rows, original)
        change = (outputs[1] - outputs[0]).abs().max()
        curvature = (outputs[2] - 2 * outputs[1] + outputs[0]).abs().max()
        affine = bool(curvature <= 1e-7 * (change + 1e-12))
        where = f"rows of {block.describe()} expected to act as {role}"
        if role == "v" and (not affine or change <= 1e-9):
            raise VerificationError(
                f"{where}: the output is not linear in them, so they are not the values; check the layout's "
                "roles and arrangement ('blocked' vs 'per_head')"
            )
        if role in "qk" and affine:
            raise VerificationError(
                f"{where}: the output is linear in them, so they act as values, not as {role}; check the "
                "layout's roles and arrangement"
            )
    result.checks.append("values linear, queries and keys not")


def _check_head_pairing(blocks: dict[str, _Block], run, result: VerifiedAttention) -> None:
    if not {"q", "k"} <= blocks.keys():
        result.skipped.append("head pairing (needs both q and k conditioned)")
        return
    q, k = blocks["q"], blocks["k"]
    heads = q.heads
    if heads < 2:
        result.skipped.append("head pairing (one head)")
        return
    saved = {role: _effective_rows(b.attachment, b.rows) for role, b in blocks.items()}

    def restore(block: _Block, head: int) -> None:
        rows = block.head_rows(head)
        full = saved[block.role]
        width = rows.numel()
        _set_effective_rows(block.attachment, rows, full[head * width : (head + 1) * width])

    def zero_qk() -> None:
        for block in (q, k):
            _set_effective_rows(block.attachment, block.rows, torch.zeros_like(saved[block.role]))

    for head in range(heads):
        other = (head + 1) % heads
        zero_qk()
        baseline = run()
        restore(q, head)
        restore(k, other)
        crossed = run()
        restore(k, head)
        paired = run()
        if _same(paired, baseline) or not _same(crossed, baseline):
            raise VerificationError(
                f"{q.describe()}: q rows of head {head} do not pair with the k rows of head {head} in "
                f"{k.describe()}; check num_heads and arrangement"
            )
        if "v" in blocks:
            _check_value_head(blocks["v"], saved["v"], head, other, run, zero_qk, lambda h: (restore(q, h), restore(k, h)))
    for role, block in blocks.items():
        _set_effective_rows(block.attachment, block.rows, saved[role])
    result.checks.append("q/k/v rows of each head pair up")


def _check_value_head(v: _Block, saved_v: torch.Tensor, head: int, other: int, run, zero_qk, restore_qk) -> None:
    width = v.head_rows(0).numel()
    only = lambda h: _set_effective_rows(  # noqa: E731
        v.attachment, v.rows, _keep_head(saved_v, h, width)
    )
    for values_head, should_change in ((head, True), (other, False)):
        only(values_head)
        zero_qk()
        uniform = run()
        restore_qk(head)
        attended = run()
        if _same(attended, uniform) == should_change:
            raise VerificationError(
                f"{v.describe()}: v rows of head {values_head} do not belong to head {values_head}; "
                "check num_heads and arrangement"
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


def _zero_qk_biases(blocks: dict[str, _Block], result: VerifiedAttention) -> None:
    """Zero the q and k biases, so zeroed q or k rows give exactly zero queries or keys."""
    for role in "qk":
        if role not in blocks:
            continue
        block = blocks[role]
        bias = _bias_rows(block)
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
    scale = float(a.abs().max()) + 1.0
    return bool((a - b).abs().max() <= 1e-9 * scale)
