"""Means with 95 % confidence intervals (Student t) and paired differences, without scipy."""
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
