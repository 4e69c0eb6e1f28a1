"""Modules that look like attention but that no adapter recognises and no declared layout covers.

Conditioning only what the adapters know would silently leave such a module plain, so ``apply`` stops
and shows the declaration that would condition it. A module is flagged when it directly owns q/k/v-like
projections (a child with a 2-D ``weight``, or a 2-D parameter, with a name such as ``qkv``, ``to_qkv``,
``query``/``key``/``value``, ``q_proj``, ``in_proj_weight``, ``c_attn``, ``linear_q``, ``project_q``, ``q_a_proj``),
none of them claimed, and either
its class name says attention ("Attention", "Attn") or those projections cover two roles or more.
Containers that merely hold an attention module (HF ``BertAttention``, timm ``Block``) and output
projections own no such projection and are never flagged, and neither are state-space mixers
(``state_space_mixers``: Mamba's ``in_proj`` is not a q/k/v projection; there is no attention there).

A second set of projections named with a qualifier after the role (Longformer's ``query_global``,
``key_global``, ``value_global`` beside ``query``, ``key``, ``value``) is found and declared with the first. A
module whose projections include no q (or no k), its queries read from elsewhere (heads as a mixture of
experts: JetMoE's queries come from its experts' input projection), gets no declaration: k and v alone are not
the paper's correction.

A module some of whose rows no ProjectionLayout can leave out (a q projection that also holds gates, as
Qwen3-Next's [q_h | gate_h] per head; multi-head latent attention, whose k and v come from a shared low-rank
projection) gets no declaration: the message says why, and offers only ``exclude``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Collection, Optional

import torch
from torch import nn

from speccond.adapters.base import class_path, is_conv1d
from speccond.core.peft_layers import tuned_layer

_NAME = re.compile(  # to_qkv, Wqkv, c_attn's kin, q_proj, query, linear_q (Conformer), project_q (CPM-Ant), q_a_proj (latent)
    r"^(?:to_|w_?|c_|linear_|project_)?(?P<core>query_key_value|qkv|qk|kv|query|key|value|q|k|v)"
    r"(?:(?:_?(?:[ab]_)?(?:proj|lin|linear|layer))?(?:_with_mqa)?(?:_weight)?"
    r"|_(?P<qualifier>(?!(?:proj|lin|linear|layer|weight|bias|norm|layernorm)$)[a-z]+))$",  # query_global: Longformer
    re.IGNORECASE,
)
_CORE_ROLES = {"query_key_value": "qkv", "query": "q", "key": "k", "value": "v"}
_SPECIAL_ROLES = {"in_proj": "qkv", "in_proj_weight": "qkv", "c_attn": "qkv", "q_attn": "q"}
_ATTENTION_CLASS = re.compile(r"attention|attn", re.IGNORECASE)
_QK_PREFIX = re.compile(r"^(?:q|k|query|key)_", re.IGNORECASE)  # q_content_proj, k_pos_proj, ...: a q or k in parts
_HEAD_ATTRS = ("num_heads", "num_attention_heads", "n_heads", "n_head", "heads", "groups")
_HEAD_DIM_ATTRS = ("head_dim", "head_size", "attention_head_size", "dim_head", "d_head")


@dataclass(frozen=True)
class Projection:
    """A q/k/v-like projection owned by an unrecognised module."""

    qualified_name: str  # the weight's full name in the model, e.g. "layers.0.attn.to_qkv.weight"
    shape: tuple[int, ...]
    roles: str  # guessed from the name, block order q, k, v
    storage: str  # "in_out" for a transformers Conv1D, else "out_in"
    attribute: str = ""  # its name on the attention module (the child's, or the parameter's), e.g. "query_global"


@dataclass(frozen=True)
class UnrecognisedAttention:
    """An attention-like module nothing claims: its name, class, head count and head width (when it has
    attributes for them) and its q/k/v-like projections."""

    name: str
    class_path: str
    num_heads: Optional[int]
    projections: tuple[Projection, ...]
    head_dim: Optional[int] = None
    undeclarable: str = ""  # why no ProjectionLayout can declare its projections ('' when one can)


def declared_attention(module_name: str) -> str:
    """The name of the attention module that a declared projection, the module ``module_name``, belongs to: its
    parent, or, where the parent is itself a q/k/v-named wrapper (Gemma 4's ``q_proj`` around ``.linear``), the
    first module above it that is not one."""
    parent = module_name.rpartition(".")[0]
    while parent and projection_roles(parent.rpartition(".")[2]):
        parent = parent.rpartition(".")[0]
    return parent


def projection_set(name: str) -> str:
    """Which set of q/k/v a projection named ``name`` belongs to, where a module holds several (Longformer's query,
    key, value and query_global, key_global, value_global): the name without its role ("_global"); "" for a name
    that is not a q/k/v-like one."""
    match = _NAME.match(name)
    return "" if match is None else name[: match.start("core")] + name[match.end("core"):]


def projection_roles(name: str, qualified: bool = False) -> Optional[str]:
    """The roles a q/k/v-like attribute name suggests ("qkv", "q", "kv", ...), or None if it is not one. A name
    with a qualifier after its role (``query_global``) is one only with ``qualified`` (``owned_projections`` reads
    such names as a second set where the qualifier sits on two roles or more)."""
    if name in _SPECIAL_ROLES:
        return _SPECIAL_ROLES[name]
    match = _NAME.match(name)
    if match is None or match.group("qualifier") and not qualified:
        return None
    core = match.group("core").lower()
    return _CORE_ROLES.get(core, core)


def find_unrecognised(
    model: nn.Module, claimed: set[tuple[int, str]], skip: set[int], selected: Callable[..., bool]
) -> list[UnrecognisedAttention]:
    """Attention-like modules of ``model`` whose q/k/v-like projections are all unclaimed.

    Args:
        claimed: (id(owner module), parameter name) of every projection an adapter or declaration covers.
        skip: ids of modules an adapter recognised (never flagged).
        selected: ``selected(*names)`` tells whether config.targets/exclude select a module.
    """
    found = []
    mixers = {id(module) for _, module in state_space_mixers(model)}
    for name, module in model.named_modules():
        if id(module) in skip or id(module) in mixers:
            continue
        projections = owned_projections(name, module)
        if not projections or any(key in claimed for key, _ in projections):
            continue
        roles = {r for _, p in projections for r in p.roles}
        if len(roles) < 2 and not _ATTENTION_CLASS.search(class_path(module).rsplit(".", 1)[-1]):
            continue
        if not selected(name, *(p.qualified_name.rsplit(".", 1)[0] for _, p in projections)):
            continue
        listed = tuple(p for _, p in projections)
        heads = _num_heads(module) or _heads_from_groups(module, listed)
        found.append(
            UnrecognisedAttention(name, class_path(module), heads, listed, _head_dim(module), _undeclarable(module, listed))
        )
    return found


def state_space_mixers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name, module) of the state-space and linear-recurrent mixers of ``model``: modules holding an ``A_log``
    parameter, the log state decay of Mamba's selective scan (Mamba, Mamba2, and the Mamba layers of Jamba,
    Zamba, Zamba2, Bamba, Falcon-H1) and of the gated delta rule (Qwen3-Next's linear attention). They compute
    no softmax over query-key scores, so the paper's correction has nothing to condition there."""
    return [
        (name, module) for name, module in model.named_modules()
        if isinstance(module._parameters.get("A_log"), torch.Tensor)
    ]


# Children that hold the shared low-rank key/value projection of multi-head latent attention (DeepSeek-V2/V3).
_LATENT_KV = ("kv_a_proj_with_mqa", "kv_b_proj")


def _undeclarable(module: nn.Module, projections: tuple[Projection, ...]) -> str:
    """Why no ProjectionLayout can declare this module's projections ('' when one can)."""
    kernel = next((p for p in projections if len(p.shape) != 2), None)
    if kernel is not None:
        return (
            f"{kernel.qualified_name} is a convolution kernel {kernel.shape}, not a matrix; speccond's layouts and "
            "backends take 2-D weights (a 1x1 convolution is a linear map, but is not read as one here)"
        )
    if any(isinstance(getattr(module, n, None), nn.Module) for n in _LATENT_KV):
        return (
            "multi-head latent attention: k and v come from a shared low-rank projection (kv_a_proj_with_mqa "
            "compresses the input to kv_lora_rank features and a rotary key shared by every head, kv_b_proj expands "
            "them to each head's k and v), so there is no per-head W_K or W_V for lam I to be added to, and "
            "conditioning q alone is not the paper's correction"
        )
    found_roles = {role for p in projections for role in p.roles}
    unread = [name for name, child in module.named_children() if _QK_PREFIX.match(name) and _weight_owner(child)]
    if not found_roles & {"q", "k"} and unread:
        return (
            f"its queries and keys come from projections whose names speccond cannot read as W_Q and W_K "
            f"({', '.join(unread)}; Conditional DETR sums two for each), so only its values could be declared, and "
            "W_V alone is not the paper's correction; declare q and k yourself where each is one projection"
        )
    missing = [role for role in "qk" if role not in found_roles]
    if missing and found_roles:
        names = {"q": "queries", "k": "keys"}
        other = [name for name, p in module.named_parameters() if p.dim() > 2 or p.dim() == 2 and "expert" in name.lower()][:3]
        where = f" (it also holds {', '.join(other)}: heads as a mixture of experts read their rows from there)" if other else ""
        return (
            f"its {' and '.join(names[r] for r in missing)} come from no projection speccond can read as "
            f"{' or '.join('W_' + r.upper() for r in missing)}{where}, so only "
            f"{', '.join(sorted(found_roles))} could be declared, and that alone is not the paper's correction"
        )
    heads, dh = _num_heads(module) or _heads_from_groups(module, projections), _head_dim(module)
    q = next((p for p in projections if p.roles == "q"), None)
    if q is not None and heads and dh and _out_features(q) != heads * dh:
        extra = _out_features(q) - heads * dh
        return (
            f"{q.qualified_name} is {_out_features(q)} wide, but the module's {heads} query heads of head_dim {dh} "
            f"are {heads * dh}: it also holds {extra} other rows (a gate, as Qwen3-Next's q_proj holds [q_h | gate_h] "
            "per head), which a ProjectionLayout cannot leave out, so lam I would land on them"
        )
    return ""


def _heads_from_groups(module: nn.Module, projections: tuple[Projection, ...]) -> Optional[int]:
    """Query heads from the module's ``num_key_value_groups`` (query heads per key/value head) and a separate
    k projection's width over ``head_dim`` (transformers modules that keep no query head count)."""
    groups, dh = getattr(module, "num_key_value_groups", None), _head_dim(module)
    k = next((p for p in projections if p.roles == "k"), None)
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1 or not dh or k is None:
        return None
    return groups * (_out_features(k) // dh) if _out_features(k) % dh == 0 else None


def unrecognised_message(found: list[UnrecognisedAttention], model: nn.Module) -> str:
    """The error: which modules, and the SpectralConfig declaration that would condition them.

    A pattern generalises the layer indices (one line per layer type) only where it then matches exactly the
    listed weights (modules, for ``exclude``) that get the same line: a pattern that would also match another
    weight of ``model`` (one an adapter already conditions), or weights needing another head count, lists the
    names one by one, so that pasting it re-declares nothing else.

    A declaration is printed complete only where every field follows from what the module shows (a
    separate q, k or v Linear: its role, and its head count from the module's head count and head width).
    Where a field cannot be read off the module (how a fused weight's rows are arranged, the key/value head
    count when the head width is unknown) the declaration holds a ``<...>`` placeholder, so that pasting it
    unchanged is a SyntaxError rather than a layout that conditions the wrong rows, and the message says
    which fact is missing and where to read it.
    """
    lines = ["found attention-like modules that no speccond adapter recognises and no declared layout covers:"]
    for item in found[:10]:
        weights = ", ".join(f"{p.qualified_name} {tuple(p.shape)}" for p in item.projections)
        lines.append(f"  {item.name or '<root>'} ({item.class_path}): {weights}")
    if len(found) > 10:
        lines.append(f"  ... and {len(found) - 10} more")
    lines.append("They would be left unconditioned.")
    declarations: dict[str, str] = {}
    missing: dict[str, list[str]] = {}
    refusals: dict[str, str] = {}
    module_pattern = _narrowest({item.name: "" for item in found}, [name for name, _ in model.named_modules()])
    excludes = dict.fromkeys(module_pattern[item.name] for item in found)  # the root module's pattern: "^$"
    for item in found:
        if item.undeclarable:
            refusals.setdefault(module_pattern[item.name], f"{item.class_path}: {item.undeclarable}")
    texts: dict[str, tuple[str, list[str]]] = {}  # qualified weight name -> (its declaration, its missing facts)
    for item in (item for item in found if not item.undeclarable):
        q_width = next((_out_features(p) for p in item.projections if p.roles == "q"), None)
        texts.update({p.qualified_name: _declaration(p, item, q_width) for p in item.projections})
    weight_names = [name for name, _ in model.named_parameters()]
    weight_pattern = _narrowest({name: text for name, (text, _) in texts.items()}, weight_names)
    for name, (text, facts) in texts.items():
        declarations.setdefault(weight_pattern[name], text)
        missing.setdefault(weight_pattern[name], facts)
    for pattern, reason in refusals.items():
        lines.append(f'  r"{pattern}" cannot be declared: {reason}.')
    if not declarations:
        excluded = ", ".join(f'r"{p}"' for p in excludes)
        lines.append(f"speccond cannot condition them; leave them plain: SpectralConfig(exclude=[{excluded}])")
        return "\n".join(lines)
    lines.append(
        "Declare their layouts (check the block order, the head count and whether heads are interleaved against "
        "the module's forward):"
    )
    lines.append("  SpectralConfig(layouts={")
    lines += [f'      r"{pattern}": {text}' for pattern, text in declarations.items()]
    lines.append("  })")
    unknown = {pattern: facts for pattern, facts in missing.items() if facts}
    if unknown:
        lines.append(
            "The <...> fields cannot be read off the module's weights (a guessed layout would be accepted and "
            "condition the wrong rows); read them in its forward:"
        )
        for pattern, facts in unknown.items():
            lines.append(f'    r"{pattern}":')
            lines += [f"      - {fact}" for fact in facts]
        lines.append(
            "  then check the declaration on a real input: speccond.verify(model, inputs), or "
            "speccond.apply(model, config, verify_with=(inputs,)), fails on heads declared in the wrong arrangement."
        )
    excluded = ", ".join(f'r"{p}"' for p in excludes)
    lines.append(f"or leave them plain on purpose: SpectralConfig(exclude=[{excluded}])")
    return "\n".join(lines)


def owned_projections(name: str, module: nn.Module) -> list[tuple[tuple[int, str], Projection]]:
    """((id(owner), parameter name), Projection) for each q/k/v-like projection ``module`` owns directly. Names
    with a qualifier after their role (``query_global``) count only as a set: the same qualifier on two roles or
    more (Longformer's query_global, key_global, value_global), not a lone ``query_embed``."""
    found = _named_projections(name, module)
    roles_by_qualifier: dict[str, set[str]] = {}
    for _, p in found:
        roles_by_qualifier.setdefault(_qualifier(p), set()).update(p.roles)
    return [(key, p) for key, p in found if not _qualifier(p) or len(roles_by_qualifier[_qualifier(p)]) > 1]


def _qualifier(p: Projection) -> str:
    """The qualifier after the role in the projection's name ("global" for ``query_global``), else ""."""
    match = _NAME.match(p.attribute)
    return (match.group("qualifier") or "") if match is not None else ""


def _named_projections(name: str, module: nn.Module) -> list[tuple[tuple[int, str], Projection]]:
    """((id(owner), parameter name), Projection) for each q/k/v-named projection ``module`` owns directly."""
    prefix = f"{name}." if name else ""
    out = []
    for child_name, child in module.named_children():
        roles = projection_roles(child_name, qualified=True)
        found = _weight_owner(child) if roles and not isinstance(child, nn.Embedding) else None  # looked up, not applied
        if found is None:
            continue
        path, owner = found
        weight = owner.weight
        storage = "in_out" if is_conv1d(owner) else "out_in"
        projection = Projection(f"{prefix}{child_name}{path}.weight", tuple(weight.shape), roles, storage, child_name)
        out.append(((id(tuned_layer(owner)[0]), "weight"), projection))  # a PEFT tuner layer: the wrapped one
    tensors = dict(module.named_parameters(recurse=False))
    parametrizations = getattr(module, "parametrizations", None)
    if parametrizations is not None:
        tensors.update({n: getattr(module, n) for n in parametrizations.keys()})
    for param_name, tensor in tensors.items():
        roles = projection_roles(param_name, qualified=True)
        if roles and tensor is not None and tensor.dim() == 2:
            projection = Projection(f"{prefix}{param_name}", tuple(tensor.shape), roles, "out_in", param_name)
            out.append(((id(module), param_name), projection))
    return out


def _weight_owner(child: nn.Module) -> Optional[tuple[str, nn.Module]]:
    """(path below ``child``, module) of the weight a q/k/v-named child projects with: the child's own 2-D
    weight; else the one matrix or convolution kernel inside it (a wrapper such as Gemma 4's ClippableLinear
    around ``.linear``, a conv + norm such as timm's ConvNorm); else None (none, or several)."""
    weight = getattr(child, "weight", None)
    if isinstance(weight, torch.Tensor):
        return ("", child) if weight.dim() == 2 or isinstance(child, nn.modules.conv._ConvNd) else None
    inside = [
        (f".{path}", module) for path, module in child.named_modules()
        if path and isinstance(module._parameters.get("weight"), torch.Tensor)
        and (module._parameters["weight"].dim() == 2 or isinstance(module, nn.modules.conv._ConvNd))
    ]
    return inside[0] if len(inside) == 1 else None


def _num_heads(module: nn.Module) -> Optional[int]:
    for attr in _HEAD_ATTRS:
        value = getattr(module, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _head_dim(module: nn.Module) -> Optional[int]:
    for attr in _HEAD_DIM_ATTRS:
        value = getattr(module, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def every_layer_pattern(qualified_name: str) -> str:
    """An anchored regex for ``qualified_name`` with every numeric index generalised (one line per layer type)."""
    return "^" + r"\.".join(r"\d+" if part.isdigit() else re.escape(part) for part in qualified_name.split(".")) + "$"


def _narrowest(lines: dict[str, str], universe: Collection[str]) -> dict[str, str]:
    """{name: its pattern} for the names of ``lines`` ({name: the line it gets}): the generalised pattern where
    it matches only names that get the same line (among ``lines`` and ``universe``), else the name itself."""
    groups: dict[str, list[str]] = {}
    for name in lines:
        groups.setdefault(every_layer_pattern(name), []).append(name)
    chosen = {}
    for pattern, names in groups.items():
        same = len({lines[name] for name in names}) == 1
        reaches = {other for other in (*universe, *lines) if re.match(pattern, other)}
        general = same and reaches <= set(names)
        chosen.update({name: pattern if general else f"^{re.escape(name)}$" for name in names})
    return chosen


def _out_features(p: Projection) -> int:
    return p.shape[0] if p.storage == "out_in" else p.shape[1]


def _declaration(p: Projection, item: UnrecognisedAttention, q_width: Optional[int]) -> tuple[str, list[str]]:
    """(the ProjectionLayout text for ``p``, the facts it is missing). Complete only where nothing is guessed."""
    k_width = next((_out_features(k) for k in item.projections if k.roles == "k"), None)
    out, heads, owner = _out_features(p), item.num_heads, p.qualified_name.rsplit(".", 1)[0].rsplit(".", 1)[-1]
    missing: list[str] = []
    comments: list[str] = []
    if heads is None:
        missing.append(
            "num_heads: the module keeps no head count (num_heads / num_attention_heads / n_heads, or "
            "num_key_value_groups with head_dim); read it where its forward reshapes to (B, N, heads, head_dim)"
        )
    # the head width: the module's own attribute, else q's width over the head count
    dh = item.head_dim or (q_width // heads if q_width and heads and q_width % heads == 0 else None)
    if len(p.roles) == 1:
        count = heads
        if p.roles != "q" and heads and (q_width or out) != out:  # a k or v narrower than q: fewer kv heads
            count = out // dh if dh and out % dh == 0 else None
        if p.roles == "v" and k_width and dh and k_width % dh == 0 and out % (k_width // dh) == 0:
            count = k_width // dh  # each key head's value, at v's own width (v heads may be wider than q's)
        fields = [f'roles="{p.roles}"', f"num_heads={count if count else '<heads>'}"]
        if count is None and heads:
            missing.append(
                f"num_heads: {owner} is {out} wide and q {q_width}: its head count is {out} over the head width dh "
                f"(q = {heads} heads x dh)"
            )
    elif "q" in p.roles:
        fields = [f'roles="{p.roles}"', f"num_heads={heads or '<heads>'}"]
        kv = _kv_heads(p, heads, dh, out)
        if kv is None:
            fields.append("num_kv_heads=<kv heads>")
            missing.append(
                f"num_kv_heads: the {out} output features are q = {heads or 'H'} heads x dh plus "
                f"{', '.join(r for r in p.roles if r != 'q')} = num_kv_heads x dh each; the head width dh was not "
                "found (head_dim / head_size / attention_head_size). Equal blocks (num_kv_heads = num_heads, leave "
                "it out) when every block is as wide as q"
            )
        elif heads and kv < heads:
            fields.append(f"num_kv_heads={kv}")
        fields.append(f"arrangement={_arrangement_hole(p, heads, kv)}")
        missing.append(_arrangement_hint(p, owner, heads, kv))
    else:  # fused k, v (q separate): every block has the k/v head count
        count = heads
        if heads and q_width and out != len(p.roles) * q_width:
            count = out // (len(p.roles) * dh) if dh and out % (len(p.roles) * dh) == 0 else None
        fields = [f'roles="{p.roles}"', f"num_heads={count if count else '<kv heads>'}"]
        if count is None:
            missing.append(f"num_heads: {owner} holds {len(p.roles)} blocks of kv_heads x dh each, q = {heads or 'H'} x dh")
        fields.append(f"arrangement={_arrangement_hole(p, count, count)}")
        missing.append(_arrangement_hint(p, owner, count, count))
        if out % len(p.roles):
            comments.append(f"check roles: {len(p.roles)} blocks do not divide the output width {out}")
    if p.storage != "out_in":
        fields.append(f'storage="{p.storage}"')
    comment = f"  # {'; '.join(comments)}" if comments else ""
    return f"ProjectionLayout({', '.join(fields)}),{comment}", missing


def _arrangement_options(p: Projection, heads: Optional[int], kv: Optional[int]) -> list[str]:
    """The arrangements a fused weight can have: per_head needs equal head counts, grouped fewer k/v heads."""
    options = ["blocked"]
    if kv is None or kv == heads:
        options.append("per_head")
    if p.roles == "qkv" and (kv is None or kv < (heads or 0)):
        options.append("grouped")
    return options


def _arrangement_hole(p: Projection, heads: Optional[int], kv: Optional[int]) -> str:
    return "<" + " | ".join(f'"{o}"' for o in _arrangement_options(p, heads, kv)) + ">"


def _kv_heads(p: Projection, heads: Optional[int], dh: Optional[int], out: int) -> Optional[int]:
    """The k/v head count of a fused weight holding q, from the head width; None when it cannot be read."""
    if "q" not in p.roles or not heads or not dh or out % dh:
        return None
    rest, others = out // dh - heads, len(p.roles) - 1
    if rest < others or rest % others or heads % (rest // others):
        return None
    return rest // others


def _arrangement_hint(p: Projection, owner: str, heads: Optional[int], kv: Optional[int]) -> str:
    """How to read a fused weight's arrangement off the module's forward."""
    n = len(p.roles)
    hints = {
        "blocked": f"into [{' | '.join(p.roles)}] blocks (.split / .chunk({n}) / .view(B, N, {n}, H, dh)) "
        '-> "blocked"',
        "per_head": f"per head (.view(B, N, H, {n}, dh), or .view(B, N, H, {n} dh).chunk({n})) -> \"per_head\"",
        "grouped": "per key/value group, its q heads then k then v (.view(B, N, G, H / G + 2, dh)) -> \"grouped\"",
    }
    options = [hints[o] for o in _arrangement_options(p, heads, kv)]
    return f"arrangement: how does the forward split the output of {owner}? " + "; ".join(options)
