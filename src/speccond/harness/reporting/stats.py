"""Means with 95 % confidence intervals (Student t), paired differences, paired t-test p-values and Holm's
adjustment for multiple comparisons, without scipy."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

# Two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom; 1.96 beyond.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


@dataclass(frozen=True)
class Interval:
    mean: float
    half_width: float  # the 95 % interval is mean +- half_width (nan with one value)
    n: int

    def __str__(self) -> str:
        """The half width to 2 significant digits and the mean to the same decimal place: "30.6 +- 1.3",
        "0.71 +- 0.62", "39 +- 11"; "87.3 (n=1)" with one value; "10 +- 0" when every value is equal."""
        if math.isnan(self.half_width):
            return f"{self.mean:.4g} (n=1)"
        if self.half_width <= 1e-9 * max(1.0, abs(self.mean)):  # equal values, up to float rounding
            return f"{self.mean:.4g} +- 0"
        if not math.isfinite(self.half_width):
            return f"{self.mean:.4g} +- {self.half_width:.2g}"
        decimals = max(0, 1 - math.floor(math.log10(self.half_width)))
        mean = round(self.mean, decimals) + 0.0  # a mean that rounds to zero reads 0.0, not -0.0
        return f"{mean:.{decimals}f} +- {self.half_width:.{decimals}f}"

    def scaled(self, factor: float) -> "Interval":
        """The same interval in other units (``factor`` 100: fractions as percent or points)."""
        return Interval(factor * self.mean, factor * self.half_width, self.n)


@dataclass(frozen=True)
class Comparison:
    """One arm against the reference, paired by the seeds both finished."""
    arm: str
    seeds: tuple[int, ...]
    difference: Interval  # arm - reference, paired by seed
    p: float  # two-sided paired t-test
    holm: float  # p adjusted by Holm over the m arms compared with the same reference
    m: int

    @property
    def verdict(self) -> str:
        """:func:`verdict` of this comparison's difference and Holm-adjusted p."""
        return verdict(self.difference.mean, self.holm)


def verdict(difference: float, adjusted_p: float) -> str:
    """The project's one verdict: "win" or "loss" (by the sign of the mean ``difference``, arm - reference) when
    the ``adjusted_p`` (Holm) < 0.05, else "tie"."""
    if adjusted_p < 0.05:
        return "win" if difference > 0 else "loss"
    return "tie"


def against_reference(arms: dict[str, dict[int, float]], reference: dict[int, float],
                      min_seeds: int = 2) -> list[Comparison]:
    """Every arm ({seed: figure}) against one ``reference`` ({seed: figure}): :func:`family`."""
    return family([(arm, figures, reference) for arm, figures in arms.items()], min_seeds)


def family(pairs: Sequence[tuple[str, dict[int, float], dict[int, float]]], min_seeds: int = 2) -> list[Comparison]:
    """One family of comparisons, (arm, its {seed: figure}, its reference's {seed: figure}) each: the paired
    difference over the seeds both have, its paired t-test p, and Holm's adjustment over the arms with at
    least ``min_seeds`` common seeds (the others are left out; the order is kept)."""
    paired = []
    for arm, figures, reference in pairs:
        common = tuple(sorted(set(figures) & set(reference)))
        if len(common) >= min_seeds:
            values, baseline = [figures[s] for s in common], [reference[s] for s in common]
            paired.append((arm, common, paired_difference(values, baseline), paired_p_value(values, baseline)))
    adjusted = holm([p for *_, p in paired])
    return [Comparison(arm, common, difference, p, q, len(paired))
            for (arm, common, difference, p), q in zip(paired, adjusted)]


def t95(df: int) -> float:
    return _T95[df - 1] if df <= len(_T95) else 1.96


def mean_interval(values: Sequence[float]) -> Interval:
    """Mean and the half width of its 95 % t interval."""
    n = len(values)
    if n == 0:
        raise ValueError("mean_interval needs at least one value")
    mean = sum(values) / n
    if n == 1:
        return Interval(mean, float("nan"), 1)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return Interval(mean, t95(n - 1) * sd / math.sqrt(n), n)


def paired_difference(values: Sequence[float], reference: Sequence[float]) -> Interval:
    """Mean of values[i] - reference[i] (same seeds) with its 95 % t interval."""
    if len(values) != len(reference):
        raise ValueError(f"paired difference needs the same seeds: {len(values)} vs {len(reference)} values")
    return mean_interval([v - r for v, r in zip(values, reference)])


def paired_p_value(values: Sequence[float], reference: Sequence[float]) -> float:
    """Two-sided p-value of the paired t-test of values[i] - reference[i] (same seeds) against 0: nan with
    fewer than 2 pairs, 1.0 when every difference is 0, 0.0 when they are all equal and not 0."""
    if len(values) != len(reference):
        raise ValueError(f"a paired test needs the same seeds: {len(values)} vs {len(reference)} values")
    differences = [v - r for v, r in zip(values, reference)]
    n = len(differences)
    if n < 2:
        return float("nan")
    mean = sum(differences) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
    if sd <= 1e-12 * max(1.0, abs(mean)):
        return 1.0 if mean == 0 else 0.0
    return t_two_sided_p(mean / (sd / math.sqrt(n)), n - 1)


def t_two_sided_p(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom: I_{df / (df + t^2)}(df / 2, 1 / 2)."""
    return _regularized_beta(df / (df + t * t), df / 2, 0.5)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of m p-values (family-wise error), in the order given: the k-th smallest
    becomes max over j <= k of (m - j + 1) p_(j), capped at 1. nan stays nan and does not count in m."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    adjusted = [float("nan")] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[index] = running
    return adjusted


def _regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b) by its continued fraction (modified Lentz), using the symmetry I_x(a, b) = 1 - I_{1-x}(b, a)
    where the fraction converges slowly."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _regularized_beta(1.0 - x, b, a)
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return math.exp(log_front) * fraction / a
