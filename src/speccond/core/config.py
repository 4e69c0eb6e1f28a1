"""SpectralConfig: what correction to attach, where, and how.

The paper (Saratchandran and Lucey, NeurIPS 2025) adds a fixed matrix C to each of W_Q, W_K, W_V:

    SpecA(X) = softmax(X (W_Q + C_Q)(W_K + C_K)^T X^T) X (W_V + C_V)

with C = lam * I_k (Theorem 3.8, the "identity" correction) or C = sigma_max(W) U V^T from the thin
SVD W = U S V^T (Theorem 3.5, the "svd" correction, which gives kappa(W + C) <= 2).

``SpectralConfig()`` is the setting the README recommends, the SVD correction per head; the correction is
inferred from what is given (a lam names the identity correction), so the paper's setting is one named call,
``SpectralConfig(lam=10.0)`` (``SpectralConfig.paper()``).

Beyond the paper, ``lam="auto"`` picks lam per corrected block (per head with granularity="head") from
the block's sigma_max so that the Weyl bound meets ``target_kappa`` = t:
lam = sigma_max(W_block) (t + 1) / (t - 1) (see ``speccond.core.spectral.auto_lam``).
"""
from __future__ import annotations

import math
import numbers
import re
import warnings
from dataclasses import dataclass, field
from typing import Literal, Mapping, Optional, Sequence, Union

from speccond.core.layout import ProjectionLayout, known_fields

Correction = Literal["identity", "svd"]
Granularity = Literal["head", "projection"]
Backend = Literal["weight", "activation"]
Init = Literal["add", "preserve"]
KeyBasis = Literal["identity", "orthogonal"]
Patterns = Union[str, Sequence[str], None]
Lam = Union[float, Literal["auto"]]

AUTO = "auto"  # lam chosen from sigma_max of each corrected block (identity correction only)
PAPER_LAM = 10.0  # the paper's lam; also the lam an unscaled config records (for svd only non-zero matters)

ROLES = ("q", "k", "v")
_CORRECTIONS = ("identity", "svd")
_GRANULARITIES = ("head", "projection")
_BACKENDS = ("weight", "activation")
_INITS = ("add", "preserve")
_KEY_BASES = ("identity", "orthogonal")


@dataclass(frozen=True)
class SpectralConfig:
    """Configuration of spectral conditioning; validated once, on construction.

    The correction is inferred when not given: "identity" when ``lam`` or any of ``lam_q``, ``lam_k``,
    ``lam_v`` is given, else "svd" (per head). So ``SpectralConfig()`` is the SVD correction per head (every
    head's kappa(W + C) <= 2, the setting the README recommends), ``SpectralConfig(lam=10.0)`` the paper's
    identity correction and ``SpectralConfig(lam="auto")`` the identity correction with lam from sigma_max.
    A record that names no correction (``from_dict`` of a config written before it was inferred) is read as
    the identity correction, what it meant then, with a warning.

    Attributes:
        lam: scale of the identity correction C = lam * I_k (the paper's 10.0; 10.0 when not given), or "auto": for each
            corrected block, lam = sigma_max(W_block) (target_kappa + 1) / (target_kappa - 1), so that the
            Weyl bound kappa(W + lam I_k) <= (lam + sigma_max) / (lam - sigma_max) equals target_kappa
            (3 sigma_max for the default 2). The block is one head's rows (granularity="head") or the
            whole q (k, v) block ("projection"); the bound holds for rectangular blocks too (kappa over
            the min(rows, cols) singular values). Chosen from the weights when applied, recomputed only
            by ``speccond.refresh``; fixed (a buffer, not trained) in between. Identity correction only.
        lam_q, lam_k, lam_v: per-projection overrides of ``lam``: a number, "auto", or None (take
            ``lam``); 0 leaves that projection untouched. Numeric and "auto" roles may be mixed. For
            ``correction="svd"`` only zero versus non-zero matters (the SVD correction has its own
            scale, sigma_max of the weight) and "auto" is refused.
        target_kappa: the kappa bound that "auto" aims at, > 1 (default 2.0, the SVD correction's bound);
            unused by numeric lams.
        correction: "identity" (Theorem 3.8) or "svd" (Theorem 3.5); None (the default): inferred, "identity"
            when a lam is given, else "svd".
        granularity: "head" or "projection". For "svd": "head" makes every head's own block have
            kappa <= 2, "projection" does so for the whole q (k, v) block. For lam="auto": one lam per head
            (every head's kappa <= target_kappa; needs block_out <= in_features or one head, so that every
            head's slice of I_k holds a full diagonal) or one lam per q (k, v) block. Numeric lams ignore it.
        backend: "weight" (a torch parametrization: ``module.weight`` reads W + C) or "activation"
            (a forward hook adds x C^T to the projection's output; needs an nn.Linear-like module).
        key_basis: the identity correction's k block, per k head h with E_h its rows of the rectangular
            identity I_k: "identity" (the paper: C_K = lam E_h) or "orthogonal" (C_K = lam R_h E_h, R_h a
            fixed random dh x dh orthogonal matrix, ``speccond.core.spectral.key_rotations``; the same
            singular values, all lam, so the same Weyl bound kappa(W + C) <= (lam + sigma_max) /
            (lam - sigma_max), and lam="auto" the same lams). The logits then carry lam^2 x_i^T E^T R_h E x_j,
            a fixed random bilinear form, instead of lam^2 times each token's self-similarity x_i^T x_j.
            R_h is drawn once from a fixed seed and saved in the state_dict (refresh keeps it). Identity
            correction only, with k corrected.
        init: "add" (W_eff = W + C, the paper) or "preserve" (stored W becomes W - C, so the model's
            outputs are unchanged at the moment of attaching: for fine-tuning pretrained models).
        targets: regular expressions (``re.search``) on module names; only attention modules or
            projections whose name matches one are conditioned. None: every one found.
        exclude: regular expressions on module names that are never conditioned (wins over targets).
        layouts: declared layouts for projections no adapter knows: maps a regular expression on the
            parameter's qualified name (``re.search``, e.g. ``r"attn\\.to_qkv\\.weight$"``) to its
            :class:`ProjectionLayout`. Declared layouts take precedence over adapters.
    """

    lam: Optional[Lam] = None  # None: not given (PAPER_LAM once built)
    lam_q: Optional[Lam] = None
    lam_k: Optional[Lam] = None
    lam_v: Optional[Lam] = None
    target_kappa: float = 2.0
    correction: Optional[Correction] = None  # None: inferred from whether a lam is given
    granularity: Granularity = "head"
    backend: Backend = "weight"
    key_basis: KeyBasis = "identity"
    init: Init = "add"
    targets: Patterns = None
    exclude: Patterns = None
    layouts: Mapping[str, ProjectionLayout] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.correction is None:
            object.__setattr__(self, "correction", inferred_correction(
                [name for name in ("lam", "lam_q", "lam_k", "lam_v") if getattr(self, name) is not None]))
        if self.lam is None:
            object.__setattr__(self, "lam", PAPER_LAM)
        for name in ("lam", "lam_q", "lam_k", "lam_v"):
            value = getattr(self, name)
            if value is None or (isinstance(value, str) and value == AUTO):
                continue
            if not is_number(value):
                raise TypeError(
                    f"SpectralConfig.{name} must be a number or 'auto', got {type(value).__name__} {value!r}"
                )
            if not math.isfinite(value) or value < 0:
                raise ValueError(
                    f"SpectralConfig.{name} must be finite and >= 0 (0 leaves the projection untouched), "
                    f"got {value!r}"
                )
            object.__setattr__(self, name, plain_number(value))
        if not is_number(self.target_kappa):
            raise TypeError(
                f"SpectralConfig.target_kappa must be a number > 1, got {type(self.target_kappa).__name__} "
                f"{self.target_kappa!r}"
            )
        object.__setattr__(self, "target_kappa", plain_number(self.target_kappa))
        if not math.isfinite(self.target_kappa) or self.target_kappa <= 1:
            raise ValueError(
                f"SpectralConfig.target_kappa must be finite and > 1 (kappa >= 1 always; lam='auto' needs "
                f"room above 1), got {self.target_kappa!r}"
            )
        _check_choice("correction", self.correction, _CORRECTIONS)
        auto = self.auto_roles()
        if auto and self.correction != "identity":
            raise ValueError(
                f"lam='auto' (for {', '.join(auto)}) works only with correction='identity', got "
                f"correction={self.correction!r}: the svd correction already has its own scale, sigma_max(W), "
                "and bounds kappa by 2; give lam a number (only zero versus non-zero matters for svd)"
            )
        _check_choice("granularity", self.granularity, _GRANULARITIES)
        _check_choice("backend", self.backend, _BACKENDS)
        _check_choice("init", self.init, _INITS)
        _check_choice("key_basis", self.key_basis, _KEY_BASES)
        object.__setattr__(self, "targets", _compile_patterns("targets", self.targets))
        object.__setattr__(self, "exclude", _compile_patterns("exclude", self.exclude))
        if not isinstance(self.layouts, Mapping):
            raise TypeError(
                f"SpectralConfig.layouts must map a parameter-name regex to a ProjectionLayout, "
                f"got {type(self.layouts).__name__} {self.layouts!r:.80}"
            )
        for pattern, layout in self.layouts.items():
            _compile_patterns("layouts key", pattern)
            if not isinstance(layout, ProjectionLayout):
                raise TypeError(
                    f"SpectralConfig.layouts[{pattern!r}] must be a speccond.ProjectionLayout, "
                    f"got {type(layout).__name__}"
                )
        object.__setattr__(self, "layouts", dict(self.layouts))
        if self.key_basis == "orthogonal" and self.correction != "identity":
            raise ValueError(
                f"key_basis='orthogonal' turns the identity correction's k block into lam R (R orthogonal), got "
                f"correction={self.correction!r}, whose C = sigma_max U V^T has no lam I to turn; use "
                "correction='identity', or leave key_basis='identity'"
            )
        if self.key_basis == "orthogonal" and self.scale("k") == 0:
            raise ValueError(
                "key_basis='orthogonal' turns k's correction into lam R (R orthogonal), but lam_k=0 leaves k "
                "uncorrected, so it would change nothing; give k a lam (lam_k=None takes lam), or leave "
                "key_basis='identity'"
            )
        if self.correction == "identity":
            small = {r: s for r, s in self.role_scales().items() if s != AUTO and 0 < s <= 2}
            if small:
                warnings.warn(
                    f"identity correction with lam {small} in (0, 2]: Theorem 3.8 states "
                    "kappa(W + lam I_k) < kappa(W) only for lam >= 2 (under conditions), and the Weyl "
                    "bound kappa <= (lam + sigma_max) / (lam - sigma_max) needs lam > sigma_max(W)",
                    UserWarning,
                    stacklevel=3,
                )

    @classmethod
    def paper(cls, **fields) -> "SpectralConfig":
        """The paper's setting, the identity correction lam = 10 on q, k and v: ``SpectralConfig(lam=10.0)``.
        It collapses attention at initialisation at head width 64 (README, "What we recommend")."""
        return cls(lam=PAPER_LAM, **fields)

    def scale(self, role: str) -> Lam:
        """The lam of projection ``role`` ("q", "k" or "v") after per-projection overrides: a float or "auto"."""
        override = getattr(self, f"lam_{role}")
        value = self.lam if override is None else override
        return AUTO if value == AUTO else float(value)

    def role_scales(self) -> dict[str, Lam]:
        return {role: self.scale(role) for role in ROLES}

    def auto_roles(self) -> tuple[str, ...]:
        """The roles whose lam is "auto", in q, k, v order."""
        return tuple(role for role in ROLES if self.scale(role) == AUTO)

    def is_noop(self) -> bool:
        """True when every projection's lam is 0: applying changes nothing."""
        return all(s == 0 for s in self.role_scales().values())

    def selects(self, *names: str) -> bool:
        """Whether a module known by ``names`` (its attention module's and its own) passes ``targets`` and
        ``exclude``: no name excluded, and some name targeted (or no targets given)."""
        if self.exclude and any(p.search(n) for p in self.exclude for n in names):
            return False
        return not self.targets or any(p.search(n) for p in self.targets for n in names)

    def declared_layout(self, parameter_name: str) -> Optional[ProjectionLayout]:
        """The user-declared layout whose regex matches ``parameter_name``, if any."""
        for pattern, layout in self.layouts.items():
            if re.search(pattern, parameter_name):
                return layout
        return None

    def to_dict(self) -> dict:
        """A JSON-serialisable view (patterns as strings, layouts as dicts)."""
        return {
            "lam": self.lam,
            "lam_q": self.lam_q,
            "lam_k": self.lam_k,
            "lam_v": self.lam_v,
            "target_kappa": self.target_kappa,
            "correction": self.correction,
            "granularity": self.granularity,
            "backend": self.backend,
            "key_basis": self.key_basis,
            "init": self.init,
            "targets": [p.pattern for p in self.targets] if self.targets else None,
            "exclude": [p.pattern for p in self.exclude] if self.exclude else None,
            "layouts": {k: v.to_dict() for k, v in self.layouts.items()},
        }

    @classmethod
    def from_dict(cls, values: Mapping) -> "SpectralConfig":
        """The config :meth:`to_dict` describes (speccond.json's ``config``): layouts from their dicts,
        every field checked as the constructor checks it; a key that is not a field is a ValueError naming
        the fields. ``SpectralConfig.from_dict(config.to_dict()) == config`` for every config.

        ``values`` without "correction" (a record written before the correction was inferred) is read as the
        identity correction it meant then; where the default would now read it otherwise (no lam given
        either: the old default, lam = 10 on q, k, v), a UserWarning says so."""
        fields = known_fields(cls, values)
        if fields.get("correction") is None:
            if inferred_correction([n for n in ("lam", "lam_q", "lam_k", "lam_v") if fields.get(n) is not None]) != "identity":
                warnings.warn(OLD_DEFAULT_READ, UserWarning, stacklevel=2)
            fields["correction"] = "identity"
        fields["layouts"] = {k: ProjectionLayout.from_dict(v) for k, v in (fields.get("layouts") or {}).items()}
        return cls(**fields)


OLD_DEFAULT_READ = (
    "this SpectralConfig record names no correction and no lam: it was written when SpectralConfig() was the "
    "paper's identity correction, lam = 10 on q, k, v, and is read as that (SpectralConfig(lam=10.0)); "
    "SpectralConfig() is now the SVD correction per head"
)


def inferred_correction(given: Sequence[str]) -> str:
    """The correction a config that does not name one gets: "identity" when a lam is ``given`` (the names of
    the lam fields set), else "svd"."""
    return "identity" if given else "svd"


def is_number(value: object) -> bool:
    """A real number: int, float or a numpy scalar of either (numbers.Real), never a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def plain_number(value: numbers.Real) -> Union[int, float]:
    """``value`` as a Python int or float (a numpy scalar is not JSON-serialisable, and np.float32 would
    round every lam it meets)."""
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"SpectralConfig.{name} must be one of {choices}, got {value!r}")


def _compile_patterns(name: str, patterns: Patterns) -> Optional[tuple[re.Pattern, ...]]:
    if patterns is None:
        return None
    if isinstance(patterns, re.Pattern):
        return (patterns,)
    if isinstance(patterns, str):
        patterns = [patterns]
    if not isinstance(patterns, (list, tuple, set, frozenset)):
        raise TypeError(
            f"SpectralConfig.{name} must be a regular expression (str) or a list of them, got "
            f"{type(patterns).__name__} {patterns!r:.80}"
        )
    compiled = []
    for pattern in patterns:
        if isinstance(pattern, re.Pattern):
            compiled.append(pattern)
            continue
        if not isinstance(pattern, str):
            raise TypeError(f"SpectralConfig.{name} must be regular expressions (str), got {pattern!r}")
        try:
            compiled.append(re.compile(pattern))
        except re.error as err:
            raise ValueError(f"SpectralConfig.{name}: {pattern!r} is not a valid regular expression: {err}")
    return tuple(compiled)
