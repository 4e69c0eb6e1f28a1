"""What apply's collapse warning recommends instead: a setting the same prediction says keeps this
model's attention spread, with the entropy predicted for it, never one it says collapses.

A fixed sentence cannot know the model: at head width 64 (ViT-Ti/S/B, BERT-base) lam = "auto" collapses
attention at initialisation as lam = 10 does, so "use lam='auto'" would point from one collapse to
another. :func:`advice` runs :func:`speccond.collapse.predict` (through ``predict_for``, which builds a
setting's corrections on the very modules apply selected) on other settings, in the order of
``_settings``, until one keeps every family's lowest head entropy at or above ``COLLAPSE_NATS``, and
names the ones tried before it as collapsing too. It stops at the first, since every prediction builds
every correction of the model again.

Each setting is kept as its changes ({"lam": "auto", "target_kappa": 5.0}) and phrased when the advice is
written: as the Python call ``SpectralConfig(lam='auto', target_kappa=5)`` by default, or, inside
:func:`phrased`, as the front end that applies the config asks for it (the command line names its flags:
``speccond.harness.cli_advice``). One list of settings, one text, whatever the front end.
"""
from __future__ import annotations

import dataclasses
import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator, Optional, Sequence

from speccond.collapse import COLLAPSE_NATS, PROBE_TOKENS, CollapseRisk
from speccond.core.config import AUTO, SpectralConfig

Predictor = Callable[[SpectralConfig], Optional[Sequence[CollapseRisk]]]
# A setting's changes -> how the user asks for it ("--set lam=auto"), or None where that front end cannot.
Phrasing = Callable[[dict], Optional[str]]


def python_call(changes: dict) -> str:
    """The changes as the SpectralConfig call that makes them: {"lam": "auto"} -> "SpectralConfig(lam='auto')"."""
    return f"SpectralConfig({', '.join(f'{key}={_literal(value)}' for key, value in changes.items())})"


_PHRASING: ContextVar[Phrasing] = ContextVar("speccond_advice_phrasing", default=python_call)


def current_phrasing() -> Phrasing:
    """How the advice is phrased here now (:func:`python_call` outside :func:`phrased`): what a worker
    process is handed (picklable) so that its warnings name the same settings the same way."""
    return _PHRASING.get()


def install_phrasing(phrasing: Phrasing) -> None:
    """Phrase the advice through ``phrasing`` for the rest of this thread's life: a worker process's, whose
    every job runs for the command that started it (speccond.harness.protocol.tuning's pool, its engines)."""
    _PHRASING.set(phrasing)


@contextmanager
def phrased(phrasing: Phrasing):
    """Within the block, the collapse warning's advice names its settings through ``phrasing`` (a command
    line's flags) instead of as SpectralConfig calls."""
    token = _PHRASING.set(phrasing)
    try:
        yield
    finally:
        _PHRASING.reset(token)


def advice(config: SpectralConfig, predict_for: Predictor) -> str:
    """The advice of a collapse warning for a model on which ``config`` collapses attention.

    predict_for: a setting -> its predicted risks on this model's selected modules, or None where the
    setting cannot be built there (then it is not offered).
    """
    collapsing = []
    phrase = _PHRASING.get()
    for changes, candidate in _settings(config):
        setting = phrase(changes)
        if setting is None:  # this front end cannot ask for it
            continue
        risks = predict_for(candidate)
        if not risks:
            continue
        lowest = min(risks, key=lambda risk: risk.entropy)
        if lowest.collapses:
            collapsing.append(f"{setting} ({lowest.entropy:.2f} nats)")
            continue
        before = f"it predicts collapse for {', '.join(collapsing)} too; " if collapsing else ""
        return (f"{before}{setting} keeps attention spread: {lowest.entropy:.2f} nats "
                f"predicted for {PROBE_TOKENS} unit-variance tokens, against {lowest.uniform:.2f} for uniform "
                f"attention ({lowest.plain:.2f} without the correction)")
    tried = f"it predicts collapse for {', '.join(collapsing)} too; " if collapsing else ""
    alone = phrase({"lam_q": 0.0, "lam_k": 0.0}) or "lam_q=0, lam_k=0"
    return (f"{tried}no setting tried keeps attention spread: check the module's logit scale, or condition v "
            f"alone ({alone}), which leaves the logits as they are")


def _settings(config: SpectralConfig) -> Iterator[tuple[dict, SpectralConfig]]:
    """Other settings, most recommended first, each unless it is what was applied, as (its changes, the
    config): lam = "auto" (kappa <= 2); the SVD correction (kappa <= 2, per head by default); lam = "auto"
    with a looser kappa target (a smaller lam that still has a Weyl bound); the paper's lam = 10 on q only;
    smaller numeric lams."""
    applied_auto = config.correction == "identity" and config.auto_roles() == ("q", "k", "v")
    if not (applied_auto and config.target_kappa == 2.0):
        yield {"lam": AUTO}, _variant(config, lam=AUTO, target_kappa=2.0)
    if config.correction != "svd":
        yield {"correction": "svd"}, _variant(config, correction="svd", lam=1.0)
    for t in (5.0, 20.0):
        if not applied_auto or t > config.target_kappa:
            yield {"lam": AUTO, "target_kappa": t}, _variant(config, lam=AUTO, target_kappa=t)
    if config.role_scales() != {"q": 10.0, "k": 0.0, "v": 0.0}:
        yield {"lam": 10.0, "lam_k": 0.0, "lam_v": 0.0}, _variant(config, lam=10.0, lam_k=0.0, lam_v=0.0)
    numeric = [s for s in config.role_scales().values() if s != AUTO and s > 0]
    ceiling = max(numeric) if numeric and config.correction == "identity" else float("inf")
    for lam in (3.0, 1.0, 0.3, 0.1):
        if lam < ceiling:
            yield {"lam": lam}, _variant(config, lam=lam)


def _literal(value: object) -> str:
    """A value as the advice writes it: 10.0 as 10, "auto" as 'auto'."""
    return f"{value:g}" if isinstance(value, float) else repr(value)


def _variant(config: SpectralConfig, **changes) -> SpectralConfig:
    """``config`` with ``changes`` on the identity/svd choice and lams; targets, layouts, backend kept; k's
    correction the identity's (key_basis="identity"), as the advice's text, which does not name it, says."""
    changes = {"lam_q": None, "lam_k": None, "lam_v": None, "correction": "identity", "key_basis": "identity",
               **changes}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lam <= 2 warns about Theorem 3.8; the advice says what it predicts
        return dataclasses.replace(config, **changes)
