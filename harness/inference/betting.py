"""A confidence interval for the mean of bounded values that assumes no symmetry: a betting confidence sequence.

Per-seed differences of end states are skewed (rare large jumps between end modes, frequent small drifts), so an
interval built on symmetry or on a normal approximation (t, bootstrap) can miss the mean far more often than its
level at the seed counts used here. Bounded values need neither: Waudby-Smith & Ramdas (2024), "Estimating means of
bounded random variables by betting" (JRSS B), build an interval from the wealth of a gambler who bets that the mean
is not m; where the wealth of the hedged bettor passes 1/α, m is excluded. By Ville's inequality the wealth stays
below 1/α with chance at least 1 − α at every seed count at once (a confidence sequence), so the interval holds for
any distribution on the bounds, and stays valid when seeds are added block by block and the interval looked at
after each.

The bets are the paper's predictable plug-in (PrPl-EB) with its hedged capital process (θ = ½, truncation c = ¾),
on values mapped to [0, 1]. The interval is the set of candidate means never rejected up to the last seed, read off
a grid of GRID_POINTS candidates and widened outward to the neighbouring rejected candidates, so rounding can only
widen it.
"""

from __future__ import annotations

import math

import numpy as np

GRID_POINTS = 4_001
TRUNCATION = 0.75  # the paper recommends ½ to ¾; any value below 1 keeps the wealth a valid bet
HEDGE = 0.5


def _bets(values: np.ndarray, alpha: float) -> np.ndarray:
    """The predictable plug-in bet sizes λ_t (before truncation) for values in [0, 1]: each uses only the values
    before t (the running mean and variance, started at ½ and ¼ as the paper does)."""
    n = len(values)
    t = np.arange(1, n + 1)
    means = (0.5 + np.cumsum(values)) / (t + 1)
    previous_means = np.concatenate([[0.5], means[:-1]])
    variances = (0.25 + np.cumsum((values - previous_means) ** 2)) / (t + 1)
    previous_variances = np.concatenate([[0.25], variances[:-1]])
    return np.sqrt(2 * math.log(2 / alpha) / (previous_variances * t * np.log1p(t)))


def betting_interval(values: np.ndarray, low: float, high: float, confidence: float) -> tuple[float, float]:
    """(low, high) of a confidence sequence for the mean of i.i.d. values that lie in [low, high], at its last value.

    Valid for every distribution on [low, high], at `confidence`, in the given order of the values (the seeds').
    NaN bounds without values or without finite bounds."""
    values = np.asarray(values, dtype=float)
    if len(values) == 0 or not (np.isfinite(low) and np.isfinite(high)) or high <= low:
        return math.nan, math.nan
    alpha = 1 - confidence
    unit = np.clip((values - low) / (high - low), 0.0, 1.0)
    bets = _bets(unit, alpha)
    candidates = np.linspace(0.0, 1.0, GRID_POINTS)
    kept = np.ones(GRID_POINTS, dtype=bool)
    # Chunks of candidates keep the (candidates × seeds) wealth table small at thousands of seeds.
    for start in range(0, GRID_POINTS, 512):
        m = candidates[start : start + 512, None]
        up = np.minimum(bets, TRUNCATION / np.maximum(m, 1e-12))
        down = np.minimum(bets, TRUNCATION / np.maximum(1 - m, 1e-12))
        with np.errstate(divide="ignore"):
            log_up = np.cumsum(np.log1p(up * (unit - m)), axis=1)
            log_down = np.cumsum(np.log1p(-down * (unit - m)), axis=1)
        wealth = np.logaddexp(math.log(HEDGE) + log_up, math.log(1 - HEDGE) + log_down)
        kept[start : start + 512] = np.max(wealth, axis=1) < math.log(1 / alpha)
    if not kept.any():  # cannot happen for a valid sequence: the true mean is never excluded with certainty
        return math.nan, math.nan
    first, last = int(np.argmax(kept)), GRID_POINTS - 1 - int(np.argmax(kept[::-1]))
    lower = candidates[max(first - 1, 0)]
    upper = candidates[min(last + 1, GRID_POINTS - 1)]
    return float(low + lower * (high - low)), float(low + upper * (high - low))
