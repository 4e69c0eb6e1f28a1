"""Attention that no adapter names: its layout inferred from the module and confirmed by probing it.

An unnamed module is taken when it directly owns nn.Linear children whose names say q, k, v (``qkv``,
``Wqkv``, ``query_key_value``, ``q_proj``/``k_proj``/``v_proj``, ``q``/``kv``, ...; see
speccond.adapters.unrecognised) covering each role once, and has a head-count attribute
(``num_heads``, ``num_attention_heads``, ``n_heads``, ``heads``, or ``config.num_attention_heads``).

1. Candidates, from the module's attributes and weight shapes only. The head width dh is the module's
   ``head_dim`` / ``head_size`` / ``key_value_proj_dim`` when it has one, else q's width over the head
   count; the key/value head count is ``num_key_value_heads`` / ``num_kv_heads`` / ``kv_n_heads`` or
   the weight's width over dh. A fused weight gets every arrangement its head counts allow ("blocked",
   "per_head", "grouped") and every position of v among its blocks (q before k: see below). Candidates
   that put the same rows in the same roles are one candidate.
2. Each candidate is read on a float64 copy of the module whose parameters are redrawn (so zero-
   initialised tables and the user's weights play no part; the q, k, v biases zero), and the copy is called
   on a synthetic input:
   small random hidden states (B, N, D) (or (B, h, w, D); std 0.1, so that a clamp of q, k, v stays
   inactive), every optional argument left out, rotary
   ``position_embeddings`` as a fixed per-position rotation by 45 degrees (an orthogonal map of each
   head's q and k: it changes no logit's pairing). speccond.verify's signatures are read off it, setting
   the candidate's rows directly: the output is linear in the v rows only, and the q, k, v rows of each
   head pair up (verify's module docstring). The activation backend applies when the forward calls each
   projection as a module.
3. Exactly one candidate passing: the module is conditioned with it. Several passing: the module is
   claimed and apply refuses, listing them. None passing, or no call that runs: it is left to the
   unrecognised-attention error (its forward is not softmax attention over these rows, or needs inputs
   the probe cannot make).
4. How it normalises q and k (``normalisation``, also asked by the named transformers adapter): a module
   with a ``logit_scale`` or a q/k norm pair whose output does not move when its q and k rows are scaled
   is cosine or normed attention; the collapse warning predicts through it and qk-norm refuses it.

Where it stops: q and k enter the logits symmetrically, so which of two blocks is q is taken from the
names (a fused weight's q block comes before its k block, as in every implementation in timm and
transformers); it matters only for lam_q != lam_k. A head count is never guessed: without an attribute
the module is left to the unrecognised-attention error. The head diagnostics do not rebuild an inferred
module's heads (its scale, masks and position terms are not known); projection_spectra works for it.
"""
from __future__ import annotations

import copy
import inspect
import itertools
import logging
import weakref
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import nn

from speccond.adapters.base import (
    COSINE_NOTE, QK_COSINE, QK_LAYER_NORM, QK_NORM_NOTE, QK_NORM_PAIRS, ProjectionSpec, class_path, is_conv1d, is_linear,
)
from speccond.adapters.unrecognised import projection_roles
from speccond.core.layout import ProjectionLayout

log = logging.getLogger(__name__)

_HEAD_ATTRS = ("num_heads", "num_attention_heads", "n_heads", "n_head", "heads")
_KV_HEAD_ATTRS = ("num_key_value_heads", "num_kv_heads", "kv_n_heads", "n_kv_heads")
_HEAD_DIM_ATTRS = ("head_dim", "head_size", "attention_head_size", "key_value_proj_dim", "d_kv")
_ROTARY_ATTRS = ("rotary_ndims", "rotary_dim", "rotary_emb_dim")
# Small hidden states keep clamps of q, k, v (DBRX clip_qkv) inactive, where the output is what the rows say.
_INPUT_STD = 0.1
_TOKENS = 16  # tokens of the synthetic input (a square of 4 x 4 for modules that take (B, h, w, D))

HEAD_REASON = (
    "its layout was inferred by probing the module, but how it forms its logits (scale, masks, position "
    "terms) is not known"
)

Candidate = tuple[tuple[str, ProjectionLayout], ...]  # (child name, its layout) for each q/k/v Linear


@dataclass(frozen=True)
class Inference:
    """What probing one module found: the candidates tried, those that passed, and whether the
    activation backend reaches the projections (they are called as modules)."""

    candidates: tuple[Candidate, ...]
    passed: tuple[Candidate, ...]
    activation_ok: bool
    failures: tuple[str, ...] = ()


@dataclass
class InferredAttentionAdapter:
    """Conditions an unnamed attention module with the one layout its attributes allow and its forward
    confirms (module docstring); refuses one for which several layouts pass."""

    name: str = "inferred (probed) attention"
    head_reason: str = HEAD_REASON
    _cache: "weakref.WeakKeyDictionary[nn.Module, Optional[Inference]]" = field(
        default_factory=weakref.WeakKeyDictionary, repr=False
    )

    def matches(self, module: nn.Module) -> bool:
        found = self.infer(module)
        return found is not None and bool(found.passed)

    def projections(self, module: nn.Module) -> list[ProjectionSpec]:
        found = self.infer(module)
        assert found is not None and found.passed, "projections() called on a module matches() rejected"
        if len(found.passed) > 1:
            options = "; ".join(describe(c) for c in found.passed)
            raise ValueError(
                f"{class_path(module)}: speccond inferred its q/k/v layout by probing, and {len(found.passed)} "
                f"candidate layouts pass the probes ({options}), so it cannot tell which one the forward "
                "computes. Read how the forward splits the projection and declare that one: "
                "SpectralConfig(layouts={...}), or exclude the module"
            )
        normalised = normalisation(module, found.passed[0])
        notes = {QK_COSINE: (COSINE_NOTE,), QK_LAYER_NORM: (QK_NORM_NOTE,)}.get(normalised, ())
        return [
            ProjectionSpec(child, "weight", layout, activation_ok=found.activation_ok, notes=notes,
                           qk_normalised=normalised)
            for child, layout in found.passed[0]
        ]

    def infer(self, module: nn.Module) -> Optional[Inference]:
        """The probe's answer for ``module`` (cached per module), or None when it has no candidate."""
        if module not in self._cache:
            self._cache[module] = infer_layout(module)
        return self._cache[module]


def describe(candidate: Candidate) -> str:
    return ", ".join(f"{child}: ProjectionLayout{_fields(layout)}" for child, layout in candidate)


def _fields(layout: ProjectionLayout) -> str:
    text = f'(roles="{layout.roles}", num_heads={layout.num_heads}'
    if layout.num_kv_heads is not None:
        text += f", num_kv_heads={layout.num_kv_heads}"
    return text + (f', arrangement="{layout.arrangement}")' if layout.fused else ")")


# -- candidates ------------------------------------------------------------------------------------------------
def infer_layout(module: nn.Module) -> Optional[Inference]:
    """Candidates for ``module`` and the ones its forward confirms; None when it is not a candidate at all."""
    projections = _qkv_children(module)
    if projections is None:
        return None
    candidates = candidate_layouts(module, projections)
    if not candidates:
        return None
    passed, failures, activation_ok = [], [], True
    for candidate in candidates:
        outcome = _probe_candidate(module, candidate)
        if outcome is None:
            return Inference(tuple(candidates), (), False, ("no synthetic call of its forward runs",))
        ok, activation, why = outcome
        if ok:
            passed.append(candidate)
            activation_ok = activation_ok and activation
        else:
            failures.append(f"{describe(candidate)}: {why}")
    for failure in failures:
        log.debug("%s: %s", class_path(module), failure)
    return Inference(tuple(candidates), tuple(passed), activation_ok and bool(passed), tuple(failures))


def _qkv_children(module: nn.Module) -> Optional[dict[str, str]]:
    """{child name: roles} of the nn.Linear children whose names say q, k, v, covering each role once.

    None also when the module has more than one other Linear child (its output projection): a second set
    of projections (Longformer's global q/k/v, a gate per head) would be left plain or mistaken, so such a
    module is left to the unrecognised-attention error."""
    found, others = {}, 0
    for name, child in module.named_children():
        roles = projection_roles(name)
        if roles and isinstance(child, nn.Linear):
            found[name] = roles
        elif is_linear(child) or is_conv1d(child):
            others += 1
    roles = "".join(found.values())
    if sorted(roles) != ["k", "q", "v"] or others > 1:
        return None
    return found


def _attribute(module: nn.Module, names: tuple[str, ...]) -> Optional[int]:
    for owner in (module, getattr(module, "config", None)):
        for attr in names:
            value = getattr(owner, attr, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def candidate_layouts(module: nn.Module, projections: dict[str, str]) -> list[Candidate]:
    """Every layout the module's attributes and weight widths allow, one per distinct row assignment."""
    heads = _attribute(module, _HEAD_ATTRS)
    if heads is None:
        return []
    widths = {name: getattr(module, name).out_features for name in projections}
    q_owner = next(name for name, roles in projections.items() if "q" in roles)
    head_dim = _attribute(module, _HEAD_DIM_ATTRS)
    kv_heads = _attribute(module, _KV_HEAD_ATTRS)
    options_per_child = []
    for name, roles in projections.items():
        options = _layouts_of(roles, widths[name], heads, kv_heads, head_dim, name == q_owner)
        if not options:
            return []
        options_per_child.append([(name, layout) for layout in options])
    unique: dict[tuple, Candidate] = {}
    for combination in itertools.product(*options_per_child):
        if not _one_head_width(combination, widths):
            continue
        unique.setdefault(_rows_key(combination, widths), tuple(combination))
    return list(unique.values())


def _layouts_of(
    roles: str, width: int, heads: int, kv_heads: Optional[int], head_dim: Optional[int], holds_q: bool
) -> list[ProjectionLayout]:
    """The layouts a weight ``width`` rows wide holding ``roles`` can have."""
    orders = {roles} if len(roles) == 1 else _orders(roles)
    out = []
    for order in sorted(orders):
        if holds_q and len(order) == 1:
            counts = [(heads, None)]
        elif holds_q:
            counts = [(heads, g) for g in {heads, kv_heads or heads, *_kv_from_width(width, heads, order, head_dim)}]
        else:  # k and/or v alone: one head count for the weight
            dh = head_dim
            counts = [(width // (len(order) * dh), None)] if dh and width % (len(order) * dh) == 0 else [
                (g, None) for g in {heads, kv_heads or heads}
            ]
        for num_heads, num_kv in counts:
            if not num_heads or (num_kv is not None and (num_kv < 1 or num_heads % num_kv)):
                continue
            arrangements = ["blocked"] if len(order) == 1 else ["blocked", "per_head", "grouped"]
            for arrangement in arrangements:
                try:
                    layout = ProjectionLayout(order, num_heads, arrangement=arrangement, num_kv_heads=num_kv)
                    out_features, _ = layout.check_shape(torch.Size((width, 1)), "candidate")
                except ValueError:
                    continue
                if head_dim and layout.head_dim(out_features) != head_dim:
                    continue
                out.append(layout)
    return out


def _orders(roles: str) -> set[str]:
    """Block orders of a fused weight: v anywhere, q before k (the probe cannot tell q from k)."""
    return {"".join(p) for p in itertools.permutations(roles) if not ("q" in p and "k" in p and p.index("q") > p.index("k"))}


def _kv_from_width(width: int, heads: int, order: str, head_dim: Optional[int]) -> set[int]:
    """The key/value head count a fused weight holding q implies when the head width is known."""
    if not head_dim or width % head_dim:
        return set()
    rest, others = width // head_dim - heads, len(order) - 1
    return {rest // others} if rest > 0 and rest % others == 0 else set()


def _one_head_width(combination, widths: dict[str, int]) -> bool:
    """q and k heads are equally wide across the weights (v may be wider only in its own weight)."""
    dims = {layout.head_dim(widths[name]) for name, layout in combination if set(layout.roles) & {"q", "k"}}
    return len(dims) == 1


def _rows_key(combination, widths: dict[str, int]) -> tuple:
    """Which rows play which role, head by head: two candidates with the same key are one layout."""
    key = []
    for name, layout in combination:
        for role in layout.roles:
            rows = layout.block_rows(role, widths[name])
            key.append((role, name, layout.heads(role), tuple(rows.tolist())))
    return tuple(sorted(key))


# -- the probe -------------------------------------------------------------------------------------------------
# The signatures are speccond.verify's (its module docstring), read here on a plain copy whose rows are set
# directly: verify imports the adapter table, so the table cannot import verify.
def _probe_candidate(module: nn.Module, candidate: Candidate) -> Optional[tuple[bool, bool, str]]:
    """(passes, the projections are called as modules, why not) for ``candidate``; None when no synthetic
    call of the module's forward runs."""
    probe = _redrawn_copy(module, candidate)
    call = _synthetic_call(probe, candidate)
    if call is None:
        return None
    blocks = _blocks(probe, candidate)
    called = set()
    handles = [probe.get_submodule(child).register_forward_hook(lambda m, *_: called.add(id(m)))
               for child, _ in candidate]
    try:
        with torch.no_grad():
            run = lambda: _first_tensor(probe(*call[0], **call[1]))  # noqa: E731
            run()
            activation_ok = len(called) == len(candidate)
            why = _roles_mismatch(blocks, run) or _pairing_mismatch(blocks, run)
    except (RuntimeError, ValueError, TypeError, IndexError) as error:
        return False, False, f"the forward failed on the probe: {type(error).__name__}: {error}"
    finally:
        for handle in handles:
            handle.remove()
    return not why, activation_ok, why


def _redrawn_copy(module: nn.Module, candidate: Candidate) -> nn.Module:
    """A float64 copy of ``module`` with every parameter redrawn (N(0, 1 / fan_in)), the q/k/v biases zero."""
    probe = copy.deepcopy(module).double().eval()
    generator = torch.Generator().manual_seed(0)
    owners = {id(probe.get_submodule(child)) for child, _ in candidate}
    with torch.no_grad():
        for owner in probe.modules():
            for name, parameter in owner.named_parameters(recurse=False):
                if id(owner) in owners and name == "bias":
                    parameter.zero_()  # zero q or k rows then give zero queries or keys
                    continue
                fan_in = parameter.shape[-1] if parameter.dim() > 1 else 1
                parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype) * fan_in**-0.5)
    return probe


@dataclass(frozen=True)
class _Rows:
    """One role's rows in the probe copy: its weight (out, in), the rows heads in order, its head count."""

    weight: torch.Tensor
    rows: torch.Tensor
    heads: int

    def head(self, h: int) -> torch.Tensor:
        width = self.rows.numel() // self.heads
        return self.rows[h * width : (h + 1) * width]


def _blocks(probe: nn.Module, candidate: Candidate) -> dict[str, _Rows]:
    blocks = {}
    for child, layout in candidate:
        weight = probe.get_submodule(child).weight
        for role in layout.roles:
            blocks[role] = _Rows(weight, layout.block_rows(role, weight.shape[0]), layout.heads(role))
    return blocks


def _roles_mismatch(blocks: dict[str, _Rows], run) -> str:
    """'' when the output is affine in a scaling of the v rows and not in the q or k rows."""
    for role, block in blocks.items():
        saved = block.weight[block.rows].clone()
        outputs = []
        for scale in (0.0, 1.0, 2.0):
            block.weight[block.rows] = scale * saved
            outputs.append(run())
        block.weight[block.rows] = saved
        change = (outputs[1] - outputs[0]).abs().max()
        affine = bool((outputs[2] - 2 * outputs[1] + outputs[0]).abs().max() <= 1e-7 * (change + 1e-12))
        if role == "v" and (not affine or change <= 1e-9):
            return "the output is not linear in the rows taken as v"
        if role != "v" and affine:
            return f"the output is linear in the rows taken as {role}"
    return ""


def _pairing_mismatch(blocks: dict[str, _Rows], run) -> str:
    """'' when query head h moves the output only with key head h // g, and value head h // g' acts only
    through query head h's attention (g, g': query heads per key, per value head)."""
    q, k, v = blocks["q"], blocks["k"], blocks["v"]
    if q.heads < 2:
        return ""
    if q.heads % k.heads or q.heads % v.heads:
        return f"{k.heads} key and {v.heads} value heads cannot serve {q.heads} query heads"
    saved = {role: b.weight[b.rows].clone() for role, b in blocks.items()}
    group, v_group = q.heads // k.heads, q.heads // v.heads

    def restore(role: str, h: int) -> None:
        block = blocks[role]
        width = block.rows.numel() // block.heads
        block.weight[block.head(h)] = saved[role][h * width : (h + 1) * width]

    def only_v(h: int) -> None:
        v.weight[v.rows] = 0.0
        restore("v", h)

    try:
        if _acts_alone(blocks, saved, run):
            return ""  # logits with terms in q or k alone (relative positions, q/k norms with a bias): verify skips too
        for h in range(q.heads):
            for role in "qk":
                blocks[role].weight[blocks[role].rows] = 0.0
            v.weight[v.rows] = saved["v"]
            baseline = run()
            restore("q", h)
            if k.heads > 1:
                restore("k", (h // group + 1) % k.heads)
                if not _same(run(), baseline):
                    return f"query head {h} moves the output with a key head of another group"
            restore("k", h // group)
            if _same(run(), baseline):
                return f"query head {h} does not move the output with key head {h // group}"
            for value_head in range(v.heads):
                only_v(value_head)
                attended = run()
                for role in "qk":
                    blocks[role].weight[blocks[role].rows] = 0.0
                uniform = run()
                restore("q", h)
                restore("k", h // group)
                if _same(attended, uniform) == (value_head == h // v_group):
                    return f"value head {value_head} does not act through query head {h} as head h // {v_group} would"
    finally:
        for role, block in blocks.items():
            block.weight[block.rows] = saved[role]
    return ""


def _acts_alone(blocks: dict[str, _Rows], saved: dict[str, torch.Tensor], run) -> bool:
    """Whether q's rows with k's zeroed (or k's with q's zeroed) move the output: then the logits are not q k^T
    alone and the pairing signatures do not apply."""
    for role in "qk":
        blocks[role].weight[blocks[role].rows] = 0.0
    baseline = run()
    for role in "qk":
        blocks[role].weight[blocks[role].rows] = saved[role]
        moved = not _same(run(), baseline)
        blocks[role].weight[blocks[role].rows] = 0.0
        if moved:
            return True
    return False


def normalisation(module: nn.Module, candidate: Candidate) -> str:
    """How ``module`` normalises its q and k after the projection, confirmed by probing (a ProjectionSpec's
    ``qk_normalised``): QK_COSINE where it has a ``logit_scale`` and QK_LAYER_NORM where it has a pair of q/k
    norm children (``QK_NORM_PAIRS``), each only when its output does not change as every q and k row is
    scaled by 10 (a redrawn float64 copy, the synthetic call): it moves less than 1 % of what zeroing them does;
    "" otherwise, and when no call runs."""
    cosine = isinstance(getattr(module, "logit_scale", None), nn.Parameter)
    normed = any(all(isinstance(getattr(module, n, None), nn.Module) for n in pair) for pair in QK_NORM_PAIRS)
    if not (cosine or normed):
        return ""
    found = _NORMALISATIONS.setdefault(module, {})
    if candidate not in found:
        found[candidate] = _probed_normalisation(module, candidate, cosine)
    return found[candidate]


# module -> {candidate: normalisation()}: the probe runs once per module and layout (find_projections runs often)
_NORMALISATIONS: "weakref.WeakKeyDictionary[nn.Module, dict]" = weakref.WeakKeyDictionary()


def _probed_normalisation(module: nn.Module, candidate: Candidate, cosine: bool) -> str:
    probe = _redrawn_copy(module, candidate)
    call = _synthetic_call(probe, candidate)
    if call is None:
        return ""
    blocks = {role: block for role, block in _blocks(probe, candidate).items() if role in "qk"}
    saved = {role: block.weight[block.rows].clone() for role, block in blocks.items()}
    run = lambda: _first_tensor(probe(*call[0], **call[1]))  # noqa: E731
    outputs = []
    try:
        with torch.no_grad():
            for scale in (1.0, 10.0, 0.0):  # the norms' eps moves the first two apart by ~1e-4 of the third's move
                for role, block in blocks.items():
                    block.weight[block.rows] = scale * saved[role]
                outputs.append(run())
    except (RuntimeError, ValueError, TypeError, IndexError):
        return ""
    scaled, zeroed = ((outputs[i] - outputs[0]).abs().max() for i in (1, 2))
    if not (zeroed > 0 and scaled <= 1e-2 * zeroed):
        return ""
    return QK_COSINE if cosine else QK_LAYER_NORM


def _first_tensor(output) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    return next(value for value in output if isinstance(value, torch.Tensor))


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal to 1e-9 relative, non-finite entries at the same places."""
    finite = torch.isfinite(a)
    if not torch.equal(finite, torch.isfinite(b)):
        return False
    a, b = a[finite], b[finite]
    return a.numel() == 0 or bool((a - b).abs().max() <= 1e-9 * (float(a.abs().max()) + 1.0))


def _synthetic_call(probe: nn.Module, candidate: Candidate) -> Optional[tuple[tuple, dict]]:
    """(args, kwargs) of a call that runs: hidden states first, rotary position embeddings when the
    forward takes them, a keep-everything ``mask`` (B, N) of ones when it needs one (LongT5's transient-
    global attention), every other argument left at its default or None. The first that runs is used."""
    parameters = list(inspect.signature(probe.forward).parameters.values())
    if not parameters or parameters[0].kind not in (parameters[0].POSITIONAL_ONLY, parameters[0].POSITIONAL_OR_KEYWORD):
        return None
    names = {p.name for p in parameters[1:]}
    width = probe.get_submodule(candidate[0][0]).in_features
    head_dim = next(layout.head_dim(probe.get_submodule(c).out_features) for c, layout in candidate if "q" in layout.roles)
    rotary = _attribute(probe, _ROTARY_ATTRS) or head_dim
    rotary_widths = list(dict.fromkeys((1, rotary, rotary // 2, head_dim, head_dim // 2)))  # GPT-J style: half
    generator = torch.Generator().manual_seed(1)
    shapes = ((2, _TOKENS, width), (2, 4, 4, width), (2, 64, width), (1, _TOKENS, width))  # (B, N, D), (B, h, w, D)
    masks = (False, True) if "mask" in names else (False,)
    rotaries = rotary_widths if "position_embeddings" in names else [0]
    for shape, rotary, masked in itertools.product(shapes, rotaries, masks):
        x = _INPUT_STD * torch.randn(shape, generator=generator, dtype=torch.float64)
        tokens = x.shape[1] if x.dim() == 3 else x.shape[1] * x.shape[2]
        kwargs = {}
        for parameter in parameters[1:]:
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                continue
            if parameter.name == "position_embeddings":
                turn = torch.full((x.shape[0], tokens, rotary), 0.5**0.5, dtype=torch.float64)  # cos = sin: 45 degrees
                kwargs[parameter.name] = (turn, turn.clone())
            elif parameter.name == "mask" and masked:
                kwargs[parameter.name] = torch.ones(x.shape[0], tokens, dtype=torch.float64)
            elif parameter.default is parameter.empty:
                kwargs[parameter.name] = None
        try:
            with torch.no_grad():
                probe(x, **kwargs)
        except Exception:  # noqa: BLE001 - any failure means this synthetic call is not one the forward takes
            continue
        return (x,), kwargs
    return None
