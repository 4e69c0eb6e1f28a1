"""docs/results/protocol64-epochs.md (scripts/epoch_differences.py): each arm's paired difference from the
baseline after every epoch, regenerated from the kept archives, equals the committed page; the pairing and the
trend words follow the runs' own figures."""
from __future__ import annotations

import math

import pytest

from tests.scripts import load_script

epochs = load_script("epoch_differences")


def test_the_committed_page_of_per_epoch_differences_is_regenerated_exactly():
    text, _ = epochs.page(epochs.kept_sources())
    assert epochs.PAGE.read_text() == text + "\n", "stale: run scripts/epoch_differences.py --write"


def test_arms_are_paired_with_the_baseline_by_seed_and_epoch():
    arms = {"baseline": {100: {1: 50.0, 2: 60.0}, 101: {1: 52.0, 2: 62.0}},
            "spectral-svd": {100: {1: 53.0, 2: 61.0}, 101: {1: 53.0, 2: 64.0}, 102: {1: 99.0}}}
    found = epochs.differences(arms)["spectral-svd"]
    assert found[1][0] == pytest.approx(2.0) and found[1][2] == 2  # seed 102 has no baseline: left out
    assert found[2][0] == pytest.approx(1.5)
    assert found[1][1] == pytest.approx(12.706 * math.sqrt(2.0) / math.sqrt(2))  # t(1) * sd / sqrt(n); sd of (3, 1)


@pytest.mark.parametrize("first, last, word", [(2.0, 0.5, "fades"), (0.5, 2.0, "grows"), (-1.0, 3.0, "reverses"),
                                                (-5.0, -6.0, "grows")])
def test_the_trend_compares_the_first_epochs_difference_with_the_last(first, last, word):
    assert epochs.trend({1: (first, 0.1, 5), 2: (9.9, 0.1, 5), 3: (last, 0.1, 5)}) == word


def test_every_final_section_has_an_interval_and_the_svd_lead_fades():
    text, panels = epochs.page(epochs.kept_sources())
    final = next(found for title, found in panels.items() if "gpuchoice" in title and "final" in title)
    svd = final["spectral-svd"]
    assert svd[1][0] == pytest.approx(2.0, abs=0.01) and svd[5][0] == pytest.approx(0.53, abs=0.01)
    assert epochs.trend(svd) == "fades" and all(n == 5 for _, _, n in svd.values())
