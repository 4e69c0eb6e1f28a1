"""The forms of a recorded TrainConfig, and reading form 1 as form 2.

Form 2 (config.json's ``"config_form": 2``): lam is a number or "auto", target_kappa is the kappa bound
"auto" aims at (> 1, default 2), as in SpectralConfig. Form 1 (config.json without "config_form", every run
written before form 2): lam was a number, and target_kappa said whether it was used: 0 = lam as recorded,
> 1 = lam "auto" aiming at target_kappa (the recorded lam ignored). The forms cannot be told apart by their
values ({"lam": 10.0, "target_kappa": 2.0} is lam = 10 in form 2 and lam = auto in form 1), hence the
marker. TrainConfig.from_record reads both; new run directories are written in form 2.

The command lines config.json records ("command") and results.json copies are read the same way:
:func:`form_1_arguments` (scripts/retrain_sample.py reruns a published command through it).
"""
from __future__ import annotations

from typing import Sequence

from speccond.core.config import AUTO, SpectralConfig
from speccond.harness.config.fields import arm_settings, setting, sweep_setting

CONFIG_FORM = 2  # config.json's "config_form" (absent: 1)
DEFAULT_TARGET_KAPPA = SpectralConfig.target_kappa  # 2.0: the bound of the SVD correction, and "auto"'s default


def form_1_upgraded(values: dict) -> dict:
    """A config of form 1 (config.json before "config_form") in form 2: target_kappa 0 (off) -> lam as recorded
    and target_kappa 2; target_kappa > 1 -> lam "auto" aiming at it (the recorded lam was ignored). Other
    values are left for validation to refuse."""
    upgraded = dict(values)
    old = upgraded.get("target_kappa", 0.0)  # form 1's default was 0
    if isinstance(old, (int, float)) and not isinstance(old, bool) and old > 1:
        upgraded["lam"] = AUTO
    elif old == 0:
        upgraded["target_kappa"] = DEFAULT_TARGET_KAPPA
    return upgraded


def form_1_arguments(words: Sequence[str]) -> list[str]:
    """A recorded speccond command line of form 1 (config.json's "command" before CONFIG_FORM 2) as this
    speccond reads it: ``--set target_kappa=T`` -> ``--set lam=auto`` (and ``--set target_kappa=T`` unless T is
    2), an arm's ``spectral:target_kappa=2`` -> ``spectral:lam=auto``, ``--sweep target_kappa=2`` ->
    ``--sweep lam=auto``, ``--set target_kappa=0`` (form 1's "off") dropped. A form 2 command comes back
    meaning what it meant. ValueError for a form 1 sweep of target_kappa that includes 0 (lam against lam =
    auto at several bounds has no one sweep now)."""
    out, words = [], list(words)
    index = 0
    while index < len(words):
        flag = words[index]
        value = words[index + 1] if flag in ("--set", "--sweep", "--arms") and index + 1 < len(words) else None
        index += 2 if value is not None else 1
        if value is None:
            out.append(flag)
        elif flag == "--arms":
            out += [flag, ",".join(_form_1_arm(arm) for arm in value.split(","))]
        elif setting(value)[0] != "target_kappa":
            out += [flag, value]
        elif flag == "--set":
            out += [word for pair in _form_1_pairs([value]) for word in ("--set", pair)]
        else:
            bounds = [float(v) for v in sweep_setting(value)[1]]
            if 0 in bounds:
                raise ValueError(f"--sweep {value}: form 1 swept lam against lam=auto; give --sweep lam=...,auto "
                                 "and the bounds in separate comparisons")
            out += (["--sweep", "lam=auto"] if bounds == [DEFAULT_TARGET_KAPPA] else ["--set", "lam=auto", "--sweep", value])
    return out


def _form_1_arm(arm: str) -> str:
    method, pairs = arm_settings(arm)
    return f"{method}:{'+'.join(_form_1_pairs(pairs))}" if pairs else arm


def _form_1_pairs(pairs: Sequence[str]) -> list[str]:
    """Settings of form 1 in form 2: target_kappa=T (T > 1) -> lam=auto (+ target_kappa=T unless T is 2);
    target_kappa=0 dropped."""
    out = []
    for pair in pairs:
        key, text = setting(pair)
        if key != "target_kappa":
            out.append(pair)
        elif float(text) != 0:
            out += [p for p in ("lam=auto", pair if float(text) != DEFAULT_TARGET_KAPPA else None)
                    if p is not None and p not in out]
    return out
