"""The betting interval for a bounded mean (`harness.inference.betting`): coverage by simulation with known truth on
skewed, zero-inflated differences shaped like end-mode jumps, at the seed counts claims use; and what it narrows to."""

from __future__ import annotations

import numpy as np
import pytest

from harness.inference.betting import betting_interval

# Mean zero, skewed: a rare large jump up against frequent small ones down (the review's null B), and the same
# moved to a nonzero mean; both inside ±1.
SKEWED = (np.array([0.764, -0.25, 0.0]), np.array([0.035, 0.107, 0.858]))
HEAVY_TAIL = (np.array([0.95, -0.05, 0.0]), np.array([0.02, 0.3, 0.68]))


def _coverage(support: np.ndarray, chances: np.ndarray, n: int, confidence: float, experiments: int) -> float:
    rng = np.random.default_rng(n)
    truth = float(support @ chances)
    hits = 0
    for _ in range(experiments):
        low, high = betting_interval(rng.choice(support, size=n, p=chances), -1.0, 1.0, confidence)
        hits += low <= truth <= high
    return hits / experiments


@pytest.mark.parametrize("shape", [SKEWED, HEAVY_TAIL], ids=["skewed-null", "heavy-tail"])
@pytest.mark.parametrize("n", [20, 100])
def test_covers_the_true_mean_at_its_level(shape, n):
    # Valid for every distribution in the bounds: at 95% (and at the Bonferroni level of a 17-claim family) the
    # share of intervals missing the truth stays within the level plus 3 binomial sd over 300 experiments.
    for confidence in (0.95, 1 - 0.05 / 17):
        coverage = _coverage(*shape, n, confidence, 300)
        assert coverage >= confidence - 3 * np.sqrt(confidence * (1 - confidence) / 300), (confidence, coverage)


def test_a_constant_narrows_to_it_and_more_seeds_narrow_it():
    low, high = betting_interval(np.full(200, 0.3), -1.0, 1.0, 0.95)
    assert low <= 0.3 <= high and high - low < 0.15
    rng = np.random.default_rng(0)
    values = rng.uniform(-0.5, 0.7, size=1000)
    widths = [np.subtract(*betting_interval(values[:n], -1.0, 1.0, 0.95)[::-1]) for n in (50, 200, 1000)]
    assert widths[0] > widths[1] > widths[2]


def test_the_interval_lies_in_the_bounds_and_is_nan_without_them():
    low, high = betting_interval(np.array([0.9, 1.0, 0.95]), -1.0, 1.0, 0.95)
    assert -1.0 <= low <= high <= 1.0
    assert all(np.isnan(betting_interval(np.array([0.1, 0.2]), -np.inf, np.inf, 0.95)))
    assert all(np.isnan(betting_interval(np.array([]), -1.0, 1.0, 0.95)))
