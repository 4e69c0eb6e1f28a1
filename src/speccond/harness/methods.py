"""The methods a comparison trains, applied in place to a freshly built model: ``apply_method(model, config.method)``.

Every method targets the same q, k, v projections that ``speccond.apply`` conditions
(``speccond.adapters.find_projections`` with the default SpectralConfig), so the peers differ from the
fixed correction only in what they do to those projections:

- "baseline": nothing.
- "spectral": W + C with the fixed correction C (lam, correction) of Saratchandran and Lucey (2025);
  ``key_basis=orthogonal`` corrects k by lam R per head instead of lam I (R a fixed random orthogonal matrix,
  SpectralConfig.key_basis): the arm "spectral:lam=auto+target_kappa=5+key_basis=orthogonal" is lam = auto at
  the bound kappa <= 5 with k so corrected.
- "spectral-svd": W + C with the fixed SVD correction C = sigma_max U V^T.
- "shifted-init": W0 + lam I baked into the initial weights, no correction afterwards (the ablation that
  asks whether the fixed correction matters beyond initialisation, docs/THEORY.md section 3).
- "sigma-reparam": W_hat = gamma / sigma(W) * W per q, k, v block, gamma learnable (Zhai et al., 2023).
- "sigma-reparam-all": the same on every Linear and Conv2d, each one matrix, weights redrawn with std
  0.02, as the authors apply it (peers/sigma_reparam_all.py).
- "spectral-norm": W_hat = W / sigma(W) per q, k, v block (Miyato et al., 2018).
- "qk-norm": LayerNorm over head_dim on every head of q and of k before the logits (Dehghani et al., 2023).
- "layer-scale": gamma * attention(x), gamma learnable per channel from 0.1 (Touvron et al., 2021).
- "spectral-qk-norm": "spectral" and then "qk-norm" on the same model: the correction's kappa bound with
  logits bounded by the head width instead of growing with lam.

The peers are the public functions of :mod:`speccond.peers`. Each method is one :class:`Method` in
:data:`REGISTRY`: its name, how it is applied, the TrainConfig fields it reads beyond the shared ones,
and whether it conditions q, k, v. Everything else derives from the registry: the names TrainConfig
and the command line accept (:data:`METHODS`), the report's grouping (a baseline run ignores lam),
labels, and the fields a pre-trained encoder must share. A new method is a function and one
``register`` line.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Protocol

from torch import nn

from speccond import peers
import speccond
from speccond.core.config import AUTO, PAPER_LAM
from speccond.harness.values import show_value

log = logging.getLogger(__name__)

# Fields only a correction that follows the weights reads (an SVD correction, or lam="auto"): the block it is
# computed per (granularity) and how often it is recomputed (refresh_every). A fixed lam * I is the same per head
# and per projection, and speccond.refresh leaves it as it is.
FOLLOWING_WEIGHTS = ("granularity", "refresh_every")

# Fields a label shows only when they differ from TrainConfig's default (when the method reads them).
LABELLED_WHEN_SET = {"corrected": "qkv", "granularity": "head", "key_basis": "identity", "refresh_every": 0}


class MethodSettings(Protocol):
    """What a method reads: the method section of a run's config (config/sections.py, MethodConfig, which is
    ``config.method`` of a TrainConfig). Named here so that this registry, which MethodConfig checks its
    ``name`` against, imports no config."""

    name: str  # the method: one of METHODS
    lam: float | str  # a number or "auto" (SpectralConfig's)
    target_kappa: float  # the bound lam="auto" aims at
    corrected: str
    correction: str
    granularity: str
    key_basis: str  # "identity" or "orthogonal": k's identity correction lam I or lam R per head
    refresh_every: int


@dataclass(frozen=True)
class Method:
    """One method a comparison can train.

    Attributes:
        name: what the method key (``TrainConfig.method.name``) and ``--methods`` say.
        apply: applies it in place to a freshly built model, given the run's method settings (MethodSettings).
        reads: the TrainConfig fields it depends on beyond the shared ones (the others never change its runs).
        conditions: whether it conditions q, k, v with speccond (a pre-trained encoder must then match the
            conditioning fields, pretrained.py).
        follows_weights: whether, under the given settings, its correction follows the weights (it then reads
            FOLLOWING_WEIGHTS, when ``reads`` names them).
    """

    name: str
    apply: Callable[[nn.Module, MethodSettings], None]
    reads: tuple[str, ...] = ()
    conditions: bool = False
    follows_weights: Callable[[MethodSettings], bool] = lambda settings: False


REGISTRY: dict[str, Method] = {}


def register(method: Method) -> Method:
    """Add ``method`` to the registry (its name must be new)."""
    if method.name in REGISTRY:
        raise ValueError(f"method {method.name!r} is registered twice")
    REGISTRY[method.name] = method
    return method


def apply_method(model: nn.Module, settings: MethodSettings) -> None:
    """Apply ``settings.name`` to ``model`` in place (a freshly built model, not yet trained).

    Raises:
        ValueError: the method is unknown; the model has no q, k, v projections speccond recognises (or
            attention that no adapter covers); a projection already carries a parametrization; qk-norm was
            asked for an attention that reads its weight directly or already normalises q and k.
    """
    method = REGISTRY.get(settings.name)
    if method is None:
        raise ValueError(f"unknown method {settings.name!r}; known methods: {', '.join(REGISTRY)}")
    method.apply(model, settings)
    log.info("applied method %s to %s", method.name, type(model).__name__)


def parameters() -> tuple[str, ...]:
    """Every field some method reads, in registration order."""
    return tuple(dict.fromkeys(field for method in REGISTRY.values() for field in method.reads))


def reads(method: str, field: str) -> bool:
    """Whether runs of ``method`` depend on ``field``: any field that is not a method parameter, and the
    method's own parameters (an unknown method, read from an old run: all of them)."""
    known = REGISTRY.get(method)
    return field not in parameters() or known is None or field in known.reads


def ignores(settings: MethodSettings, field: str) -> str:
    """"" when runs of method ``settings.name`` with these settings depend on ``field``, else why they do not,
    naming who does read it (``reads`` and ``Method.follows_weights``)."""
    known = REGISTRY.get(settings.name)
    if known is None or field not in parameters():
        return ""
    if field not in known.reads:
        readers = [method.name for method in REGISTRY.values() if field in method.reads]
        return f"method {known.name!r} does not read {field} ({', '.join(readers)} read it)"
    if field in FOLLOWING_WEIGHTS and not known.follows_weights(settings):
        return (f"method {known.name!r} with correction={settings.correction!r} and lam={show_value(settings.lam)} "
                f"adds a fixed lam * I, which {field} does not change (correction=svd or lam=auto read it)")
    return ""


def label(values: dict) -> str:
    """A label from a method's settings (the fields it reads, see ``reads``), e.g. "baseline",
    "spectral lam=10", "spectral lam=auto(kappa<=50) correction=svd", "spectral-svd granularity=projection"."""
    parts = [values["method"]]
    if values.get("lam") == AUTO:
        parts.append(f"lam=auto(kappa<={show_value(values['target_kappa'])})")
    elif "lam" in values:
        parts.append(f"lam={show_value(values['lam'])}")
    if values.get("correction", "identity") != "identity":
        parts.append(f"correction={values['correction']}")
    parts += [f"{name}={show_value(values[name])}" for name, default in LABELLED_WHEN_SET.items()
              if name in values and values[name] != default]
    return " ".join(parts)


# -- the methods -----------------------------------------------------------------------------------------
def _spectral(model: nn.Module, settings: MethodSettings) -> None:
    speccond.apply(model, speccond.SpectralConfig(
        lam=settings.lam, correction=settings.correction, granularity=settings.granularity,
        target_kappa=settings.target_kappa, key_basis=settings.key_basis, **_scales(settings)))


def _spectral_svd(model: nn.Module, settings: MethodSettings) -> None:
    """The SVD correction on the projections in settings.corrected. It does not read lam (the registry says so):
    for "svd" a projection's lam only says corrected (non-zero) or not, so each corrected one gets
    SpectralConfig's default lam, whatever settings.lam is (lam=0 would otherwise correct nothing)."""
    on = PAPER_LAM  # 10.0, the value every run of this method has recorded
    scales = {f"lam_{role}": (on if role in settings.corrected else 0.0) for role in "qkv"}
    speccond.apply(model, speccond.SpectralConfig(correction="svd", granularity=settings.granularity, **scales))


def _shifted_init(model: nn.Module, settings: MethodSettings) -> None:
    """W0 + C as a plain initialisation: weight decay then pulls it to 0, not to C."""
    speccond.apply(model, speccond.SpectralConfig(
        lam=settings.lam, granularity=settings.granularity, target_kappa=settings.target_kappa,
        key_basis=settings.key_basis, **_scales(settings)))
    speccond.remove(model, merge=True)


def _spectral_qk_norm(model: nn.Module, settings: MethodSettings) -> None:
    """W + C (as "spectral"), then qk-norm (every head's q and k normalised before the logits): the fixed
    correction keeps its Weyl bound on kappa(W + C), and the logits are bounded by the head width (q and k of
    norm sqrt(dh) at LayerNorm's initial unit gain), not by lam: the lam^2 self-similarity that W_q + lam I and
    W_k + lam I add no longer grows with lam. Attention still leans to each token's own key, more so the
    wider the head (tests/test_methods.py measures one head of width 16: 1.46 nats at lam = 10 and at
    lam = 1000, 2.83 uniform, one-hot for lam = 10 alone)."""
    _spectral(model, settings)
    peers.qk_norm(model)


def _scales(settings: MethodSettings) -> dict[str, float | str]:
    """lam_q, lam_k, lam_v: the lam for the projections in settings.corrected, 0 (untouched) for the rest."""
    return {f"lam_{role}": (settings.lam if role in settings.corrected else 0.0) for role in "qkv"}


def _svd_or_auto(settings: MethodSettings) -> bool:
    """Whether an identity-or-svd correction follows the weights: an SVD one, or lam="auto" (from sigma_max)."""
    return settings.correction == "svd" or settings.lam == AUTO


_CONDITIONING = ("corrected", "granularity", "target_kappa", "key_basis")
register(Method("baseline", lambda model, settings: None))
register(Method("spectral", _spectral, ("lam", "correction", *_CONDITIONING, "refresh_every"), conditions=True,
                follows_weights=_svd_or_auto))
register(Method("spectral-svd", _spectral_svd, ("corrected", "granularity", "refresh_every"), conditions=True,
                follows_weights=lambda settings: True))
register(Method("shifted-init", _shifted_init, ("lam", *_CONDITIONING), conditions=True,
                follows_weights=lambda settings: settings.lam == AUTO))
register(Method("sigma-reparam", lambda model, settings: peers.sigma_reparam(model)))
register(Method("sigma-reparam-all", lambda model, settings: peers.sigma_reparam_all_layers(model)))
register(Method("spectral-norm", lambda model, settings: peers.spectral_norm(model)))
register(Method("qk-norm", lambda model, settings: peers.qk_norm(model)))
register(Method("layer-scale", lambda model, settings: peers.layer_scale(model)))
register(Method("spectral-qk-norm", _spectral_qk_norm, ("lam", "correction", *_CONDITIONING, "refresh_every"),
                conditions=True, follows_weights=_svd_or_auto))
# What ``speccond compare`` and ``tune`` run when no methods are named: the baseline, the setting the README
# recommends (SVD per head), the paper's (lam = 10 on q, k, v: "spectral" at TrainConfig's default lam) and the
# best peer of the registered protocol (qk-norm, docs/RESULTS.md, "The best peer").
RECOMMENDED = "spectral-svd"
PAPER = "spectral"
BEST_PEER = "qk-norm"
DEFAULT_COMPARISON = ("baseline", RECOMMENDED, PAPER, BEST_PEER)
METHODS = tuple(REGISTRY)  # in registration order: what the method key (TrainConfig.method.name) and --methods accept
