"""TrainConfig: one training run, in five typed sections (config/sections.py), validated once.

    config.model.embed_dim, config.data.task, config.method.lam, config.optimizer.lr, config.run.seed

A user says a setting by its flat key (``--set lr=3e-4``, ``--sweep lam=1,10``, an arm's
``spectral:corrected=q``), and config.json, report pages and folder names record the same keys: each field's
own name, except a section's ``name`` (``model``, ``method``, ``optimizer``). :meth:`TrainConfig.with_overrides`
parses ``key=value`` strings to each field's type and rejects unknown keys; :meth:`TrainConfig.replaced` takes
typed values; :meth:`TrainConfig.to_dict` is the flat record, in the key order config.json has always had.

lam is a number or "auto" and target_kappa is the kappa bound "auto" aims at, as in SpectralConfig. Run
directories written before that (config.json without ``"config_form"``) said lam="auto" as target_kappa > 1
and "off" as target_kappa = 0; :meth:`TrainConfig.from_record` reads both forms. The two cannot be told apart
by their values ({"lam": 10.0, "target_kappa": 2.0} is lam = 10 now and was lam = auto then), so config.json
records its form (:data:`CONFIG_FORM`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Sequence

from speccond.harness import methods
from speccond.harness.config.fields import AUTO, NUMBER_OR_AUTO, field_value, setting
from speccond.harness.config.forms import CONFIG_FORM, form_1_upgraded
from speccond.harness.config.sections import (HF_PREFIX, TIMM_PREFIX, DataConfig, MethodConfig, ModelConfig,
                                              OptimizerConfig, RunConfig, unread_bound)
from speccond.harness.values import show_value

__all__ = ["TrainConfig", "folder_settings", "refuse_unread", "refuse_unread_by_the_default_method", "TIMM_PREFIX",
           "HF_PREFIX"]

# The order of config.json's keys since the first published run; keys added later follow in section order.
PUBLISHED_ORDER = (
    "task", "model", "model_args", "method", "lam", "correction", "target_kappa", "corrected", "granularity",
    "refresh_every", "attention_norm", "embed_dim", "depth", "num_heads", "patch_size", "fpn_channels", "epochs",
    "train_size", "val_size", "test_size", "batch_size", "lr", "weight_decay", "warmup_steps", "grad_clip", "seed",
    "checkpoint_every", "track_every", "eval_batch_size", "flush_denormal", "tuning", "landmarks", "device", "mixup",
    "cutmix", "label_smoothing", "drop_path", "precision", "accumulate_steps", "ema_decay", "optimizer", "scheduler",
    "auto_augment", "random_erasing", "compile", "channels_last", "init_from", "num_workers")


@dataclass(frozen=True)
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)  # what is trained
    data: DataConfig = field(default_factory=DataConfig)  # on what
    method: MethodConfig = field(default_factory=MethodConfig)  # with which conditioning
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)  # how it is optimised
    run: RunConfig = field(default_factory=RunConfig)  # how the run is carried out

    def __post_init__(self) -> None:
        for section in dataclasses.fields(self):
            if not isinstance(getattr(self, section.name), _SECTIONS[section.name]):
                raise TypeError(f"TrainConfig.{section.name} must be a {_SECTIONS[section.name].__name__}, "
                                f"got {type(getattr(self, section.name)).__name__}")
        if self.run.tuning and not self.data.val_size:
            raise ValueError("TrainConfig.tuning=1 scores the validation split, so it needs val_size > 0")
        if not 1 <= self.optimizer.accumulate_steps <= self.data.batch_size:
            raise ValueError(f"TrainConfig.accumulate_steps must be between 1 and batch_size ({self.data.batch_size}), "
                             f"got {self.optimizer.accumulate_steps}")
        try:
            self.init_path()
        except (KeyError, IndexError, ValueError, AttributeError) as error:
            raise ValueError(f"TrainConfig.init_from may name TrainConfig keys in braces, e.g. {{method}}, {{seed}}, "
                             f"{{lam:g}}; got {self.model.init_from!r} ({type(error).__name__}: {error})") from None

    @staticmethod
    def keys() -> tuple[str, ...]:
        """Every flat key, in config.json's order."""
        return tuple(_KEYS)

    def value(self, key: str):
        """The value of flat key ``key`` ("lr" -> config.optimizer.lr, "model" -> config.model.name)."""
        section, name = _place(key)
        return getattr(getattr(self, section), name)

    def ignored(self, key: str) -> str:
        """"" when a run of this config reads flat key ``key``, else why it does not, naming who does: the method's
        parameters by methods.py's registry, the model's sizes by models/registry.py's."""
        from speccond.harness import methods
        from speccond.harness.models import registry

        _place(key)  # an unknown key: ValueError naming the known ones
        return methods.ignores(self.method, key) or registry.ignores(self.model.name, key)

    def to_dict(self) -> dict:
        """The flat record {key: value}, what config.json holds."""
        return {key: self.value(key) for key in _KEYS}

    @classmethod
    def from_dict(cls, values: dict) -> "TrainConfig":
        """The config a flat record describes; keys it does not give take their defaults."""
        return cls().replaced(**values)

    def replaced(self, **changes) -> "TrainConfig":
        """A copy with flat keys set to typed values (``replaced(lr=3e-4, seed=1)``), validated as a whole."""
        by_section: dict[str, dict] = {}
        for key, value in changes.items():
            section, name = _place(key)
            by_section.setdefault(section, {})[name] = value
        return dataclasses.replace(self, **{section: dataclasses.replace(getattr(self, section), **values)
                                            for section, values in by_section.items()})

    def with_overrides(self, pairs: Sequence[str]) -> "TrainConfig":
        """A copy with ``key=value`` strings parsed to each field's type (fields.field_value); unknown keys are an
        error. A target_kappa given where lam is a number is refused (it would be ignored; before config form 2,
        target_kappa=T alone asked for lam="auto")."""
        settings = [setting(pair) for pair in pairs]
        bounds = [text for key, text in settings if key == "target_kappa"]
        lams = [text for key, text in settings if key == "lam"]
        try:
            lam = field_value(NUMBER_OR_AUTO, lams[-1]) if lams else self.method.lam
        except ValueError:
            lam = AUTO  # not a lam at all: refused below, saying what a lam reads
        if bounds and lam != AUTO:
            raise ValueError(unread_bound(bounds[-1], show_value(float(lam))))
        changes = {}
        for key, text in settings:
            if key not in _KEYS:
                raise ValueError(f"unknown TrainConfig field {key!r}; known: {sorted(_KEYS)}")
            annotation = _KEYS[key].type  # as a string: "int", "float", "str", "float | str"
            try:
                changes[key] = field_value(annotation, text)
            except ValueError:
                expected = f"float or {AUTO!r}" if annotation == NUMBER_OR_AUTO else annotation
                raise ValueError(f"TrainConfig.{key} expects {expected}, got {text!r}") from None
        return self.replaced(**changes)

    @classmethod
    def from_record(cls, record: dict) -> "TrainConfig":
        """The TrainConfig of a config.json object ({"config": {...}, "config_form": 2, ...}) in either form: one
        without "config_form" is form 1 and is read through :func:`form_1_upgraded`."""
        form = record.get("config_form", 1)
        if form not in (1, CONFIG_FORM):
            raise ValueError(f"config_form {form!r} is not one this speccond reads (1 or {CONFIG_FORM}); a newer "
                             "speccond wrote it: upgrade to read it")
        values = record["config"]
        unknown = set(values) - set(_KEYS)
        if unknown:
            raise ValueError(f"unknown TrainConfig fields {sorted(unknown)}; known: {list(_KEYS)}")
        return cls.from_dict(values if form == CONFIG_FORM else form_1_upgraded(values))

    def init_path(self) -> str:
        """``init_from`` with its ``{key}`` placeholders filled from this config's flat keys."""
        return self.model.init_from.format(**self.to_dict())


_SECTIONS = {"model": ModelConfig, "data": DataConfig, "method": MethodConfig, "optimizer": OptimizerConfig,
             "run": RunConfig}


def _flat_key(section: str, name: str) -> str:
    return section if name == "name" else name


_FIELDS = {_flat_key(section, f.name): (section, f) for section, kind in _SECTIONS.items() for f in dataclasses.fields(kind)}
_ORDER = [key for key in PUBLISHED_ORDER if key in _FIELDS] + [key for key in _FIELDS if key not in PUBLISHED_ORDER]
_KEYS = {key: _FIELDS[key][1] for key in _ORDER}  # flat key -> its dataclasses.Field, in config.json's order


def _place(key: str) -> tuple[str, str]:
    """Flat key -> (section, field name); ValueError naming the known keys."""
    if key not in _FIELDS:
        raise ValueError(f"unknown TrainConfig field {key!r}; known: {sorted(_KEYS)}")
    section, found = _FIELDS[key]
    return section, found.name


def refuse_unread(pairs: Sequence[str], configs: Sequence[TrainConfig], where: str) -> None:
    """ValueError for the first ``key=value`` of ``pairs`` (as the user gave them in ``where``, e.g. "--set") that
    every config of ``configs`` (the runs it ends up in) ignores: it would be recorded, and swept, for runs it
    never changes. A value equal to TrainConfig's default is let through: every run records that one anyway."""
    defaults = TrainConfig()
    for pair in pairs:
        key = setting(pair)[0]
        reasons = [config.ignored(key) for config in configs if config.value(key) != defaults.value(key)]
        if configs and reasons and len(reasons) == len(configs) and all(reasons):
            raise ValueError(f"{where} {pair}: {reasons[0]}; leave it out, or choose a method and model that read it")


def refuse_unread_by_the_default_method(pairs: Sequence[str], config: TrainConfig, where: str) -> None:
    """ValueError for the first ``key=value`` of ``pairs`` that ``config``'s method does not read, whatever its
    value, where ``pairs`` choose no method (so ``config`` has the default one, SVD per head). Until 2026-12-07
    the default was the paper's lam = 10 ("spectral"): a ``--set lam=10`` or ``correction=identity`` written
    for it, at TrainConfig's default value and so let through by :func:`refuse_unread`, would now run SVD per
    head without a word."""
    if any(setting(pair)[0] == "method" for pair in pairs):
        return
    for pair in pairs:
        key = setting(pair)[0]
        reason = config.ignored(key) if key in methods.parameters() else ""
        if reason:
            raise ValueError(f"{where} {pair}: the default method is {config.method.name} (SVD per head; the paper's "
                             f"lam = 10 until 2026-12-07), and {reason}; add --set method=spectral for the paper's "
                             f"method with {pair}, or leave {pair} out")


def folder_settings(pairs: Sequence[str], config: TrainConfig) -> list[str]:
    """``pairs`` (``key=value`` as given) as a run folder's name says them: as given, except that lam=auto is
    named by the bound it aims at, ``target_kappa=T`` (once), as the published runs' folders are
    (``spectral-target_kappa=2``). ``config`` is the config the pairs made."""
    keys = [setting(pair)[0] for pair in pairs]
    if config.method.lam != AUTO or "lam" not in keys:
        return list(pairs)
    bound = [] if "target_kappa" in keys else [f"target_kappa={show_value(float(config.method.target_kappa))}"]
    return [part for pair, key in zip(pairs, keys) for part in (bound if key == "lam" else [pair])]
