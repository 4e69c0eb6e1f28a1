"""The harness statistics: paired t-test p-values and Holm's adjustment (harness/reporting/stats.py)."""
from __future__ import annotations

import math
import random

import pytest

from speccond.harness.reporting.stats import holm, paired_p_value, t_two_sided_p


def test_the_paired_t_test_agrees_with_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    generator = random.Random(0)
    for _ in range(300):
        n = generator.randint(2, 12)
        reference = [generator.gauss(0.6, 0.05) for _ in range(n)]
        values = [r + generator.gauss(generator.uniform(-0.05, 0.05), 0.03) for r in reference]
        assert math.isclose(paired_p_value(values, reference), scipy_stats.ttest_rel(values, reference).pvalue,
                            rel_tol=1e-9, abs_tol=1e-12)
    for df in (1, 2, 3, 5, 30, 200):
        for t in (0.0, 0.5, 2.0, 4.3, 12.7, 60.0):
            assert math.isclose(t_two_sided_p(t, df), 2 * scipy_stats.t.sf(t, df), rel_tol=1e-9, abs_tol=1e-15)


def test_a_paired_test_of_degenerate_differences_is_defined():
    assert math.isnan(paired_p_value([0.7], [0.6]))
    assert paired_p_value([0.7, 0.8], [0.7, 0.8]) == 1.0 and paired_p_value([0.7, 0.8], [0.6, 0.7]) == 0.0
    with pytest.raises(ValueError, match="same seeds"):
        paired_p_value([0.7, 0.8], [0.6])


def test_holm_steps_down_keeps_order_and_ignores_nan():
    assert holm([0.01, 0.04, 0.03, 0.005, float("nan")])[:4] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert math.isnan(holm([0.01, float("nan")])[1]) and holm([0.01, float("nan")])[0] == pytest.approx(0.01)
    assert holm([0.5, 0.9]) == [1.0, 1.0] and holm([]) == []
    generator = random.Random(1)
    for _ in range(200):
        p = [generator.random() ** 3 for _ in range(generator.randint(1, 20))]
        adjusted = holm(p)
        assert all(a >= q for a, q in zip(adjusted, p)) and max(adjusted) <= 1.0
        ranked = sorted(range(len(p)), key=p.__getitem__)
        assert all(adjusted[i] <= adjusted[j] for i, j in zip(ranked, ranked[1:]))  # monotone in p


def test_a_family_pairs_each_arm_by_its_common_seeds_and_adjusts_over_the_arms_it_tested():
    from speccond.harness.reporting.stats import against_reference, family

    reference = {0: 0.50, 1: 0.60, 2: 0.55}
    arms = {"up": {0: 0.60, 1: 0.71, 2: 0.64}, "flat": {0: 0.52, 1: 0.58, 2: 0.55}, "one seed": {5: 0.9, 0: 0.9}}
    comparisons = against_reference(arms, reference)
    assert [c.arm for c in comparisons] == ["up", "flat"] and all(c.m == 2 for c in comparisons)  # one seed: left out
    up, flat = comparisons
    assert up.seeds == (0, 1, 2) and math.isclose(up.difference.mean, (0.10 + 0.11 + 0.09) / 3)
    assert up.holm == holm([up.p, flat.p])[0] and flat.holm == holm([up.p, flat.p])[1]
    assert up.verdict == "win" and flat.verdict == "tie"
    loss = family([("down", {s: v - 0.1 - 0.01 * s for s, v in reference.items()}, reference)])[0]
    assert loss.verdict == "loss" and loss.holm == loss.p and loss.difference.scaled(100).mean == pytest.approx(-11)
