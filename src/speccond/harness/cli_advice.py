"""The collapse warning's advice in the flags of the command that raised it.

``speccond.apply``'s collapse warning names settings that keep attention spread (speccond/collapse_advice.py,
the one list of them). Under the command line a Python call (``SpectralConfig(correction='svd')``) is no
use: :func:`phrasing` says each setting as the flags of the command that runs, and ``cli.main`` installs it
for the command's duration with ``collapse_advice.phrased``. A setting the command cannot ask for (a lam
per projection under ``inspect``) is not offered.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from speccond.collapse_advice import Phrasing
from speccond.harness.methods import PAPER, RECOMMENDED
from speccond.harness.values import show_value


@dataclass(frozen=True)
class CommandPhrasing:
    """A setting as the flags of ``command``; a value, not a closure, so a worker process can be handed it
    (speccond.collapse_advice.install_phrasing) and warn in the flags of the command that started it."""

    command: str

    def __call__(self, changes: dict) -> Optional[str]:
        if self.command in RUN_COMMANDS:
            return _run_settings(self.command, changes)
        return _model_flags(self.command, changes)


RUN_COMMANDS = ("compare", "train", "tune")  # they take a run's settings (--methods, --set, --arms)
MODEL_COMMANDS = ("inspect", "demo")  # they take --lam, --correction, --target-kappa


def phrasing(command: str) -> Optional[Phrasing]:
    """How ``command`` ("compare", "train", "tune", "inspect", "demo") asks for a setting; None for a command
    that applies no correction."""
    return CommandPhrasing(command) if command in RUN_COMMANDS + MODEL_COMMANDS else None


def _run_settings(command: str, changes: dict) -> Optional[str]:
    """A setting as a run's TrainConfig keys, in the command's flags: ``--methods spectral-svd`` (compare),
    ``--set method=spectral-svd`` (train), ``--arms spectral-svd`` (tune); ``--set lam=auto`` (compare, whose
    default methods include the paper's), ``--set method=spectral --set lam=auto`` (train, whose default method
    is SVD per head) or ``--arms spectral:lam=auto+target_kappa=5``. The harness's lam_q, lam_k, lam_v are one lam and
    ``corrected``, the projections it applies to."""
    if changes.get("correction") == "svd":
        method, pairs = RECOMMENDED, []
    else:
        method = PAPER
        lams = {role: changes.get(f"lam_{role}") for role in "qkv"}
        corrected = "".join(role for role, lam in lams.items() if lam != 0)
        pairs = [f"{key}={show_value(value)}" for key, value in changes.items() if not key.startswith("lam_")]
        if corrected != "qkv":
            pairs.append(f"corrected={corrected}")
    if command == "tune":
        return f"--arms {method}" + (f":{'+'.join(pairs)}" if pairs else "")
    if command == "compare":  # its default methods run the paper's "spectral", which reads the --set pairs
        chosen = [] if method == PAPER else [f"--methods {method}"]
    else:  # train names its method: its default is SVD per head, which reads no lam
        chosen = [f"--set method={method}"]
    return " ".join([*chosen, *(f"--set {pair}" for pair in pairs)])


def _model_flags(command: str, changes: dict) -> Optional[str]:
    """A setting as ``inspect``'s or ``demo``'s flags (--lam, --correction, --target-kappa); None for a lam per
    projection, which they do not take, and for lam = "auto" under demo, which takes a number."""
    flags = []
    for key, value in changes.items():
        if key.startswith("lam_") or (command == "demo" and (key == "target_kappa" or value == "auto")):
            return None
        flags.append(f"--{key.replace('_', '-')} {show_value(value)}")
    return " ".join(flags)
