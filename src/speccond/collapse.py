"""Will the correction make the initial token attention nearly one-hot? apply's warning, per module family.

With C = lam I_k, head h's query and key are about lam times the head's slice of the input, so with
inputs of unit variance (what a LayerNorm or RMSNorm hands the attention at initialisation) the logit of
a token with itself is about scale lam^2 dh and the others about scale lam^2 sqrt(dh) N(0, 1): at
lam = 10, dh = 16, scale = dh^-1/2 a gap of several hundred, so each token attends to itself alone.
docs/RESULTS.md measured this collapse at initialisation and the accuracy it cost.

``predict`` evaluates it on the module's own effective weights W + C (biases included) for a probe of
``PROBE_TOKENS`` tokens drawn N(0, 1) (seeded): the mean entropy of softmax(scale q k^T) per head,
against uniform attention's log N. A family (the adapter that claimed the modules) is at risk when its
lowest head entropy falls below ``COLLAPSE_NATS``. With example inputs (``apply(..., verify_with=...)``)
``measure`` reads the entropy of the attention the modules compute on them instead (the head
diagnostics), where they can rebuild it. Where the module normalises q and k itself
(``ProjectionSpec.qk_normalised``) the prediction goes through the normalisation: the logits no longer
grow with lam, but q and k both become about the token's own direction, so a token's logit with itself
is about scale * dh (a norm per head: sqrt(dh) at the usual scale) or the logit scale (cosine attention)
against about sqrt(dh) times less for the others; at head width 64 that is still nearly one-hot. The
module's own norms are used, learned gains included, called as the module calls them: per head (heads before
the tokens, as StableLM's per-head LayerNorms, or after them, as Cohere's gains of shape (H, dh)) or over the
projection's whole width (OLMo 2, InternVL); a LayerNorm per head where the module has none the prediction can
call.
Channel attention and attention whose q and k are pooled to other tokens are exempt; their adapters say
why (``ProjectionSpec.collapse_exempt``). The prediction ignores what rotary embeddings, masks and
position biases add to the logits, all of which are bounded independently of lam.
"""
from __future__ import annotations

import copy
import logging
import math
import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from speccond.adapters.base import QK_COSINE, QK_LAYER_NORM, QK_NORM_PAIRS
from speccond.core.config import SpectralConfig
from speccond.core.sharded import gathered
from speccond.progress import tracked

log = logging.getLogger(__name__)

COLLAPSE_NATS = 0.5  # mean attention entropy below this: nearly one-hot (over 0.9 of the weight on one key)
PROBE_TOKENS = 64
MAX_LOGIT_SCALE = 100.0  # Swin V2's clamp of its cosine attention's logit scale (timm, transformers)

Logits = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]  # (q (N, dh), k (N, dh), head) -> (N, N)


@dataclass(frozen=True)
class CollapseRisk:
    """One module family's predicted (or measured) initial attention entropy under the correction.

    family: the adapter's name; modules: how many of its attention modules were evaluated; entropy: the
    lowest mean head entropy among them (nats); uniform: uniform attention's entropy for that input;
    plain: the same head's entropy without the correction; measured: entropy read on real inputs
    (else predicted from unit-variance tokens).
    """

    family: str
    modules: int
    entropy: float
    uniform: float
    plain: float
    measured: bool

    @property
    def collapses(self) -> bool:
        return self.entropy < COLLAPSE_NATS

    def message(self, advice: str) -> str:
        plain = "" if math.isnan(self.plain) else f" ({self.plain:.2f} without the correction)"
        how = "measured on the verify_with inputs" if self.measured else (
            f"predicted for {PROBE_TOKENS} unit-variance tokens (a LayerNorm output)"
        )
        return (
            f"{self.family}: the correction makes the initial token attention nearly one-hot in "
            f"{self.modules} module(s): mean head entropy down to {self.entropy:.2f} nats against "
            f"{self.uniform:.2f} for uniform attention{plain}, {how}. lam = 10 cost accuracy this way in "
            f"docs/RESULTS.md; {advice}"
        )


def predict(groups: dict[str, list[tuple[Any, Any]]], modules: dict[str, nn.Module]) -> list[CollapseRisk]:
    """Predicted risk per family.

    groups: attention module name -> [(site, its SpectralCorrection or None)], the sites of one attention
    module (``speccond.adapters.ProjectionSite``), not yet attached; W + C is formed for one module's q and
    k at a time, so no copy of every weight is held at once; modules: attention module name -> the module (for its
    logit scale and its q/k norms). Modules with a ``collapse_exempt`` site, whose q and k cannot be paired,
    or whose normalisation of q and k the prediction cannot follow, are skipped.
    """
    worst: dict[str, tuple[float, float, float, int]] = {}
    what = "speccond.apply: collapse prediction of %d/%d attention modules"
    for name, members in tracked(list(groups.items()), log, what):
        if any(site.collapse_exempt for site, _ in members):
            continue
        blocks = _qk_blocks(members)
        if blocks is None:
            continue
        entropy, plain = _lowest_head_entropy(blocks, modules.get(name))
        family = members[0][0].source if members[0][0].source != "declared" else "modules declared by layouts"
        entropy_so_far, plain_so_far, _, count = worst.get(family, (math.inf, math.inf, 0.0, 0))
        if entropy < entropy_so_far:
            entropy_so_far, plain_so_far = entropy, plain
        worst[family] = (entropy_so_far, plain_so_far, math.log(PROBE_TOKENS), count + 1)
    return [CollapseRisk(f, n, e, u, p, measured=False) for f, (e, p, u, n) in worst.items()]


def measure(model: nn.Module, inputs: Any, config: Optional[SpectralConfig] = None) -> list[CollapseRisk]:
    """Measured risk per family: the head diagnostics' entropy on ``inputs``, for every attention layer whose
    adapter rebuilds its heads and that no adapter exempts (others are skipped); ``config``: which attention
    to read (its targets and exclude, as :func:`speccond.layers.attention_layers`)."""
    from speccond.diagnostics.entropy import row_entropy
    from speccond.diagnostics.heads import head_cases
    from speccond.layers import LEFT_OUT, attention_layers

    selected = None if config is None else {layer.name for layer in attention_layers(model, config)}
    worst: dict[str, tuple[float, float, int]] = {}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=f".*{re.escape(LEFT_OUT)}")  # what speccond refuses is left out by apply too
        layers = attention_layers(model)  # numbered as head_cases numbers them
        for layer in layers:
            sites = [p.attachment for p in layer.projections]
            if selected is not None and layer.name not in selected:
                continue
            if any(getattr(a.correction, "collapse_exempt", "") for a in sites if a is not None):
                continue
            try:
                heads = head_cases(model, inputs, layer.index)
            except ValueError:
                continue  # not rebuildable: predicted instead
            with torch.no_grad():
                entropies = [float(row_entropy(h.double().probabilities()).mean()) for h in heads]
                uniform = float(heads[0].visible_keys().double().log().mean())
            entropy, reference, count = worst.get(layer.adapter_name, (math.inf, uniform, 0))
            worst[layer.adapter_name] = (min(entropy, min(entropies)), reference, count + 1)
    return [CollapseRisk(f, n, e, u, math.nan, measured=True) for f, (e, u, n) in worst.items()]


def _qk_blocks(members: list[tuple[Any, Any]]) -> Optional[dict[str, tuple]]:
    """{"q": (site, stored role, W_eff (out, in), bias), "k": ...}, or None without both."""
    roles = {
        acting: (site, correction, stored)
        for site, correction in members
        for stored, acting in zip(site.layout.roles, site.acts_as or site.layout.roles)
        if acting in "qk"
    }
    if not {"q", "k"} <= roles.keys():
        return None
    effective = {id(site): _effective(site, correction) for site, correction, _ in roles.values()}  # fused q, k: once
    return {
        acting: (site, stored, effective[id(site)], _bias(site))
        for acting, (site, correction, stored) in roles.items()
    }


def _effective(site: Any, correction: Any) -> torch.Tensor:
    """W + C of a site as (out, in), from its built (not yet attached) correction; W when it has none."""
    weight = site.layout.out_in(gathered(getattr(site.module, site.param_name).detach()))  # (out, in), whole
    if correction is None:
        return weight
    return weight + correction.dense_out_in(weight.dtype).to(weight.device)


def _bias(site: Any) -> Optional[torch.Tensor]:
    from speccond.layers import projection_bias

    weight = getattr(site.module, site.param_name)
    out_features = site.layout.out_in(weight).shape[0]
    bias = projection_bias(site.module, site.param_name, out_features, site.layout.roles)
    return None if bias is None else gathered(bias)


@torch.no_grad()  # the module's own norms are run on copies; no graph is wanted
def _lowest_head_entropy(blocks: dict[str, tuple], module: Optional[nn.Module]) -> tuple[float, float]:
    """(lowest mean head entropy with the correction, that head's entropy without it), in nats."""
    q_site, q_role, q_eff, q_bias = blocks["q"]
    k_site, k_role, k_eff, k_bias = blocks["k"]
    in_features = q_eff.shape[1]
    if k_eff.shape[1] != in_features:  # q and k read different inputs (cross-attention): no shared probe
        return math.inf, math.inf
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(PROBE_TOKENS, in_features, generator=generator, dtype=torch.float64)  # (N, D)
    q_heads, k_heads = q_site.layout.heads(q_role), k_site.layout.heads(k_role)
    group = max(q_heads // k_heads, 1)
    head_dim = q_site.layout.head_rows(q_role, 0, q_eff.shape[0]).numel()
    form = _logit_form(q_site.qk_normalised, module, head_dim, (q_eff.shape[0], k_eff.shape[0]))
    if form is None:
        return math.inf, math.inf
    rows = []  # (q rows, k rows) of each query head
    for head in range(q_heads):
        q_rows = q_site.layout.head_rows(q_role, head, q_eff.shape[0])
        k_rows = k_site.layout.head_rows(k_role, head // group, k_eff.shape[0])
        if q_rows.numel() != k_rows.numel():  # a declaration this module's verify would refuse: no prediction
            return math.inf, math.inf
        rows.append((q_rows, k_rows))
    with_c = form.queries_and_keys(x, q_eff, k_eff, q_bias, k_bias)  # (N, q out), (N, k out)
    entropies = [_entropy(*with_c, q_rows, k_rows, form.logits, head) for head, (q_rows, k_rows) in enumerate(rows)]
    lowest = min(range(q_heads), key=entropies.__getitem__)
    q_w, k_w = _effective(q_site, None), _effective(k_site, None)  # (out, in) W, whole (a collective under FSDP2)
    q_rows, k_rows = rows[lowest]
    if form.per_head:  # only the lowest head's rows are needed: a twelfth of the projection on a ViT-B
        pick = lambda t, r: None if t is None else t[r]  # noqa: E731
        plain = form.queries_and_keys(x, q_w[q_rows], k_w[k_rows], pick(q_bias, q_rows), pick(k_bias, k_rows))
        every = torch.arange(q_rows.numel())  # (dh,): the head's rows, now all there is
        return entropies[lowest], _entropy(*plain, every, every, form.logits, lowest)
    plain = form.queries_and_keys(x, q_w, k_w, q_bias, k_bias)
    return entropies[lowest], _entropy(*plain, q_rows, k_rows, form.logits, lowest)


def _entropy(q, k, q_rows, k_rows, logits: Logits, head: int) -> float:
    """Mean entropy of one head's attention; q (N, q out), k (N, k out): every head's, as projected."""
    p = torch.softmax(logits(q[:, q_rows], k[:, k_rows], head), dim=-1)  # (N, N)
    return float(-(p * p.clamp_min(1e-300).log()).sum(-1).mean())


@dataclass(frozen=True)
class _LogitForm:
    """How a module turns its input into one head's logits: q and k projected and, where its norms act over
    the whole projection width (OLMo 2, InternVL), normalised there (``whole_q``, ``whole_k``); then per head,
    ``logits``: (q (N, dh), k (N, dh), head) -> (N, N), with any per-head normalisation."""

    logits: Logits
    whole_q: Callable[[torch.Tensor], torch.Tensor] = lambda t: t
    whole_k: Callable[[torch.Tensor], torch.Tensor] = lambda t: t
    per_head: bool = True  # no norm over the whole width: one head's logits need only that head's rows

    def queries_and_keys(self, x, q_w, k_w, q_bias, k_bias) -> tuple[torch.Tensor, torch.Tensor]:
        q = x @ q_w.double().t()  # (N, q out)
        shared = q_w.shape == k_w.shape and q_w.data_ptr() == k_w.data_ptr() and q_w.stride() == k_w.stride()
        k = q if shared else x @ k_w.double().t()  # (N, k out); a fused qkv weight is projected once
        if q_bias is not None:
            q = q + q_bias.double()
        if k_bias is not None:
            k = k + k_bias.double()
        return self.whole_q(q), self.whole_k(k)


def _logit_form(
    normalised: str, module: Optional[nn.Module], head_dim: int, widths: tuple[int, int]
) -> Optional[_LogitForm]:
    """How ``module`` turns q and k into logits, by how it normalises them (``qk_normalised``): none, scale
    q k^T; norms, the same after its q and k norms (per head or over the projection's whole ``widths``,
    (q out, k out)); cosine, the logit scale of the head times cos(q, k). None where the prediction cannot
    follow (no logit scale to read)."""
    scale = _scale(module, head_dim)
    if not normalised:
        return _LogitForm(lambda q, k, head: scale * q @ k.t())
    if normalised == QK_LAYER_NORM:
        q_norm, k_norm = _module_norms(module, head_dim, widths)
        if q_norm is not None:  # the module's own norms, called on q and k as its forward calls them
            return _LogitForm(lambda q, k, head: scale * q @ k.t(), whole_q=q_norm, whole_k=k_norm, per_head=False)
        standardise = lambda t: F.layer_norm(t, (head_dim,))  # noqa: E731  what such norms are at initialisation
        return _LogitForm(lambda q, k, head: scale * standardise(q) @ standardise(k).t())
    log_scale = getattr(module, "logit_scale", None)
    if normalised == QK_COSINE and isinstance(log_scale, torch.Tensor):
        per_head = log_scale.detach().double().clamp(max=math.log(MAX_LOGIT_SCALE)).exp().flatten()  # (H,) or (1,)
        return _LogitForm(
            lambda q, k, head: per_head[head % per_head.numel()] * F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).t()
        )
    return None


def _module_norms(
    module: Optional[nn.Module], head_dim: int, widths: tuple[int, int]
) -> tuple[Optional[Callable], Optional[Callable]]:
    """Float64 copies of the module's own q and k norms where their parameters are local (not an FSDP2 shard),
    each wrapped to take the projection's whole output (N, width) the way the norm accepts it (``_norm_call``);
    (None, None) where the module has no such pair, or a norm takes none of those shapes."""
    for q_name, k_name in QK_NORM_PAIRS:
        pair = [getattr(module, name, None) for name in (q_name, k_name)]
        if not all(isinstance(norm, nn.Module) and _local(norm) for norm in pair):
            continue
        calls = [_norm_call(copy.deepcopy(norm).double().eval(), head_dim, width) for norm, width in zip(pair, widths)]
        if all(call is not None for call in calls):
            return calls[0], calls[1]
    return None, None


def _local(norm: nn.Module) -> bool:
    parameters = list(norm.parameters())
    return bool(parameters) and all(type(p.data) is torch.Tensor for p in parameters)  # a DTensor (FSDP2): not copied


# How a q or k norm may be called on a projection's output (N, W), W = H dh: over the whole width (OLMo 2,
# InternVL), or per head with the heads before the tokens ((1, H, N, dh): StableLM's per-head LayerNorms split on
# dim 1) or after them ((1, N, H, dh): Cohere's gains of shape (H, dh)); a norm of one head width (Qwen3, timm)
# takes either, with the same result.
_NORM_SHAPES: dict[str, tuple[Callable, Callable]] = {
    "whole width": (lambda t, dh: t, lambda t, dh: t),
    "heads first": (
        lambda t, dh: t.unflatten(-1, (-1, dh)).transpose(0, 1).unsqueeze(0),  # (N, W) -> (1, H, N, dh)
        lambda t, dh: t.squeeze(0).transpose(0, 1).flatten(1),  # -> (N, W)
    ),
    "heads last": (
        lambda t, dh: t.unflatten(-1, (-1, dh)).unsqueeze(0),  # (N, W) -> (1, N, H, dh)
        lambda t, dh: t.squeeze(0).flatten(1),  # -> (N, W)
    ),
}


def _norm_call(norm: nn.Module, head_dim: int, width: int) -> Optional[Callable[[torch.Tensor], torch.Tensor]]:
    """``norm`` as a map (N, width) -> (N, width), in the shape it accepts, found by calling it: on a probe
    whose token count is none of the widths (so a shape that only fits by coincidence fails), each shape of
    ``_NORM_SHAPES`` that runs and keeps the shape is a candidate; every candidate must agree (a norm of one
    head width takes both per-head shapes alike). None where none runs, or they disagree."""
    tokens = width + head_dim + 1  # not H, dh or W: no shape fits by a coincidence of sizes
    probe = torch.randn(tokens, width, generator=torch.Generator().manual_seed(1), dtype=torch.float64)  # (N', W)
    results = []
    for into, back in _NORM_SHAPES.values():
        try:
            out = back(norm(into(probe, head_dim)), head_dim)
        except (RuntimeError, ValueError, IndexError, TypeError):  # a shape this norm does not take
            continue
        if out.shape == probe.shape:
            results.append((into, back, out))
    if not results or any(not torch.allclose(out, results[0][2]) for *_, out in results):
        return None
    into, back, _ = results[0]
    return lambda t: back(norm(into(t, head_dim)), head_dim)


def _scale(module: Optional[nn.Module], head_dim: int) -> float:
    for name in ("scale", "scaling"):
        value = getattr(module, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return head_dim**-0.5
